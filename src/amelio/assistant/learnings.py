"""The reflect loop: corrections become rules injected into every later prompt.

Each learning is one item with an id, a source (``fixit``, ``negative``,
``manual``, ``sage``), an optional skill scope and ``helpful``/``harmful``
counters. Items are added, retired or edited one at a time and never rewritten
wholesale, because a wholesale rewrite of accumulated context loses what was
learned. The same rule is stored once (normalized comparison); a near-duplicate
merges into the existing item.

The database is the source of truth, mirrored both ways to
``<workspace>/projects/<project>/learnings.md`` in the seed's format::

    # Learnings
    > …
    ## Rules
    - [2026-04-03T14:22:00Z] [fixit] Always use t-call for translations in Odoo QWeb
    ## Skill: deployment
    - [2026-04-03T15:10:00Z] [negative] Avoid sudo in deployment scripts

A hand edit of that file is read back (see :func:`sync_file`) before the
learnings are next used: added lines become learnings, removed lines retire
theirs, and a malformed line is reported with its line number while the rest
loads. Nothing a person typed is dropped: unreadable lines are kept, verbatim,
at the end of the file.

Under ``pii_scrub = all`` a rule is scrubbed (:mod:`amelio.privacy.pii`) before it is
stored, whichever way it comes in (added, or typed into learnings.md and read
back), and so is every line written to the mirror, unreadable ones included:
the file is storage too, and a rule never needs a person's phone number.

The database layer (SQLAlchemy) is imported by the functions that use it, so the
names and parsers here cost nothing to import (``amelio learnings --help``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from amelio.errors import InvalidInput, NotFound, ProjectNotFound
from amelio.text import normalize
from amelio.workspace.projects import DEFAULT_PROJECT, ensure_project, project_id

if TYPE_CHECKING:
    import sqlalchemy as sa

    from amelio.workspace.folder import Workspace

__all__ = [
    "HEADERS",
    "SOURCES",
    "STATES",
    "Learning",
    "LearningsBlock",
    "Origin",
    "ParseError",
    "Source",
    "SyncReport",
    "add_learning",
    "delete_learning",
    "learnings_path",
    "list_learnings",
    "parse_learnings_md",
    "prompt_block",
    "record_outcome",
    "render_learnings_md",
    "sync_file",
]

log = logging.getLogger(__name__)

Source = Literal["fixit", "negative", "manual", "sage"]
SOURCES: tuple[str, ...] = get_args(Source)
#: A learning's life: a candidate waits for a person; an active one is in prompts; a
#: superseded one was replaced by a newer one that contradicted it; a retired one is
#: out of prompts for good (deleted, rejected, retired by a proposal or feedback).
STATES = ("candidate", "active", "superseded", "retired")
HEADERS = {
    "en": "LEARNINGS (past corrections — follow these rules):",
    "fr": "LEARNINGS (corrections passées — suivre ces règles) :",
}
MAX_RULE_CHARS = 2000
_LINE = re.compile(r"^-\s+\[(?P<ts>[^\]]+)\]\s+\[(?P<source>[^\]]+)\]\s+(?P<rule>\S.*)$")
_SKILL_HEADING = re.compile(r"^##\s+Skill:\s*(?P<skill>\S+)\s*$", re.IGNORECASE)
_UNREADABLE_HEADING = "## Unreadable lines"
#: learnings.md files this process knows to match the database: path -> (mtime_ns, size).
_in_sync: dict[Path, tuple[tuple[int, int, int, int], str]] = {}
#: A learnings.md changed this recently is read even when its signature matches.
_RACY_S = 2.0


@dataclass(frozen=True)
class Learning:
    id: int
    project: str
    skill: str | None
    rule: str
    source: str
    status: str
    helpful: int
    harmful: int
    occurrences: int
    created_at: datetime
    last_seen_at: datetime
    retired_reason: str | None = None
    sources: tuple[dict[str, Any], ...] = ()
    author: str | None = None
    reviewed_by: str | None = None
    reviewed_at: datetime | None = None
    held_reason: str | None = None
    supersedes_id: int | None = None
    superseded_by: int | None = None
    retire_proposal: dict[str, Any] | None = None

    def provenance(self) -> str:
        """Where it came from, in a few words: "taught 3× (feedback 4, 9, 12)"."""
        feedback = sorted({int(s["feedbackId"]) for s in self.sources if s.get("feedbackId")})
        shown = ", ".join(map(str, feedback[:8])) + (" …" if len(feedback) > 8 else "")
        return f"taught {self.occurrences}×" + (f" (feedback {shown})" if feedback else "")

    @property
    def rejected(self) -> bool:
        """A candidate a person rejected (a later repeat does not bring it back)."""
        return _rejected(self)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "project": self.project,
            "skill": self.skill,
            "rule": self.rule,
            "source": self.source,
            "status": self.status,
            "helpful": self.helpful,
            "harmful": self.harmful,
            "occurrences": self.occurrences,
            "createdAt": self.created_at.isoformat(),
            "lastSeenAt": self.last_seen_at.isoformat(),
            "retiredReason": self.retired_reason,
            "sources": list(self.sources),
            "author": self.author,
            "reviewedBy": self.reviewed_by,
            "reviewedAt": self.reviewed_at.isoformat() if self.reviewed_at else None,
            "heldReason": self.held_reason,
            "supersedes": self.supersedes_id,
            "supersededBy": self.superseded_by,
            "retireProposal": self.retire_proposal,
        }


@dataclass(frozen=True)
class Origin:
    """What taught a learning: the feedback and interaction behind it, and who.

    ``reviewed``: a person entitled to change prompts wrote it (the CLI, an admin
    key), so ``learnings_review = "queue"`` does not hold it back.
    """

    feedback_id: int | None = None
    interaction_id: int | None = None
    author: str | None = None
    reviewed: bool = False

    def entry(self, source: str, at: datetime) -> dict[str, Any]:
        return {
            "source": source,
            "feedbackId": self.feedback_id,
            "interactionId": self.interaction_id,
            "author": self.author,
            "at": at.isoformat(),
        }


@dataclass(frozen=True)
class ParseError:
    line: int
    message: str
    text: str


@dataclass(frozen=True)
class ParsedLine:
    rule: str
    source: str
    at: datetime
    skill: str | None


@dataclass(frozen=True)
class SyncReport:
    added: int = 0
    retired: int = 0
    errors: tuple[ParseError, ...] = ()
    changed: bool = False


@dataclass(frozen=True)
class LearningsBlock:
    text: str
    ids: tuple[int, ...]


# -- helpers ----------------------------------------------------------------------------


@cache
def _columns() -> tuple[sa.Column[Any], ...]:
    """Every column but the embedding (a kilobyte a row, read only to compare)."""
    from amelio.db.schema import learnings

    return tuple(c for c in learnings.c if c.name != "embedding")


def _rejected(row: Any) -> bool:
    """Retired by a person's rejection, not by an approved retire proposal (after
    which a new correction may teach it again)."""
    approved = (row.retire_proposal or {}).get("status") == "approved"
    return row.status == "retired" and row.reviewed_by is not None and not approved


def _key(rule: str) -> str:
    return hashlib.sha256(normalize(rule).encode("utf-8")).hexdigest()


def _row(row: sa.Row[Any], project: str) -> Learning:
    m = row._mapping
    return Learning(
        id=m["id"],
        project=project,
        skill=m["skill"],
        rule=m["rule"],
        source=m["source"],
        status=m["status"],
        helpful=m["helpful"],
        harmful=m["harmful"],
        occurrences=m["occurrences"],
        created_at=m["created_at"],
        last_seen_at=m["last_seen_at"],
        retired_reason=m["retired_reason"],
        sources=tuple(m["sources"] or ()),
        author=m["author"],
        reviewed_by=m["reviewed_by"],
        reviewed_at=m["reviewed_at"],
        held_reason=m["held_reason"],
        supersedes_id=m["supersedes_id"],
        superseded_by=m["superseded_by"],
        retire_proposal=None if m["retire_proposal"] is None else dict(m["retire_proposal"]),
    )


def _clean_rule(rule: str) -> str:
    text = " ".join(str(rule).split())
    if not text:
        raise InvalidInput("A learning needs a non-empty rule.", field="rule")
    if len(text) > MAX_RULE_CHARS:
        raise InvalidInput(
            f"A learning is at most {MAX_RULE_CHARS:,} characters; this one is {len(text):,}.",
            field="rule",
        )
    return text


def _check_source(source: str) -> str:
    if source not in SOURCES:
        raise InvalidInput(
            f"Unknown learning source {source!r}; use one of: {', '.join(SOURCES)}.", field="source"
        )
    return source


def learnings_path(ws: Workspace, project: str) -> Path:
    return ws.root / "projects" / project / "learnings.md"


# -- writes -----------------------------------------------------------------------------


#: Provenance entries kept per learning (the oldest and the newest); its
#: ``occurrences`` still counts every correction.
MAX_SOURCES = 50


@dataclass(frozen=True)
class _Decision:
    """What a new rule is to the learnings already stored (see :mod:`likeness`)."""

    relation: str  # "same", "contradicts" or "other"
    target: int | None = None
    via: str = "heuristic"  # or "llm"


_SCOPE_STATES = ("active", "candidate", "retired")


#: Embedding models this process found it cannot load: learnings go by words alone,
#: said once in the log rather than on every prompt.
_UNAVAILABLE: set[str] = set()


def _vector(ws: Workspace, rule: str) -> Any:
    """The rule's (or message's) unit vector under the search embedding model, or
    None when none is set or it cannot be loaded here (``amelio[semantic]``)."""
    from amelio.embeddings import EmbedderUnavailable, embed_matrix, load_embedder

    name = ws.settings.search_embedding_model
    if not name or name in _UNAVAILABLE:
        return None
    try:
        embedder = load_embedder(name, setting="AMELIO_SEARCH_EMBEDDING_MODEL")
    except EmbedderUnavailable as exc:
        _UNAVAILABLE.add(name)
        log.info("learnings are compared by their words only: %s", exc.message)
        return None
    return embed_matrix(embedder, [rule])[0]


def _scope(conn: sa.Connection, pid: int, skill: str | None, after_id: int = 0) -> list[Any]:
    """The learnings a new rule for ``skill`` is compared with: the active and
    candidate ones of its skill and the general ones (all, for a general rule),
    and those a person rejected (a repeat of a rejected rule must not come back)."""
    import sqlalchemy as sa

    from amelio.db.schema import learnings

    query = sa.select(
        learnings.c.id,
        learnings.c.rule,
        learnings.c.skill,
        learnings.c.status,
        learnings.c.reviewed_by,
        learnings.c.supersedes_id,
        learnings.c.embedding,
    ).where(
        learnings.c.project_id == pid,
        learnings.c.id > after_id,
        sa.or_(
            learnings.c.status.in_(("active", "candidate")),
            sa.and_(learnings.c.status == "retired", learnings.c.reviewed_by.is_not(None)),
        ),
    )
    if skill is not None:
        query = query.where(sa.or_(learnings.c.skill.is_(None), learnings.c.skill == skill))
    return list(conn.execute(query).all())


def _decide(ws: Workspace, rule: str, vector: Any, rows: Sequence[Any], *, llm: bool) -> _Decision:
    """Compare ``rule`` with ``rows``: a contradiction of an active learning first (it
    must reach a person), then the closest paraphrase. With ``llm``, the configured
    model judges the topical neighbours, and the heuristic decides when it cannot."""
    from amelio.assistant import likeness

    if not rows:
        return _Decision("other")
    thresholds = likeness.Thresholds(
        same_cosine=ws.settings.learnings_merge_cosine,
        lexical_only=ws.settings.learnings_merge_similarity,
    )
    cosines: list[float | None] = [None] * len(rows)
    if vector is not None:
        import numpy as np

        embedded = [
            i
            for i, row in enumerate(rows)
            if row.embedding is not None and len(row.embedding) == vector.nbytes
        ]
        if embedded:
            matrix = np.frombuffer(
                b"".join(rows[i].embedding for i in embedded), dtype=np.float32
            ).reshape(len(embedded), -1)
            for i, cos in zip(embedded, (matrix @ vector).tolist(), strict=True):
                cosines[i] = cos
    relations: list[str] = []
    for row, cos in zip(rows, cosines, strict=True):
        # Far apart in meaning: not worth the word-level tests (no pair of the fixture's
        # paraphrases or contradictions is under it; benchmarks/learnings.py).
        if cos is not None and cos < likeness.FAR:
            relations.append("other")
            continue
        relation = likeness.relate(rule, row.rule, cos, thresholds)
        if relation == "contradicts" and row.status != "active":
            relation = "other"  # only what is in prompts can be superseded
        relations.append(relation)
    via = "heuristic"
    if llm:
        topical = sorted(
            (
                i
                for i, row in enumerate(rows)
                if row.status == "active"
                and (
                    (cosines[i] or 0.0) >= thresholds.topic_cosine
                    or likeness.lexical(rule, row.rule) >= thresholds.topic_lexical
                )
            ),
            key=lambda i: -(cosines[i] or 0.0),
        )[:3]
        for i in topical:
            said = likeness.llm_relation(ws, rule, rows[i].rule)
            if said is not None:
                relations[i] = said
                via = "llm"

    def score(i: int) -> float:
        cos = cosines[i]
        return cos if cos is not None else likeness.lexical(rule, rows[i].rule)

    contra = [i for i, r in enumerate(relations) if r == "contradicts"]
    same = sorted((i for i, r in enumerate(relations) if r == "same"), key=lambda i: -score(i))
    if contra:
        targets = {rows[i].id for i in contra}
        # A repeat of a pending contradiction joins it instead of a second proposal.
        joined = [i for i in same if rows[i].supersedes_id in targets]
        if joined:
            return _Decision("same", rows[joined[0]].id, via)
        return _Decision("contradicts", rows[max(contra, key=score)].id, via)
    if same:
        return _Decision("same", rows[same[0]].id, via)
    return _Decision("other", None, via)


def _merge(
    conn: sa.Connection,
    existing: Any,
    skill: str | None,
    at: datetime,
    entry: dict[str, Any],
    vector: Any = None,
) -> None:
    """Count a correction that says an existing learning again, keeping its source.

    The learning's embedding becomes the mean of the wordings it was taught in
    (weighted by how often each came): the next paraphrase is then compared with
    what people said, not only with the first wording."""
    from amelio.db.schema import learnings, utcnow

    sources = [*existing.sources, entry]
    if len(sources) > MAX_SOURCES:
        sources = sources[: MAX_SOURCES // 2] + sources[-(MAX_SOURCES // 2) :]
    values: dict[str, Any] = {
        "updated_at": utcnow(),
        "occurrences": existing.occurrences + 1,
        "last_seen_at": max(existing.last_seen_at, at),
        "sources": sources,
    }
    if existing.skill != skill:  # a rule two skills were taught applies to all
        values["skill"] = None
    if (
        vector is not None
        and existing.embedding is not None
        and len(existing.embedding) == vector.nbytes
    ):
        import numpy as np

        mean = np.frombuffer(existing.embedding, dtype=np.float32) * existing.occurrences + vector
        norm = float(np.linalg.norm(mean))
        if norm > 0:
            values["embedding"] = (mean / norm).astype("<f4").tobytes()
    conn.execute(learnings.update().where(learnings.c.id == existing.id).values(**values))


def _held_reason(ws: Workspace, flags: Sequence[Any], origin: Origin) -> str | None:
    if flags:
        return "looks like " + "; ".join(f"{f.kind} ({f.label})" for f in flags)
    if ws.settings.learnings_review == "queue" and not origin.reviewed:
        return "learnings_review is queue: waiting for a person"
    return None


def _insert(
    conn: sa.Connection,
    pid: int,
    rule: str,
    source: str,
    skill: str | None,
    at: datetime,
    *,
    status: str,
    origin: Origin,
    vector: Any = None,
    held_reason: str | None = None,
    supersedes: int | None = None,
) -> int:
    from amelio.db.schema import learnings, utcnow

    result = conn.execute(
        learnings.insert().values(
            project_id=pid,
            skill=skill,
            rule=rule,
            rule_key=_key(rule),
            source=source,
            status=status,
            helpful=0,
            harmful=0,
            occurrences=1,
            created_at=at,
            last_seen_at=at,
            updated_at=utcnow(),
            sources=[origin.entry(source, at)],
            author=origin.author,
            reviewed_by=origin.author if origin.reviewed and status == "active" else None,
            reviewed_at=utcnow() if origin.reviewed and status == "active" else None,
            held_reason=held_reason,
            supersedes_id=supersedes,
            embedding=None if vector is None else vector.astype("<f4").tobytes(),
        )
    )
    assert result.inserted_primary_key is not None
    return int(result.inserted_primary_key[0])


def _add_from_file(
    conn: sa.Connection, ws: Workspace, pid: int, entry: ParsedLine, rule: str
) -> tuple[int, str]:
    """Store one line of a hand-edited learnings.md: the person who typed it is its
    reviewer, so only the exact text is matched (an edited wording is a new rule
    and the old line's rule is retired), and only a flagged line waits."""
    import sqlalchemy as sa

    from amelio.assistant.vetting import blocking, vet
    from amelio.db.schema import learnings, utcnow

    existing = conn.execute(
        sa.select(learnings).where(
            learnings.c.project_id == pid, learnings.c.rule_key == _key(rule)
        )
    ).first()
    flags = blocking(vet(rule))
    origin = Origin(author="learnings.md", reviewed=True)
    if existing is None:
        status = "candidate" if flags else "active"
        held = _held_reason(ws, flags, origin)
        return _insert(
            conn, pid, rule, entry.source, entry.skill, entry.at,
            status=status, origin=origin, held_reason=held, vector=_vector(ws, rule),
        ), ("held" if flags else "added")  # fmt: skip
    values: dict[str, Any] = {"updated_at": utcnow(), "skill": entry.skill}
    outcome = "kept"
    if existing.status in ("retired", "superseded") and not flags:
        values |= {"status": "active", "retired_reason": None, "superseded_by": None}
        outcome = "reactivated"
    conn.execute(learnings.update().where(learnings.c.id == existing.id).values(**values))
    return int(existing.id), outcome


def _lock_project(conn: sa.Connection, pid: int) -> None:
    """Serialize learning writes per project on PostgreSQL (SQLite's write
    transaction already does), so two paraphrases written at once meet."""
    import sqlalchemy as sa

    from amelio.db.schema import projects

    if conn.dialect.name != "sqlite":
        conn.execute(sa.select(projects.c.id).where(projects.c.id == pid).with_for_update())


def add_learning(
    ws: Workspace,
    rule: str,
    *,
    source: str = "manual",
    project: str = DEFAULT_PROJECT,
    skill: str | None = None,
    at: datetime | None = None,
    origin: Origin | None = None,
) -> tuple[Learning, str]:
    """Add a rule; returns the stored item and what happened:

    ``added`` (active), ``held`` (a candidate: under review, or flagged by
    :mod:`vetting`), ``proposed`` (a candidate that would supersede the active
    learning it contradicts), ``merged`` (a paraphrase of a stored learning: its
    count and sources grow) or ``reactivated`` (a retired rule taught again).

    The comparison (embeddings, and the LLM when one is configured) runs before
    the write transaction, so no lock is held while a model answers; inside it,
    the rules written meanwhile are compared again, so two paraphrases written at
    once still leave one learning.
    """
    import sqlalchemy as sa

    from amelio import db
    from amelio.assistant.vetting import blocking, vet
    from amelio.db.schema import learnings, utcnow
    from amelio.privacy.pii import scrub_for_storage

    origin = origin or Origin()
    text = _clean_rule(scrub_for_storage(ws.settings, str(rule), "learnings"))
    src = _check_source(source)
    when = at or utcnow()
    flags = blocking(vet(text))
    sync_file(ws, project)
    vector = None if flags else _vector(ws, text)
    decision = _Decision("other")
    seen = 0
    if not flags:
        with db.reading(ws.engine) as conn:
            try:
                pid = project_id(conn, project)
            except ProjectNotFound:  # the write below creates it
                rows: list[Any] = []
            else:
                rows = _scope(conn, pid, skill)
        seen = max((r.id for r in rows), default=0)
        llm = ws.settings.llm_provider != "none"
        decision = _decide(ws, text, vector, rows, llm=llm)
    entry = origin.entry(src, when)
    with db.transaction(ws.engine) as conn:
        pid = ensure_project(conn, project)
        _lock_project(conn, pid)
        existing = conn.execute(
            sa.select(learnings).where(
                learnings.c.project_id == pid, learnings.c.rule_key == _key(text)
            )
        ).first()
        if existing is None and not flags:
            # Rules written since the comparison, and a target that changed state.
            fresh = _scope(conn, pid, skill, after_id=seen)
            later = _decide(ws, text, vector, fresh, llm=False)
            if later.relation == "same":
                decision = later
            elif decision.target is not None:
                state = conn.scalar(
                    sa.select(learnings.c.status).where(learnings.c.id == decision.target)
                )
                wanted = ("active",) if decision.relation == "contradicts" else _SCOPE_STATES
                if state not in wanted:
                    decision = _decide(ws, text, vector, _scope(conn, pid, skill), llm=False)
            if decision.relation == "same" and decision.target is not None:
                existing = conn.execute(
                    sa.select(learnings).where(learnings.c.id == decision.target)
                ).one()
        mirror = False  # whether learnings.md (active learnings only) changes
        if existing is not None:
            _merge(conn, existing, skill, when, entry, vector)
            outcome = "merged"
            mirror = existing.status == "active" and existing.skill != skill
            if existing.status == "retired" and not _rejected(existing) and not flags:
                held = _held_reason(ws, flags, origin)
                conn.execute(
                    learnings.update()
                    .where(learnings.c.id == existing.id)
                    .values(
                        status="candidate" if held else "active",
                        retired_reason=None,
                        held_reason=held,
                    )
                )
                outcome = "held" if held else "reactivated"
                mirror = not held
            lid = int(existing.id)
        elif decision.relation == "contradicts":
            target = conn.execute(
                sa.select(learnings.c.rule).where(learnings.c.id == decision.target)
            ).scalar_one()
            why = f"contradicts learning #{decision.target} ({target!r}); judged by {decision.via}"
            lid = _insert(
                conn, pid, text, src, skill, when, status="candidate", origin=origin,
                vector=vector, held_reason=why, supersedes=decision.target,
            )  # fmt: skip
            outcome = "proposed"
        else:
            held = _held_reason(ws, flags, origin)
            lid = _insert(
                conn, pid, text, src, skill, when, status="candidate" if held else "active",
                origin=origin, vector=vector, held_reason=held,
            )  # fmt: skip
            outcome = "held" if held else "added"
            mirror = not held
        row = conn.execute(sa.select(*_columns()).where(learnings.c.id == lid)).one()
    item = _row(row, project)
    if mirror and not (outcome == "added" and _insert_line(ws, project, item)):
        _write_file(ws, project)
    return item, outcome


def _retire(
    conn: sa.Connection,
    where: sa.ColumnElement[bool],
    reason: str,
    states: tuple[str, ...] = ("active",),
) -> int:
    from amelio.db.schema import learnings, utcnow

    result = conn.execute(
        learnings.update()
        .where(where, learnings.c.status.in_(states))
        .values(status="retired", retired_reason=reason, updated_at=utcnow())
    )
    return int(result.rowcount)


def delete_learning(
    ws: Workspace, learning_id: int, *, project: str = DEFAULT_PROJECT, reason: str = "deleted"
) -> Learning:
    """Retire a learning (an active one, or a candidate that waits): it leaves
    prompts and learnings.md, or the review queue, but stays on record."""
    import sqlalchemy as sa

    from amelio import db
    from amelio.db.schema import learnings

    sync_file(ws, project)
    with db.transaction(ws.engine) as conn:
        pid = project_id(conn, project)
        where = sa.and_(learnings.c.id == learning_id, learnings.c.project_id == pid)
        row = conn.execute(sa.select(learnings).where(where)).first()
        if row is None:
            raise NotFound(
                f"No learning {learning_id} in project {project!r}.", learning_id=learning_id
            )
        _retire(conn, where, reason, ("active", "candidate"))  # a waiting one too
        row = conn.execute(sa.select(learnings).where(where)).one()
    _write_file(ws, project)
    return _row(row, project)


def record_outcome(
    ws: Workspace, learning_ids: Iterable[int], *, helpful: bool, project: str = DEFAULT_PROJECT
) -> list[int]:
    """Count feedback on an answer whose prompt used these learnings; returns the ids
    retired because their harmful count overtook their helpful count."""
    import sqlalchemy as sa

    from amelio import db
    from amelio.db.schema import learnings

    ids = sorted(set(learning_ids))
    if not ids:
        return []
    column = learnings.c.helpful if helpful else learnings.c.harmful
    minimum = ws.settings.learnings_retire_min_harmful
    sync_file(ws, project)
    with db.transaction(ws.engine) as conn:
        pid = project_id(conn, project)
        scope = sa.and_(learnings.c.id.in_(ids), learnings.c.project_id == pid)
        conn.execute(learnings.update().where(scope).values({column: column + 1}))
        candidates = conn.execute(
            sa.select(
                learnings.c.id,
                learnings.c.skill,
                learnings.c.helpful,
                learnings.c.harmful,
                learnings.c.created_at,
            ).where(
                scope,
                learnings.c.status == "active",
                learnings.c.harmful > learnings.c.helpful,
                learnings.c.harmful >= minimum,
            )
        ).all()
        doomed = [row.id for row in candidates if _worse_than_before(conn, pid, row)]
        if doomed:
            _retire(conn, learnings.c.id.in_(doomed), "harmful feedback overtook helpful feedback")
    if doomed:
        _write_file(ws, project)
    return doomed


def _worse_than_before(conn: Any, pid: int, row: Any) -> bool:
    """Whether answers that used learning ``row`` were disliked more often than its
    skill's answers (every skill's, for a general learning) were before it existed.

    A 👎 says the answer had a problem, not that the learning caused it: a skill
    whose answers were mostly disliked stays so while the model learns one wish at
    a time, and blaming each new learning for that retired the very learnings
    that lifted the held-out pass rate (docs/efficacy.md: 5 of 9 gone within the
    round that made them). With no votes from before to compare with, harmful
    overtaking helpful is taken as it stands."""
    import sqlalchemy as sa

    from amelio.assistant.stats import wilson_interval
    from amelio.db.schema import feedback, interactions

    before = [
        interactions.c.project_id == pid,
        interactions.c.created_at < row.created_at,
        feedback.c.channel == "vote",
    ]
    if row.skill is not None:
        before.append(interactions.c.applied_skill == row.skill)
    votes = dict(
        conn.execute(
            sa.select(feedback.c.kind, sa.func.count())
            .join(interactions, interactions.c.id == feedback.c.interaction_id)
            .where(*before)
            .group_by(feedback.c.kind)
        ).all()
    )
    down, up = int(votes.get("down", 0)), int(votes.get("up", 0))
    if down + up == 0:
        return True
    # Credibly worse: even the low end of the disliked share's interval is above
    # the share before (two 👎 of two say little against 9 of 10 before).
    low, _ = wilson_interval(row.harmful, row.harmful + row.helpful)
    return low > down / (down + up)


# -- reads ------------------------------------------------------------------------------


def list_learnings(
    ws: Workspace,
    *,
    project: str = DEFAULT_PROJECT,
    skill: str | None = None,
    include_retired: bool = False,
    sync: bool = True,
    conn: sa.Connection | None = None,
    status: str | None = None,
) -> list[Learning]:
    """A project's learnings, newest first (``skill`` keeps that skill's and global ones).

    Active ones only, unless ``include_retired`` (every state) or ``status`` (that
    one). ``conn``: read on this connection (one request can share one connection).
    """
    import sqlalchemy as sa

    from amelio import db
    from amelio.db.schema import learnings

    if sync:
        sync_file(ws, project)
    with db.reading(conn or ws.engine) as conn:
        pid = project_id(conn, project)
        query = sa.select(*_columns()).where(learnings.c.project_id == pid)
        if status is not None:
            if status not in STATES:
                raise InvalidInput(
                    f"Unknown learning status {status!r}; use one of: {', '.join(STATES)}.",
                    field="status",
                )
            query = query.where(learnings.c.status == status)
        elif not include_retired:
            query = query.where(learnings.c.status == "active")
        if skill is not None:
            query = query.where(sa.or_(learnings.c.skill.is_(None), learnings.c.skill == skill))
        rows = conn.execute(
            query.order_by(learnings.c.last_seen_at.desc(), learnings.c.id.desc())
        ).all()
    return [_row(r, project) for r in rows]


def _header(setting: str) -> str:
    return HEADERS.get(setting, setting)


@cache
def _block_query(embeddings: bool = False) -> sa.Select[Any]:
    """Runs on every prompt, so it is built once: only the columns the block needs
    (the embeddings only to rank by relevance), and only the rules it may use
    (global ones and the hinted skills'), in list_learnings' order. An empty
    expanding IN matches nothing."""
    import sqlalchemy as sa

    from amelio.db.schema import learnings

    columns = [
        learnings.c.id,
        learnings.c.rule,
        learnings.c.helpful,
        learnings.c.harmful,
        learnings.c.last_seen_at,
    ]
    if embeddings:
        columns.append(learnings.c.embedding)
    return (
        sa.select(*columns)
        .where(
            learnings.c.project_id == sa.bindparam("project_id"),
            learnings.c.status == "active",
            sa.or_(
                learnings.c.skill.is_(None),
                learnings.c.skill.in_(sa.bindparam("skills", expanding=True)),
            ),
        )
        .order_by(learnings.c.last_seen_at.desc(), learnings.c.id.desc())
    )


def prompt_block(
    ws: Workspace,
    *,
    project: str = DEFAULT_PROJECT,
    skills: Sequence[str] = (),
    budget: int | None = None,
    ordering: str | None = None,
    conn: sa.Connection | None = None,
    message: str | None = None,
) -> LearningsBlock:
    """The seed's ``formatForPrompt``: the learnings that fit ``budget`` characters.

    Global learnings, plus those scoped to a skill in ``skills`` (the hint), in the
    ``ordering``: ``relevant`` (the default) puts first those closest in meaning to
    ``message`` (the newest first without one), ``newest`` is the seed's order,
    ``helpful`` ranks by helpful minus harmful feedback. A rule that does not fit
    whole is skipped and later, shorter ones may still fit.
    """
    from amelio import db

    settings = ws.settings
    budget = settings.learnings_max_chars if budget is None else budget
    ordering = ordering or settings.learnings_ordering
    relevant = ordering == "relevant" and bool(message and message.strip())
    sync_file(ws, project)
    with db.reading(conn or ws.engine) as c:
        items = list(
            c.execute(
                _block_query(relevant),
                {"project_id": project_id(c, project), "skills": sorted(set(skills))},
            )
        )
    if ordering == "helpful":
        items.sort(key=lambda x: (-(x.helpful - x.harmful), -x.last_seen_at.timestamp(), -x.id))
    elif relevant and len(items) > 1:
        assert message is not None
        scores = _relevance(ws, message, items)
        order = sorted(range(len(items)), key=lambda i: -scores[i])  # stable: newest first
        items = [items[i] for i in order]
    lines: list[str] = []
    ids: list[int] = []
    used = 0
    for item in items:
        line = f"- {item.rule}"
        cost = len(line) + (1 if lines else 0)
        if used + cost > budget:
            continue
        lines.append(line)
        ids.append(item.id)
        used += cost
    if not lines:
        return LearningsBlock("", ())
    return LearningsBlock("\n".join([_header(settings.learnings_header), *lines]), tuple(ids))


def _relevance(ws: Workspace, message: str, items: Sequence[Any]) -> list[float]:
    """How close each learning is to ``message``: the cosine of their embeddings, or,
    for a learning without one, the share of its content words the message holds."""
    from amelio.assistant.likeness import content_words
    from amelio.text import tokens

    vector = _vector(ws, message)
    words = set(tokens(message))
    scores = []
    for item in items:
        if (
            vector is not None
            and item.embedding is not None
            and len(item.embedding) == vector.nbytes
        ):
            import numpy as np

            scores.append(float(np.frombuffer(item.embedding, dtype=np.float32) @ vector))
        else:
            rule = content_words(item.rule)
            scores.append(len(rule & words) / len(rule) if rule else 0.0)
    return scores


# -- the learnings.md mirror ------------------------------------------------------------


def parse_learnings_md(text: str) -> tuple[list[ParsedLine], list[ParseError]]:
    """Every rule line of a learnings.md, and every line that could not be read."""
    from amelio.db.schema import aware

    entries: list[ParsedLine] = []
    errors: list[ParseError] = []
    skill: str | None = None
    unreadable_section = False
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(">") or line.startswith("<!--"):
            continue
        if line.startswith("#"):
            match = _SKILL_HEADING.match(line)
            skill = match["skill"] if match else None
            unreadable_section = line.lower() == _UNREADABLE_HEADING.lower()
            continue
        if unreadable_section:
            errors.append(ParseError(number, "kept from an earlier sync; fix or delete it", raw))
            continue
        match = _LINE.match(line)
        if match is None:
            errors.append(ParseError(number, "expected '- [ISO-8601 time] [source] rule'", raw))
            continue
        try:
            at = aware(datetime.fromisoformat(match["ts"].strip()))
        except ValueError:
            errors.append(
                ParseError(
                    number,
                    f"bad time {match['ts']!r}: use ISO 8601, e.g. 2026-04-03T14:22:00Z",
                    raw,
                )
            )
            continue
        source = match["source"].strip()
        if source not in SOURCES:
            errors.append(
                ParseError(
                    number, f"unknown source {source!r}: use one of {', '.join(SOURCES)}", raw
                )
            )
            continue
        rule = " ".join(match["rule"].split())
        if len(rule) > MAX_RULE_CHARS:
            errors.append(ParseError(number, f"rule over {MAX_RULE_CHARS} characters", raw))
            continue
        entries.append(ParsedLine(rule, source, at, skill))
    return entries, errors


def _stamp(moment: datetime) -> str:
    # isoformat, not strftime: the mirror stamps every active learning on each rewrite.
    return moment.astimezone(UTC).replace(microsecond=0, tzinfo=None).isoformat() + "Z"


def render_learnings_md(items: Sequence[Any], unreadable: Sequence[str] = ()) -> str:
    """The seed's file: a header, then one ``- [time] [source] rule`` line per
    learning, oldest first, global rules then one section per skill."""
    out = [
        "# Learnings",
        "",
        "> Generated by Amelio and injected into prompts. Edit freely: one rule per line,",
        "> `- [ISO-8601 time] [source] rule` (source: fixit, negative, manual, sage).",
        "> Rules under `## Skill: <name>` apply when that skill is hinted.",
        "",
        "## Rules",
        "",
    ]
    sections: dict[str | None, list[str]] = {}
    for x in sorted(items, key=lambda x: (x.created_at, x.id)):
        sections.setdefault(x.skill, []).append(f"- [{_stamp(x.created_at)}] [{x.source}] {x.rule}")
    out += sections.pop(None, [])
    for skill in sorted(s for s in sections if s is not None):
        out += ["", f"## Skill: {skill}", "", *sections[skill]]
    if unreadable:
        out += [
            "",
            _UNREADABLE_HEADING,
            "",
            "<!-- Amelio could not read these lines; fix them (then move them up) "
            "or delete them. -->",
            *unreadable,
        ]
    return "\n".join(out) + "\n"


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _write_file(ws: Workspace, project: str, unreadable: Sequence[str] = ()) -> None:
    """Rewrite learnings.md from the database, atomically, and remember its hash."""
    import sqlalchemy as sa

    from amelio.db.schema import learnings
    from amelio.privacy.pii import scrub_for_storage

    with ws.engine.connect() as conn:  # only what the file shows: this runs per new rule
        items = conn.execute(
            sa.select(
                learnings.c.id,
                learnings.c.skill,
                learnings.c.rule,
                learnings.c.source,
                learnings.c.created_at,
            ).where(
                learnings.c.project_id == project_id(conn, project),
                learnings.c.status == "active",
            )
        ).all()
    path = learnings_path(ws, project)
    if not unreadable and path.is_file():
        # sync_file ran first, so any line it could not read is in that section.
        old = path.read_text(encoding="utf-8", errors="replace")
        if _UNREADABLE_HEADING in old:
            unreadable = [e.text for e in parse_learnings_md(old)[1]]
    unreadable = [scrub_for_storage(ws.settings, line, "learnings") for line in unreadable]
    _publish(ws, project, path, render_learnings_md(items, unreadable))


def _publish(ws: Workspace, project: str, path: Path, text: str) -> None:
    """Write learnings.md atomically and remember it as Amelio's own (its hash in
    the database, for every process; its signature here), so that only a person's
    edit is read back."""
    from amelio import db
    from amelio.db.schema import learning_files, utcnow

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".learnings-", suffix=".md")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
    with db.transaction(ws.engine) as conn:
        pid = project_id(conn, project)
        conn.execute(learning_files.delete().where(learning_files.c.project_id == pid))
        conn.execute(
            learning_files.insert().values(
                project_id=pid, content_hash=_hash(text), written_at=utcnow()
            )
        )
    _in_sync[path] = (_signature(path.stat()), _hash(text))


def _insert_line(ws: Workspace, project: str, item: Learning) -> bool:
    """Put a new active learning's line into learnings.md without rewriting the
    rest; False (the caller rewrites the whole file) unless the file is the one this
    process last wrote and the line belongs at the end of its section.

    A new rule is the newest, so its line is the last of its section: inserting it
    costs a read and a write of the file, where a rewrite reads and renders every
    active learning (80 ms at 10,000; benchmarks/learnings.py). The result is the
    same text :func:`render_learnings_md` gives (tests/test_assistant_learnings.py
    compares them)."""

    path = learnings_path(ws, project)
    seen = _in_sync.get(path)
    if seen is None:
        return False
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, UnicodeDecodeError):
        return False
    if _hash(text) != seen[1]:
        return False
    line = f"- [{_stamp(item.created_at)}] [{item.source}] {item.rule}"
    lines = text.split("\n")
    heading = "## Rules" if item.skill is None else f"## Skill: {item.skill}"
    if lines.count(heading) > 1:
        return False
    try:
        start = lines.index(heading)
    except ValueError:
        start = -1
    if start < 0:
        # A skill's first learning: its section goes before the next skill's (or the
        # unreadable lines), as the full render orders them.
        later = [
            n
            for n, x in enumerate(lines)
            if (x.startswith("## Skill: ") and x[10:] > item.skill)  # type: ignore[operator]
            or x == _UNREADABLE_HEADING
        ]
        at = later[0] if later else len(lines) - 1
        if at == len(lines) - 1 and lines[-1] != "":
            return False
        lines[at:at] = [heading, "", line, ""] if later else ["", heading, "", line]
    else:
        end = start + 2
        while end < len(lines) and lines[end].startswith("- ["):
            end += 1
        if end > start + 2:
            last = _LINE.match(lines[end - 1])
            if last is None or last["ts"] > _stamp(item.created_at):
                return False  # not the newest: the full render decides its place
        if end == start + 2 and lines[start + 1 : start + 2] != [""]:
            return False
        lines.insert(end, line)
    _publish(ws, project, path, "\n".join(lines))
    return True


def _signature(stat: os.stat_result) -> tuple[int, int, int, int]:
    return (stat.st_mtime_ns, stat.st_ctime_ns, stat.st_size, stat.st_ino)


def sync_file(ws: Workspace, project: str = DEFAULT_PROJECT) -> SyncReport:
    """Read a hand-edited learnings.md back into the database.

    A no-op unless the file differs from what Amelio last wrote. New lines are
    added (merging duplicates), rules whose line was removed are retired, and
    the file is rewritten in canonical form with any unreadable lines kept.
    """
    import sqlalchemy as sa

    from amelio import db
    from amelio.db.schema import learning_files, learnings
    from amelio.privacy.pii import scrub_for_storage

    path = learnings_path(ws, project)
    try:
        stat = path.stat()
    except FileNotFoundError:
        return SyncReport()
    # This process already saw the file in this exact state and in sync: skip the
    # read and the query (learnings are read on every prompt). The change time and
    # inode are in the signature because editors and `cp -p` restore the mtime, and
    # a file changed in the last seconds is read anyway (git's "racily clean"
    # rule): on a file system with coarse timestamps a same-size edit within the
    # same tick would otherwise reach the prompt one message late.
    signature = _signature(stat)
    seen = _in_sync.get(path)
    recent = time.time() - max(stat.st_mtime, stat.st_ctime) < _RACY_S
    if seen is not None and seen[0] == signature and not recent:
        return SyncReport()
    text = path.read_text(encoding="utf-8", errors="replace")
    digest = _hash(text)
    if seen is not None and seen[1] == digest:  # recent, but the text this process saw
        _in_sync[path] = (signature, digest)
        return SyncReport()
    with ws.engine.connect() as conn:
        pid = project_id(conn, project)
        known = conn.scalar(
            sa.select(learning_files.c.content_hash).where(learning_files.c.project_id == pid)
        )
    if known == digest:
        _in_sync[path] = (signature, digest)
        return SyncReport()
    entries, errors = parse_learnings_md(text)
    added = 0
    with db.transaction(ws.engine) as conn:
        keep: set[int] = set()
        for entry in entries:
            rule = scrub_for_storage(ws.settings, entry.rule, "learnings")
            lid, outcome = _add_from_file(conn, ws, pid, entry, rule)
            keep.add(lid)
            added += outcome in ("added", "reactivated")
        gone = learnings.c.project_id == pid
        if keep:
            gone = sa.and_(gone, learnings.c.id.not_in(keep))
        retired = _retire(conn, gone, "removed from learnings.md")
    _write_file(ws, project, [e.text for e in errors])
    return SyncReport(added, retired, tuple(errors), True)
