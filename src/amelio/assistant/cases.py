"""Pinned cases: answers a skill must keep getting right when it changes.

A proposal is judged on scenarios, and scenarios say whether the new version is
better on average; they do not say whether it broke something people relied on.
A pinned case is such a thing: an interaction whose message the skill answered,
kept for its skill. Every benchmark re-answers the skill's pinned cases with the
old and the new version and checks both answers against the skill's eval rules;
a rule the old version's answer passes and the new one's fails is a regression,
and a proposal with a regression cannot be PASSED (:mod:`amelio.improve.bench`).

Cases come from four places:

* a 👍 pins the answer for its skill (``source`` ``thumbs_up``), unless someone
  objected to it; a later 👎, or a Fix It without a comment, takes an automatic
  pin back, because people disagree about that answer;
* a Fix It with a comment pins the message with the correction
  (``source`` ``fixit``): the answer was wrong, and the correction says how;
* a person pins an interaction by hand (``amelio cases pin``, ``POST /v1/cases``);
* approving the proposal filed for a finding pins the messages it drew as golden
  cases (``source`` ``finding``, :func:`pin_golden_cases`): the problem it fixed
  must stay fixed.

The first two follow ``pin_on_thumbs_up`` (on by default).

Unpinning keeps the row (``unpinned_at``), so a later 👍 on the same answer does
not pin it again; pinning it by hand does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from amelio import db
from amelio.db.schema import aware, interactions, pinned_cases, projects, utcnow
from amelio.errors import InvalidInput, NotFound
from amelio.privacy.pii import scrub_for_storage
from amelio.workspace.config import Settings
from amelio.workspace.folder import Workspace
from amelio.workspace.projects import DEFAULT_PROJECT, project_id

__all__ = [
    "CASE_SOURCES",
    "MAX_NOTE_CHARS",
    "PinnedCase",
    "count_cases",
    "list_cases",
    "on_answer_feedback",
    "pin_case",
    "pin_golden_cases",
    "unpin_case",
]

#: Where a case came from: a person's hand, a 👍, a Fix It with its correction, or a
#: finding whose fix was approved.
CASE_SOURCES = ("manual", "thumbs_up", "fixit", "finding")
MAX_NOTE_CHARS = 1000


@dataclass(frozen=True)
class PinnedCase:
    """One pinned case, with the interaction's message and the answer as given."""

    id: int
    project: str
    skill: str
    interaction_id: int
    source: str
    message: str
    answer: str
    correction: str | None
    note: str | None
    author: str | None
    created_at: datetime
    unpinned_at: datetime | None = None
    unpinned_by: str | None = None

    @property
    def pinned(self) -> bool:
        return self.unpinned_at is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "project": self.project,
            "skill": self.skill,
            "interactionId": self.interaction_id,
            "source": self.source,
            "message": self.message,
            "answer": self.answer,
            "correction": self.correction,
            "note": self.note,
            "author": self.author,
            "pinned": self.pinned,
            "createdAt": self.created_at.isoformat(),
            "unpinnedAt": self.unpinned_at.isoformat() if self.unpinned_at else None,
            "unpinnedBy": self.unpinned_by,
        }


_active = pinned_cases.c.unpinned_at.is_(None)
_WITH_TEXT = pinned_cases.join(
    interactions, interactions.c.id == pinned_cases.c.interaction_id
).join(projects, projects.c.id == pinned_cases.c.project_id)
_SELECT = sa.select(
    pinned_cases,
    interactions.c.message,
    interactions.c.answer,
    projects.c.name.label("project"),
).select_from(_WITH_TEXT)


def _case(row: sa.Row[Any]) -> PinnedCase:
    return PinnedCase(
        id=row.id,
        project=row.project,
        skill=row.skill,
        interaction_id=row.interaction_id,
        source=row.source,
        message=row.message,
        answer=row.answer,
        correction=row.correction,
        note=row.note,
        author=row.author,
        created_at=aware(row.created_at),
        unpinned_at=aware(row.unpinned_at) if row.unpinned_at else None,
        unpinned_by=row.unpinned_by,
    )


def _note(settings: Settings, note: str | None) -> str | None:
    note = " ".join((note or "").split()) or None
    if note is not None and len(note) > MAX_NOTE_CHARS:
        raise InvalidInput(f"A note is at most {MAX_NOTE_CHARS:,} characters.", field="note")
    return scrub_for_storage(settings, note, "comments") if note else None


def _get(conn: sa.Connection, where: sa.ColumnElement[bool]) -> PinnedCase | None:
    row = conn.execute(_SELECT.where(where)).first()
    return None if row is None else _case(row)


def pin_case(
    ws: Workspace,
    interaction_id: int,
    *,
    note: str | None = None,
    author: str | None = None,
) -> tuple[PinnedCase, bool]:
    """Pin interaction ``interaction_id`` for the skill that answered it; returns the
    case and whether this call pinned it (False: it already was, and a ``note`` given
    replaces the old one). A case unpinned before is pinned again, by this person."""
    note = _note(ws.settings, note)
    with db.transaction(ws.engine) as conn:
        row = conn.execute(
            sa.select(interactions.c.project_id, interactions.c.applied_skill).where(
                interactions.c.id == interaction_id
            )
        ).first()
        if row is None:
            raise NotFound(f"No interaction {interaction_id}.", interaction_id=interaction_id)
        if row.applied_skill is None:
            raise InvalidInput(
                f"Interaction {interaction_id} was answered without a skill: a pinned case "
                "protects a skill's answers, and no skill's benchmark would check this one.",
                field="interactionId",
            )
        where = pinned_cases.c.interaction_id == interaction_id
        existing = conn.execute(sa.select(pinned_cases).where(where).with_for_update()).first()
        pinned = existing is None or existing.unpinned_at is not None
        if existing is None:
            conn.execute(
                pinned_cases.insert().values(
                    project_id=row.project_id,
                    skill=row.applied_skill,
                    interaction_id=interaction_id,
                    source="manual",
                    note=note,
                    author=author,
                    created_at=utcnow(),
                )
            )
        elif pinned:
            conn.execute(
                pinned_cases.update()
                .where(where)
                .values(
                    source="manual",
                    note=note if note is not None else existing.note,
                    author=author,
                    created_at=utcnow(),
                    unpinned_at=None,
                    unpinned_by=None,
                )
            )
        elif note is not None:
            conn.execute(pinned_cases.update().where(where).values(note=note))
        case = _get(conn, where)
    assert case is not None
    return case, pinned


def unpin_case(
    ws: Workspace, case_id: int, *, project: str = DEFAULT_PROJECT, author: str = "admin"
) -> PinnedCase:
    """Stop checking case ``case_id`` in ``project``'s benchmarks. The row stays, marked
    unpinned, so a later 👍 on the same answer does not pin it again."""
    with db.transaction(ws.engine) as conn:
        where = sa.and_(
            pinned_cases.c.id == case_id, pinned_cases.c.project_id == project_id(conn, project)
        )
        found = conn.execute(sa.select(pinned_cases.c.id).where(where).with_for_update()).first()
        if found is None:
            raise NotFound(f"No pinned case {case_id} in project {project!r}.", case_id=case_id)
        conn.execute(
            pinned_cases.update()
            .where(where, _active)
            .values(unpinned_at=utcnow(), unpinned_by=author)
        )
        case = _get(conn, pinned_cases.c.id == case_id)
    assert case is not None
    return case


def list_cases(
    ws: Workspace,
    *,
    project: str = DEFAULT_PROJECT,
    skill: str | None = None,
    unpinned: bool = False,
    limit: int | None = None,
) -> list[PinnedCase]:
    """``project``'s pinned cases, newest first; of one skill with ``skill``, and the
    unpinned ones too with ``unpinned``."""
    with db.reading(ws.engine) as conn:
        query = _SELECT.where(pinned_cases.c.project_id == project_id(conn, project))
        if skill is not None:
            query = query.where(pinned_cases.c.skill == skill)
        if not unpinned:
            query = query.where(_active)
        query = query.order_by(pinned_cases.c.id.desc()).limit(limit)
        return [_case(row) for row in conn.execute(query)]


def count_cases(ws: Workspace, skill: str, project: str) -> int:
    """How many cases are pinned for ``skill`` in ``project``."""
    with db.reading(ws.engine) as conn:
        return int(
            conn.scalar(
                sa.select(sa.func.count())
                .select_from(pinned_cases)
                .where(
                    pinned_cases.c.project_id == project_id(conn, project),
                    pinned_cases.c.skill == skill,
                    _active,
                )
            )
            or 0
        )


def _insert(
    conn: sa.Connection, interaction: Any, source: str, *, correction: str | None = None
) -> None:
    conn.execute(
        pinned_cases.insert().values(
            project_id=interaction.project_id,
            skill=interaction.applied_skill,
            interaction_id=interaction.id,
            source=source,
            correction=correction,
            created_at=utcnow(),
        )
    )


def pin_golden_cases(
    conn: sa.Connection,
    interaction_ids: Sequence[int],
    *,
    project_id: int,
    skill: str,
    note: str,
    author: str,
) -> int:
    """Pin, in the caller's transaction, the messages of a finding that an approved
    proposal fixed (``source`` ``finding``): every later proposal for ``skill`` must
    keep answering them within its rules. A message already pinned keeps its pin,
    and one a person unpinned stays unpinned. Returns how many were pinned."""
    if not interaction_ids:
        return 0
    taken = {
        r.interaction_id
        for r in conn.execute(
            sa.select(pinned_cases.c.interaction_id).where(
                pinned_cases.c.interaction_id.in_(list(interaction_ids))
            )
        )
    }
    alive = {
        r.id
        for r in conn.execute(
            sa.select(interactions.c.id).where(
                interactions.c.id.in_(list(interaction_ids)),
                interactions.c.project_id == project_id,
            )
        )
    }
    fresh = [i for i in dict.fromkeys(interaction_ids) if i in alive and i not in taken]
    if fresh:
        now = utcnow()
        conn.execute(
            pinned_cases.insert(),
            [
                {
                    "project_id": project_id,
                    "skill": skill,
                    "interaction_id": i,
                    "source": "finding",
                    "note": note,
                    "author": author[:200],
                    "created_at": now,
                }
                for i in fresh
            ],
        )
    return len(fresh)


def on_answer_feedback(
    conn: sa.Connection,
    settings: Settings,
    interaction: Any,
    kind: str,
    comment: str | None,
    *,
    objected: bool,
) -> None:
    """Keep the pins of ``interaction`` (its row: ``id``, ``project_id``,
    ``applied_skill``) in step with feedback on it, in the caller's transaction.

    A 👍 pins the answer; a Fix It with a comment pins the message with the
    correction (an automatic 👍 pin becomes a Fix It one); a 👎, or a Fix It with
    nothing to say, takes an automatic 👍 pin back. A case a person pinned or
    unpinned is theirs: feedback only adds a correction to it.
    """
    if not settings.pin_on_thumbs_up or interaction.applied_skill is None:
        return
    where = pinned_cases.c.interaction_id == interaction.id
    existing = conn.execute(sa.select(pinned_cases).where(where)).first()
    if kind == "up":
        if existing is None and not objected:
            _insert(conn, interaction, "thumbs_up")
        return
    automatic = existing is not None and existing.source == "thumbs_up"
    if kind == "fixit" and comment:
        if existing is None:
            _insert(conn, interaction, "fixit", correction=comment)
        elif existing.unpinned_at is None:
            conn.execute(
                pinned_cases.update()
                .where(where)
                .values(correction=comment, source="fixit" if automatic else existing.source)
            )
        return
    if existing is not None and automatic and existing.unpinned_at is None:
        conn.execute(pinned_cases.delete().where(where))
