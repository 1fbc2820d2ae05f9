"""Findings: the failures of a project grouped into named problems that keep their id.

Amelio sees each failure one at a time (a 👎, a Fix It, an answer that failed a
rule, a search that found nothing); a reviewer wants the problems behind them.
:func:`update_findings` groups the recent failure evidence of a project:

1. **Evidence.** Within ``findings_window_days``. The assistant's: each 👎 or Fix
   It (``feedback:ID``; its text is the comment, or the message and the rules the
   answer failed) and each answer that failed a rule without such feedback
   (``interaction:ID``). The search's (:mod:`amelio.improve.search_findings`):
   queries with no results, reformulation chains, abandoned sessions, hidden
   results. The two kinds are grouped apart: a finding is ``assistant`` or
   ``search``.
2. **Matching first.** Evidence is embedded with the search embedding model and
   joins the finding of its kind whose centroid is closest, when the cosine is at
   least ``findings_match_cosine``: a finding keeps its id as evidence arrives, and
   a closed finding that keeps getting evidence reopens (``findings_reopen_after``
   new pieces since it closed).
3. **Grouping the rest** with scikit-learn's agglomerative clustering (average
   linkage, cosine distance, cut at ``1 - findings_match_cosine``): each group of
   at least ``findings_min_evidence`` becomes a new finding; smaller ones wait for
   more evidence. Agglomerative clustering was chosen over HDBSCAN because its one
   parameter is the same similarity the matching uses, so a group is a set of
   pieces that would each have matched its centroid.
4. **Titles** are the configured LLM's one line, or, without one (or when it
   fails), the group's most telling terms (frequent in it, rare in the window's
   other evidence).
5. **A fix with every finding.** An assistant finding gets a rule mined from its
   failing answers (:mod:`amelio.improve.mining`), filed with a skill change and
   golden cases as one proposal (:func:`file_fix`); a search finding gets
   synonyms, documents to pin, or a note that the corpus lacks the answer.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from amelio import db
from amelio.db.schema import (
    eval_results,
    feedback,
    finding_evidence,
    findings,
    interactions,
    utcnow,
)
from amelio.errors import ConfigError, Conflict, InvalidInput, NotFound
from amelio.improve.evidence import Evidence
from amelio.improve.finding_status import sync_with_proposals
from amelio.text import ENGLISH_STOPWORDS, tokens
from amelio.workspace.projects import DEFAULT_PROJECT, project_id

if TYPE_CHECKING:
    from amelio.improve.drafts import Proposer
    from amelio.workspace.folder import Workspace

__all__ = [
    "STATUSES",
    "Evidence",
    "Finding",
    "UpdateReport",
    "close_finding",
    "describe_fix",
    "file_fix",
    "get_finding",
    "list_findings",
    "sync_with_proposals",
    "update_findings",
]

STATUSES = ("open", "fixing", "closed", "reopened")
#: Unmatched evidence grouped at once (agglomerative clustering holds a square
#: distance matrix: 4,000 pieces take 128 MB); more is grouped batch after batch.
MAX_GROUPED = 4000


@dataclass(frozen=True)
class Finding:
    id: int
    project: str
    kind: str
    title: str
    terms: tuple[str, ...]
    skills: tuple[str, ...]
    evidence_count: int
    share: float
    status: str
    proposal_ids: tuple[int, ...]
    first_seen: datetime
    last_seen: datetime
    closed_at: datetime | None
    closed_by: str | None
    close_reason: str | None
    reopened_at: datetime | None
    evidence: tuple[Evidence, ...] = ()
    fix: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        def iso(x: datetime | None) -> str | None:
            return x.isoformat() if x else None

        return {
            "id": self.id,
            "project": self.project,
            "kind": self.kind,
            "title": self.title,
            "terms": list(self.terms),
            "skills": list(self.skills),
            "evidenceCount": self.evidence_count,
            "share": round(self.share, 4),
            "status": self.status,
            "proposalIds": list(self.proposal_ids),
            "firstSeen": iso(self.first_seen),
            "lastSeen": iso(self.last_seen),
            "closedAt": iso(self.closed_at),
            "closedBy": self.closed_by,
            "closeReason": self.close_reason,
            "reopenedAt": iso(self.reopened_at),
            "fix": self.fix,
            "evidence": [
                {"ref": e.ref, "skill": e.skill, "text": e.text, "at": e.at.isoformat()}
                for e in self.evidence
            ],
        }


@dataclass
class UpdateReport:
    project: str
    evidence: int = 0
    matched: int = 0
    created: list[int] = field(default_factory=list)
    reopened: list[int] = field(default_factory=list)
    waiting: int = 0
    #: Of ``evidence``, how much came from search.
    search_evidence: int = 0
    #: The proposals filed for findings' fixes, and the findings that filed none, why.
    proposals: list[int] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "project": self.project,
            "evidence": self.evidence,
            "searchEvidence": self.search_evidence,
            "matched": self.matched,
            "created": self.created,
            "reopened": self.reopened,
            "waiting": self.waiting,
            "proposals": self.proposals,
            "skipped": self.skipped,
        }


# -- evidence ----------------------------------------------------------------------------


def _failed_rules(conn: sa.Connection, ids: Sequence[int]) -> dict[int, list[str]]:
    failed: dict[int, list[str]] = {}
    for start in range(0, len(ids), 500):
        chunk = list(ids[start : start + 500])
        for row in conn.execute(
            sa.select(eval_results.c.interaction_id, eval_results.c.rule_name)
            .where(eval_results.c.interaction_id.in_(chunk), eval_results.c.passed.is_(False))
            .order_by(eval_results.c.id)
        ):
            failed.setdefault(row.interaction_id, []).append(row.rule_name)
    return failed


def gather_evidence(conn: sa.Connection, pid: int, since: datetime) -> tuple[list[Evidence], int]:
    """The window's failure evidence, oldest first, and how many answers the window
    holds (the share's denominator)."""
    answers = int(
        conn.scalar(
            sa.select(sa.func.count())
            .select_from(interactions)
            .where(interactions.c.project_id == pid, interactions.c.created_at >= since)
        )
        or 0
    )
    complaints = conn.execute(
        sa.select(
            feedback.c.id,
            feedback.c.comment,
            feedback.c.updated_at,
            interactions.c.id.label("interaction_id"),
            interactions.c.message,
            interactions.c.applied_skill,
        )
        .join(interactions, interactions.c.id == feedback.c.interaction_id)
        .where(
            interactions.c.project_id == pid,
            feedback.c.kind.in_(("down", "fixit")),
            feedback.c.updated_at >= since,
        )
        .order_by(feedback.c.updated_at, feedback.c.id)
    ).all()
    failing = conn.execute(
        sa.select(
            interactions.c.id,
            interactions.c.message,
            interactions.c.applied_skill,
            interactions.c.created_at,
        )
        .where(
            interactions.c.project_id == pid,
            interactions.c.created_at >= since,
            interactions.c.success.is_(False),
        )
        .order_by(interactions.c.created_at, interactions.c.id)
    ).all()
    complained = {c.interaction_id for c in complaints}
    rules = _failed_rules(conn, [c.interaction_id for c in complaints] + [f.id for f in failing])
    found: list[Evidence] = []
    for c in complaints:
        text = c.comment or "; ".join([*rules.get(c.interaction_id, []), c.message])
        found.append(Evidence(f"feedback:{c.id}", c.applied_skill, text[:2000], c.updated_at))
    for f in failing:
        if f.id in complained:
            continue  # the feedback on it says more
        text = "; ".join([*rules.get(f.id, []), f.message])
        found.append(Evidence(f"interaction:{f.id}", f.applied_skill, text[:2000], f.created_at))
    found.sort(key=lambda e: (e.at, e.ref))
    return found, answers


# -- grouping ----------------------------------------------------------------------------


def _terms(group: Sequence[str], window: Sequence[str], limit: int = 4) -> list[str]:
    """The group's most telling words: frequent in it, rare in the window's other
    evidence (a class-based TF-IDF)."""
    inside = Counter(t for text in group for t in set(_words(text)))
    everywhere = Counter(t for text in window for t in set(_words(text)))
    total = max(len(window), 1)
    scored = {
        term: (count / len(group)) * math.log(1 + total / everywhere[term])
        for term, count in inside.items()
        if count >= 2 or len(group) < 2
    }
    return [t for t, _ in sorted(scored.items(), key=lambda x: (-x[1], x[0]))[:limit]]


_TITLE_SYSTEM = {
    "assistant": "You name the problem behind a group of complaints about an assistant's "
    "answers. Reply with one short line (at most 12 words), no quotes, no final period.",
    "search": "You name the problem behind a group of searches that failed people (no "
    "results, reformulated, abandoned, results hidden). Reply with one short line (at most "
    "12 words), no quotes, no final period.",
}


def _llm_title(ws: Workspace, chosen: Sequence[Evidence], kind: str) -> str | None:
    """The configured LLM's one-line name for a new finding, or None (no LLM, an
    error, an empty or overlong reply): the terms name it then."""
    if ws.settings.llm_provider == "none":
        return None
    from amelio.errors import AmelioError
    from amelio.llm import LLMRequest, get_provider

    shown = "\n".join(f"- {e.text[:300]}" for e in chosen[:8])
    try:
        provider = get_provider(ws.settings, purpose="Naming findings")
        reply = provider.complete(LLMRequest.single(_TITLE_SYSTEM[kind], shown, max_tokens=30)).text
    except AmelioError:
        return None
    line = " ".join(reply.strip().strip('"').split())
    return line.rstrip(".") if 0 < len(line) <= 120 else None


def _words(text: str) -> list[str]:
    return [t for t in tokens(text) if len(t) > 2 and t not in ENGLISH_STOPWORDS]


def _unit(vector: Any) -> Any:
    import numpy as np

    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector


def _group(vectors: Any, threshold: float) -> list[list[int]]:
    """Indices grouped by average-linkage agglomerative clustering, cut at cosine
    distance ``1 - threshold``; largest groups first."""
    if len(vectors) < 2:
        return [[i] for i in range(len(vectors))]
    try:
        from sklearn.cluster import AgglomerativeClustering  # type: ignore[import-untyped]
    except ImportError:
        raise ConfigError(
            "Grouping failures into findings needs scikit-learn: pip install 'amelio[findings]'."
        ) from None

    labels = AgglomerativeClustering(
        n_clusters=None,
        metric="cosine",
        linkage="average",
        distance_threshold=1.0 - threshold,
    ).fit_predict(vectors)
    groups: dict[int, list[int]] = {}
    for i, label in enumerate(labels):
        groups.setdefault(int(label), []).append(i)
    return sorted(groups.values(), key=lambda g: (-len(g), g[0]))


def _group_all(vectors: Any, rest: list[int], settings: Any) -> tuple[list[list[int]], int]:
    """Group the unmatched evidence ``rest`` (indices into ``vectors``): the newest
    :data:`MAX_GROUPED` at a time, then what is left is first matched to the groups
    just made, and the remainder grouped in turn. Returns the groups big enough to
    be findings, and how many pieces wait in smaller ones."""
    import numpy as np

    threshold, least = settings.findings_match_cosine, settings.findings_min_evidence

    def match(indices: list[int], groups: list[list[int]]) -> list[int]:
        """Add each index to the group whose centre is closest enough; the rest."""
        if not indices or not groups:
            return indices
        centres = np.vstack([_unit(vectors[g].mean(axis=0)) for g in groups])
        scores = vectors[indices] @ centres.T
        still = []
        for index, row in zip(indices, scores, strict=True):
            best = int(np.argmax(row))
            if row[best] >= threshold:
                groups[best].append(index)
            else:
                still.append(index)
        return still

    made: list[list[int]] = []
    leftover: list[int] = []
    pending = list(rest)
    while pending:
        batch, pending = pending[-MAX_GROUPED:], pending[:-MAX_GROUPED]
        fresh: list[list[int]] = []
        for group in _group(vectors[batch], threshold):
            members = [batch[i] for i in group]
            if len(members) >= least:
                fresh.append(members)
            else:
                leftover += members
        pending = match(pending, fresh)
        made += fresh
    # A piece left alone in an early batch may belong to a group a later one made.
    leftover = match(leftover, made)
    return made, len(leftover)


def _load_embedder(settings: Any) -> Any:
    """The search embedding model, or a ConfigError that says what to install."""
    from amelio.embeddings import EmbedderUnavailable, load_embedder

    # First: without the model (and numpy, which comes with amelio[semantic]) this says
    # what to install, before anything else is imported or read.
    if not settings.search_embedding_model:
        raise EmbedderUnavailable(
            "Findings group failures by their embeddings, and search_embedding_model is "
            "empty: set AMELIO_SEARCH_EMBEDDING_MODEL=wordllama and pip install "
            "'amelio[findings]'."
        )
    try:
        return load_embedder(
            settings.search_embedding_model, setting="AMELIO_SEARCH_EMBEDDING_MODEL"
        )
    except EmbedderUnavailable as exc:
        raise EmbedderUnavailable(
            f"Findings group failures by their embeddings: {exc.message} "
            "(pip install 'amelio[findings]' brings the model and scikit-learn)."
        ) from exc


def update_findings(
    ws: Workspace,
    *,
    project: str = DEFAULT_PROJECT,
    now: datetime | None = None,
    proposer: Proposer | None = None,
    file_fixes: bool = True,
) -> UpdateReport:
    """Match the window's new failure evidence (the assistant's and the search's) to
    the project's findings, group the rest into new ones, reopen closed findings that
    keep getting evidence, and draw each touched finding's fix.

    With ``file_fixes``, each assistant finding's fix is filed as a proposal
    (:func:`file_fix`), drafted by ``proposer`` (Sage's, in ``amelio improve
    --sage``) or else by template. Needs the search embedding model; without it,
    nothing is written."""
    from amelio.embeddings import embed_matrix
    from amelio.improve.search_findings import gather_search_evidence

    settings = ws.settings
    embedder = _load_embedder(settings)
    now = now or utcnow()
    since = now - timedelta(days=settings.findings_window_days)
    report = UpdateReport(project)
    with ws.engine.connect() as conn:
        pid = project_id(conn, project)
        said, answers = gather_evidence(conn, pid, since)
        searched, searches = gather_search_evidence(conn, project, since)
        known = {
            r.ref
            for r in conn.execute(
                sa.select(finding_evidence.c.ref).where(finding_evidence.c.project_id == pid)
            )
        }
        existing = conn.execute(sa.select(findings).where(findings.c.project_id == pid)).all()
    report.evidence = len(said) + len(searched)
    report.search_evidence = len(searched)
    touched: dict[str, list[int]] = {}
    for kind, evidence in (("assistant", said), ("search", searched)):
        new = [e for e in evidence if e.ref not in known]
        if not new:
            continue
        vectors = embed_matrix(embedder, [e.text for e in new])
        touched[kind] = _update_kind(
            ws,
            pid,
            kind,
            new,
            vectors,
            [r for r in existing if r.kind == kind],
            [e.text for e in evidence],
            report,
            now,
        )
    with db.transaction(ws.engine) as conn:
        _shares(conn, pid, since, {"assistant": answers, "search": searches})
    _mine_fixes(ws, pid, touched.get("assistant", []), since)
    _search_fixes(ws, touched.get("search", []), searched)
    if file_fixes:
        for fid in touched.get("assistant", []):
            outcome = file_fix(ws, fid, project=project, proposer=proposer)
            if isinstance(outcome, int):
                report.proposals.append(outcome)
            elif outcome is not None:
                report.skipped.append({"finding": fid, "reason": outcome})
    sync_with_proposals(ws, project=project)
    return report


def _update_kind(
    ws: Workspace,
    pid: int,
    kind: str,
    new: Sequence[Evidence],
    vectors: Any,
    existing: Sequence[Any],
    window_texts: Sequence[str],
    report: UpdateReport,
    now: datetime,
) -> list[int]:
    """Match ``new`` evidence of one kind to that kind's findings, group the rest into
    new findings; returns the ids of the findings it touched."""
    import numpy as np

    settings = ws.settings
    dim = vectors.shape[1]
    centroids = [
        (row, np.frombuffer(row.centroid, dtype=np.float32))
        for row in existing
        if row.centroid is not None and len(row.centroid) == dim * 4
    ]
    assigned: dict[int, list[int]] = {}
    rest: list[int] = []
    if centroids:
        matrix = np.vstack([c for _, c in centroids])
        scores = vectors @ matrix.T
        for i, row_scores in enumerate(scores):
            best = int(np.argmax(row_scores))
            if row_scores[best] >= settings.findings_match_cosine:
                assigned.setdefault(best, []).append(i)
            else:
                rest.append(i)
    else:
        rest = list(range(len(new)))
    groups, waiting = _group_all(vectors, rest, settings)
    report.waiting += waiting
    created: list[int] = []
    with db.transaction(ws.engine) as conn:
        for index, members in assigned.items():
            row, centroid = centroids[index]
            chosen = [new[i] for i in members]
            mean = _unit(centroid * row.evidence_count + vectors[members].sum(axis=0))
            values: dict[str, Any] = {
                "centroid": mean.astype("<f4").tobytes(),
                "evidence_count": row.evidence_count + len(members),
                "last_seen": max(row.last_seen, *(e.at for e in chosen)),
                "skills": sorted({*row.skills, *(e.skill for e in chosen if e.skill)}),
                "updated_at": now,
            }
            if row.status == "closed" and row.closed_at is not None:
                since_closed = _count_since(conn, row.id, row.closed_at) + sum(
                    e.at > row.closed_at for e in chosen
                )
                if since_closed >= settings.findings_reopen_after:
                    # Its fix did not hold: the next run may file a new one.
                    fix = {k: v for k, v in dict(row.fix or {}).items() if k != "proposalId"}
                    values |= {"status": "reopened", "reopened_at": now, "fix": fix or None}
                    report.reopened.append(int(row.id))
            conn.execute(findings.update().where(findings.c.id == row.id).values(**values))
            _attach(conn, row.id, pid, chosen, now)
            report.matched += len(members)
        for group in groups:
            chosen = [new[i] for i in group]
            terms = _terms([e.text for e in chosen], window_texts)
            title = _llm_title(ws, chosen, kind) or " · ".join(terms) or chosen[0].text[:80]
            centroid = _unit(vectors[group].mean(axis=0))
            result = conn.execute(
                findings.insert().values(
                    project_id=pid,
                    kind=kind,
                    title=title,
                    terms=terms,
                    skills=sorted({e.skill for e in chosen if e.skill}),
                    centroid=centroid.astype("<f4").tobytes(),
                    evidence_count=len(chosen),
                    share=0.0,
                    status="open",
                    proposal_ids=[],
                    first_seen=min(e.at for e in chosen),
                    last_seen=max(e.at for e in chosen),
                    created_at=now,
                    updated_at=now,
                )
            )
            assert result.inserted_primary_key is not None
            fid = int(result.inserted_primary_key[0])
            _attach(conn, fid, pid, chosen, now)
            created.append(fid)
    report.created += created
    return [int(centroids[i][0].id) for i in assigned] + created


def _clean_answers(
    conn: sa.Connection, pid: int, skills: Sequence[str], since: datetime, limit: int = 500
) -> list[str]:
    """The newest answers of ``skills`` in the window that passed their rules and
    that no one marked 👎 or Fix It."""
    complained = sa.select(feedback.c.interaction_id).where(feedback.c.kind.in_(("down", "fixit")))
    return [
        row.answer
        for row in conn.execute(
            sa.select(interactions.c.answer)
            .where(
                interactions.c.project_id == pid,
                interactions.c.applied_skill.in_(list(skills)),
                interactions.c.created_at >= since,
                interactions.c.success.is_(True),
                interactions.c.id.not_in(complained),
            )
            .order_by(interactions.c.created_at.desc(), interactions.c.id.desc())
            .limit(limit)
        )
    ]


def _mine_fixes(ws: Workspace, pid: int, ids: Sequence[int], since: datetime) -> None:
    """Mine, for each finding touched by this run, a rule that catches its failing
    answers and spares its skills' clean ones (:func:`amelio.improve.mining.mine_rule`),
    and keep it on the finding with its rates; None when no phrase sets them apart."""
    from amelio.improve.mining import mine_rule

    for fid in sorted(set(ids)):
        with ws.engine.connect() as conn:
            row = conn.execute(sa.select(findings).where(findings.c.id == fid)).one()
            refs = [
                r.ref
                for r in conn.execute(
                    sa.select(finding_evidence.c.ref).where(finding_evidence.c.finding_id == fid)
                )
            ]
            bad = [i.answer for i in _interactions_of(conn, refs)]
            clean = _clean_answers(conn, pid, list(row.skills), since) if row.skills else []
        mined = mine_rule(bad, clean, rule_id=f"finding-{fid}", name_hint=f"finding #{fid}")
        filed = {k: v for k, v in dict(row.fix or {}).items() if k == "proposalId"}
        fix = filed if mined is None else {"kind": "rule", **mined.to_dict(), **filed}
        with db.transaction(ws.engine) as conn:
            conn.execute(findings.update().where(findings.c.id == fid).values(fix=fix or None))


def _search_fixes(ws: Workspace, ids: Sequence[int], window: Sequence[Evidence]) -> None:
    """Draw each touched search finding's fix from its evidence in the window
    (:func:`amelio.improve.search_findings.search_fix`)."""
    from amelio.improve.search_findings import search_fix

    by_ref = {e.ref: e for e in window}
    for fid in sorted(set(ids)):
        with ws.engine.connect() as conn:
            refs = conn.execute(
                sa.select(finding_evidence.c.ref).where(finding_evidence.c.finding_id == fid)
            ).scalars()
            evidence = [by_ref[r] for r in refs if r in by_ref]
        with db.transaction(ws.engine) as conn:
            conn.execute(
                findings.update().where(findings.c.id == fid).values(fix=search_fix(evidence))
            )


#: Golden cases a finding's proposal draws from its evidence, the newest first.
MAX_GOLDEN = 5


def _interactions_of(conn: sa.Connection, refs: Sequence[str]) -> list[Any]:
    """The interactions behind evidence refs, newest first, each once."""
    by_feedback = [int(r.split(":")[1]) for r in refs if r.startswith("feedback:")]
    ids = {int(r.split(":")[1]) for r in refs if r.startswith("interaction:")}
    if by_feedback:
        ids |= set(
            conn.execute(
                sa.select(feedback.c.interaction_id).where(feedback.c.id.in_(by_feedback))
            ).scalars()
        )
    if not ids:
        return []
    return list(
        conn.execute(
            sa.select(
                interactions.c.id,
                interactions.c.message,
                interactions.c.answer,
                interactions.c.applied_skill,
            )
            .where(interactions.c.id.in_(sorted(ids)))
            .order_by(interactions.c.created_at.desc(), interactions.c.id.desc())
        )
    )


def _sage_finding(
    ws: Workspace, row: Any, project: str, skill: str, texts: Sequence[str], sources: Sequence[int]
) -> Any:
    """A finding as Sage's prompt reads an underperforming skill: its metrics, the
    finding's name as the reason it was flagged, its evidence as the failures."""
    from amelio.assistant.quality import Finding as Flagged
    from amelio.assistant.quality import SkillMetrics, quality_metrics

    metrics = next(
        (m for m in quality_metrics(ws, project) if m.skill == skill),
        SkillMetrics(project, skill, 0, 0, 0, 0, None),
    )
    return Flagged(
        metrics=metrics,
        reasons=(f"finding #{row.id}: {row.title} ({row.evidence_count} failures)",),
        success_bounds=(0.0, 1.0),
        failed_answers=tuple((f"finding-{row.id}", t[:400]) for t in texts[:8]),
        sources=tuple(sources),
    )


def file_fix(
    ws: Workspace,
    finding_id: int,
    *,
    project: str = DEFAULT_PROJECT,
    proposer: Proposer | None = None,
) -> int | str | None:
    """File an assistant finding's fix as one proposal for the skill most of its
    evidence is about: the rule mined for it (with its rates), a line or Sage's
    rewrite of the skill, and golden cases from its evidence, pinned once approved.

    Returns the proposal's id; or why none was filed (a pending proposal for the
    skill, nothing to propose, a change a person rejected before); or None when
    its fix is filed already (until it reopens). One proposal per skill holds:
    a finding whose skill has one pending is linked to it instead."""
    from amelio.improve.drafts import WRITTEN_FROM
    from amelio.improve.proposals import (
        GOLDEN_CASES,
        create_proposal,
        pending_for,
    )
    from amelio.improve.templates import finding_content
    from amelio.skills.store import get_skill

    with ws.engine.connect() as conn:
        row = conn.execute(sa.select(findings).where(findings.c.id == finding_id)).one()
        fix = dict(row.fix or {})
        # A finding's fix is filed once; reopening it forgets that (see _update_kind).
        if row.kind != "assistant" or row.status == "closed" or fix.get("proposalId"):
            return None
        evidence = conn.execute(
            sa.select(finding_evidence.c.ref, finding_evidence.c.skill, finding_evidence.c.text)
            .where(finding_evidence.c.finding_id == finding_id)
            .order_by(finding_evidence.c.seen_at.desc(), finding_evidence.c.id.desc())
        ).all()
        skills = Counter(e.skill for e in evidence if e.skill)
        if not skills:
            return "its evidence names no skill"
        skill_name = skills.most_common(1)[0][0]
        try:
            skill = get_skill(conn, skill_name, project)
        except NotFound:  # deleted since it answered
            return f"its skill {skill_name!r} no longer exists"
        pending = pending_for(conn, skill.id)
        cases = [
            i
            for i in _interactions_of(conn, [e.ref for e in evidence])
            if i.applied_skill == skill_name
        ][:MAX_GOLDEN]
    if pending is not None:  # linked: the finding is fixing while it waits
        with db.transaction(ws.engine) as conn:
            linked = conn.execute(
                sa.select(findings.c.proposal_ids).where(findings.c.id == finding_id)
            ).scalar_one()
            conn.execute(
                findings.update()
                .where(findings.c.id == finding_id)
                .values(proposal_ids=sorted({*linked, pending}))
            )
        return f"proposal #{pending} for {skill_name} is pending"
    mined = fix.get("rule") if fix.get("kind") == "rule" else None
    current_rules = [dict(r) for r in skill.spec.evals or ()]
    rules = (
        [*current_rules, mined]
        if mined and all(r.get("id") != mined.get("id") for r in current_rules)
        else None
    )
    texts = [e.text for e in evidence if e.skill == skill_name]
    sources = [c.id for c in cases]
    if proposer is not None:
        drafted = proposer(ws, _sage_finding(ws, row, project, skill_name, texts, sources))
        content, how = (None, "") if drafted is None else (drafted.content, drafted.rationale)
        by, extra = "sage", ({} if drafted is None else dict(drafted.evidence))
    else:
        content = finding_content(
            skill.spec,
            finding_id=finding_id,
            title=row.title,
            count=row.evidence_count,
            examples=texts,
            rules=[mined] if mined else [],
        )
        how, by, extra = "It adds a line naming the problem to the skill.", "template", {}
    if content is None and rules is None:
        return "nothing to propose from the evidence"
    rates = (
        f" It adds rule {mined['id']} “{mined['name']}”, which fires on "
        f"{fix['firesOnEvidence']:.0%} of the finding's evidence and "
        f"{fix['firesOnClean']:.0%} of {skill_name}'s clean answers."
        if rules is not None and mined
        else ""
    )
    rationale = (
        f"Finding #{finding_id} “{row.title}”: {row.evidence_count} failures of "
        f"{skill_name}.{rates} {how}".strip()
    )
    try:
        proposal = create_proposal(
            ws,
            skill_name,
            project=project,
            proposed_content=content,
            rules=rules,
            rationale=rationale,
            proposed_by=by,
            author="amelio findings",
            evidence={
                **extra,
                "finding": finding_id,
                **({"rule": fix} if rules is not None else {}),
                GOLDEN_CASES: [{"interactionId": c.id, "message": c.message[:500]} for c in cases],
                WRITTEN_FROM: sources,
            },
        )
    except (InvalidInput, Conflict) as exc:  # ResemblesRejected is a Conflict
        return exc.message
    with db.transaction(ws.engine) as conn:
        current = conn.execute(sa.select(findings).where(findings.c.id == finding_id)).one()
        conn.execute(
            findings.update()
            .where(findings.c.id == finding_id)
            .values(
                fix={**dict(current.fix or {}), "proposalId": proposal.id},
                proposal_ids=sorted({*current.proposal_ids, proposal.id}),
            )
        )
    return proposal.id


def _attach(
    conn: sa.Connection, fid: int, pid: int, chosen: Sequence[Evidence], now: datetime
) -> None:
    conn.execute(
        finding_evidence.insert(),
        [
            {
                "finding_id": fid,
                "project_id": pid,
                "ref": e.ref,
                "skill": e.skill,
                "text": e.text,
                "seen_at": e.at,
                "added_at": now,
            }
            for e in chosen
        ],
    )


def _count_since(conn: sa.Connection, fid: int, moment: datetime) -> int:
    return int(
        conn.scalar(
            sa.select(sa.func.count())
            .select_from(finding_evidence)
            .where(finding_evidence.c.finding_id == fid, finding_evidence.c.seen_at > moment)
        )
        or 0
    )


def _shares(conn: sa.Connection, pid: int, since: datetime, totals: dict[str, int]) -> None:
    """Each finding's evidence in the window, as a share of the window's traffic of
    its kind (``totals``: answers for the assistant, searches for search)."""
    counts: dict[int, int] = {}
    kinds: dict[int, str] = {}
    for fid, kind, count in conn.execute(
        sa.select(finding_evidence.c.finding_id, findings.c.kind, sa.func.count())
        .join(findings, findings.c.id == finding_evidence.c.finding_id)
        .where(finding_evidence.c.project_id == pid, finding_evidence.c.seen_at >= since)
        .group_by(finding_evidence.c.finding_id, findings.c.kind)
    ):
        counts[fid], kinds[fid] = count, kind
    # A finding with no evidence left in the window is 0 % of it, not what it was.
    conn.execute(
        findings.update()
        .where(findings.c.project_id == pid, findings.c.id.not_in(list(counts) or [-1]))
        .values(share=0.0)
    )
    for fid, count in counts.items():
        share = min(count / max(totals.get(kinds[fid], 0), 1), 1.0)
        conn.execute(findings.update().where(findings.c.id == fid).values(share=share))


def describe_fix(fix: dict[str, Any] | None) -> list[str]:
    """A finding's fix in plain lines, as the CLI, the dashboard and Telegram show it."""
    if not fix:
        return []
    lines: list[str] = []
    if fix.get("kind") == "rule":
        lines.append(
            f"A rule that catches it: {fix['rule']['name']} (fires on "
            f"{fix['firesOnEvidence']:.0%} of its {fix['evidence']} failing answers, "
            f"{fix['firesOnClean']:.0%} of {fix['clean']} clean ones)"
        )
    if fix.get("kind") == "search":
        lines += [
            f"Synonym: “{s['from']}” → “{s['to']}” ({s['chains']} reformulations ended in a click)"
            for s in fix.get("synonyms", ())
        ]
        lines += [
            f"Pin {p['doc']} for “{p['query']}” (clicked after {p['chains']} reformulations)"
            for p in fix.get("pins", ())
        ]
        lines += [
            f"People hid {h['doc']} for “{h['query']}” ({h['times']} times)"
            for h in fix.get("hidden", ())
        ]
        asked = ", ".join(f"“{u['query']}” ({u['times']})" for u in fix.get("unanswered", ()))
        if fix.get("corpusLacks") and asked:
            lines.append(f"The corpus seems to lack the answer; most asked: {asked}")
        elif asked:
            lines.append(f"Unanswered: {asked}")
    if fix.get("proposalId"):
        lines.append(f"Filed as proposal #{fix['proposalId']}")
    return lines


# -- reads and decisions -----------------------------------------------------------------


def _finding(row: Any, project: str, evidence: Sequence[Evidence] = ()) -> Finding:
    return Finding(
        id=row.id,
        project=project,
        kind=row.kind,
        title=row.title,
        terms=tuple(row.terms),
        skills=tuple(row.skills),
        evidence_count=row.evidence_count,
        share=row.share,
        status=row.status,
        proposal_ids=tuple(row.proposal_ids),
        first_seen=row.first_seen,
        last_seen=row.last_seen,
        closed_at=row.closed_at,
        closed_by=row.closed_by,
        close_reason=row.close_reason,
        reopened_at=row.reopened_at,
        evidence=tuple(evidence),
        fix=None if row.fix is None else dict(row.fix),
    )


def list_findings(
    ws: Workspace, *, project: str = DEFAULT_PROJECT, status: str | None = None
) -> list[Finding]:
    """The project's findings, the largest share first."""
    if status is not None and status not in STATUSES:
        raise InvalidInput(
            f"Unknown finding status {status!r}; use one of: {', '.join(STATUSES)}.",
            field="status",
        )
    with ws.engine.connect() as conn:
        pid = project_id(conn, project)
        query = sa.select(findings).where(findings.c.project_id == pid)
        if status is not None:
            query = query.where(findings.c.status == status)
        rows = conn.execute(
            query.order_by(findings.c.share.desc(), findings.c.evidence_count.desc(), findings.c.id)
        ).all()
    return [_finding(r, project) for r in rows]


def get_finding(ws: Workspace, finding_id: int, *, project: str = DEFAULT_PROJECT) -> Finding:
    """One finding with its evidence, newest first."""
    with ws.engine.connect() as conn:
        pid = project_id(conn, project)
        row = conn.execute(
            sa.select(findings).where(findings.c.id == finding_id, findings.c.project_id == pid)
        ).first()
        if row is None:
            raise NotFound(
                f"No finding {finding_id} in project {project!r}.", finding_id=finding_id
            )
        evidence = [
            Evidence(e.ref, e.skill, e.text, e.seen_at)
            for e in conn.execute(
                sa.select(finding_evidence)
                .where(finding_evidence.c.finding_id == finding_id)
                .order_by(finding_evidence.c.seen_at.desc(), finding_evidence.c.id.desc())
            )
        ]
    return _finding(row, project, evidence)


def close_finding(
    ws: Workspace,
    finding_id: int,
    *,
    actor: str,
    project: str = DEFAULT_PROJECT,
    reason: str | None = None,
) -> Finding:
    """Close a finding by hand; it reopens by itself if its problem comes back."""
    now = utcnow()
    with db.transaction(ws.engine) as conn:
        pid = project_id(conn, project)
        row = conn.execute(
            sa.select(findings)
            .where(findings.c.id == finding_id, findings.c.project_id == pid)
            .with_for_update()
        ).first()
        if row is None:
            raise NotFound(
                f"No finding {finding_id} in project {project!r}.", finding_id=finding_id
            )
        if row.status == "closed":
            raise Conflict(f"Finding #{finding_id} is already closed.", finding_id=finding_id)
        conn.execute(
            findings.update()
            .where(findings.c.id == finding_id)
            .values(
                status="closed",
                closed_at=now,
                closed_by=actor[:200],
                close_reason=reason,
                updated_at=now,
            )
        )
    return get_finding(ws, finding_id, project=project)
