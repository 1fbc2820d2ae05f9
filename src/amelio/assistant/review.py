"""A person's say over learnings: the review queue, approve, edit, reject.

Three things wait for a person (:func:`review_queue`):

* a **candidate**: a new learning held back because ``learnings_review`` is
  ``queue``, or because it looks like a secret or a prompt injection
  (:mod:`amelio.assistant.vetting`);
* a **supersede proposal**: a candidate that contradicts an active learning
  (``supersedes``). Approving it makes it active and the old one ``superseded``,
  in one transaction, so the next prompt anywhere sees one or the other;
* a **retire proposal** on an active learning: not used for
  ``learnings_stale_days``, or its skill's answers do worse with it in the
  prompt than without it (:func:`usefulness`). Approving retires it.

Every decision records who made it and when (``reviewedBy``/``reviewedAt``); a
rejected candidate stays on record as retired, and a later correction that says
it again is counted on it instead of bringing it back.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from amelio.assistant import learnings as L
from amelio.errors import Conflict, InvalidInput, NotFound
from amelio.workspace.projects import DEFAULT_PROJECT, project_id

if TYPE_CHECKING:
    import sqlalchemy as sa

    from amelio.workspace.folder import Workspace

__all__ = [
    "Usefulness",
    "approve_learning",
    "context",
    "edit_learning",
    "get_learning",
    "propose_retirements",
    "reject_learning",
    "review_queue",
    "show",
    "used_since",
    "usefulness",
]


def _locked(conn: sa.Connection, pid: int, learning_id: int) -> Any:
    import sqlalchemy as sa

    from amelio.db.schema import learnings

    row = conn.execute(
        sa.select(learnings)
        .where(learnings.c.id == learning_id, learnings.c.project_id == pid)
        .with_for_update()
    ).first()
    if row is None:
        raise NotFound(f"No learning {learning_id} in this project.", learning_id=learning_id)
    return row


def _reworded(
    conn: sa.Connection,
    pid: int,
    row: Any,
    text: str,
    vector: Any,
    actor: str,
    now: datetime,
) -> dict[str, Any]:
    """The columns that give learning ``row`` the wording ``text`` (an edit on its
    record), or Conflict when another learning of the project says exactly that."""
    import sqlalchemy as sa

    from amelio.db.schema import learnings

    clash = conn.execute(
        sa.select(learnings.c.id).where(
            learnings.c.project_id == pid,
            learnings.c.rule_key == L._key(text),
            learnings.c.id != row.id,
        )
    ).first()
    if clash is not None:
        raise Conflict(f"Learning #{clash.id} already says exactly this.", learning_id=clash.id)
    return {
        "rule": text,
        "rule_key": L._key(text),
        "embedding": None if vector is None else vector.astype("<f4").tobytes(),
        "sources": [*row.sources, {"source": "edit", "author": actor, "at": now.isoformat()}],
    }


def _pending_retire(row: Any) -> bool:
    return (
        row.status == "active"
        and row.retire_proposal is not None
        and row.retire_proposal.get("status") == "pending"
    )


def get_learning(ws: Workspace, learning_id: int, *, project: str = DEFAULT_PROJECT) -> L.Learning:
    import sqlalchemy as sa

    from amelio.db.schema import learnings

    with ws.engine.connect() as conn:
        pid = project_id(conn, project)
        row = conn.execute(
            sa.select(learnings).where(learnings.c.id == learning_id, learnings.c.project_id == pid)
        ).first()
    if row is None:
        raise NotFound(
            f"No learning {learning_id} in project {project!r}.", learning_id=learning_id
        )
    return L._row(row, project)


def context(ws: Workspace, item: L.Learning) -> tuple[L.Learning | None, dict[str, Any] | None]:
    """What a reviewer needs beside a waiting learning: the active learning it would
    supersede, and the interaction whose correction taught it (the newest source
    that names one), either None when there is none or it is gone."""
    from amelio.assistant.respond import get_interaction

    old = None
    if item.supersedes_id is not None:
        try:
            old = get_learning(ws, item.supersedes_id, project=item.project)
        except NotFound:
            old = None
    for source in reversed(item.sources):
        if source.get("interactionId"):
            try:
                return old, get_interaction(ws, int(source["interactionId"]))
            except NotFound:
                continue
    return old, None


def show(
    ws: Workspace, learning_id: int, *, project: str = DEFAULT_PROJECT
) -> tuple[L.Learning, Usefulness]:
    """A learning and how its skill's answers fared with it and without it."""
    item = get_learning(ws, learning_id, project=project)
    with ws.engine.connect() as conn:
        return item, usefulness(conn, project_id(conn, project), item)


def review_queue(ws: Workspace, *, project: str = DEFAULT_PROJECT) -> list[L.Learning]:
    """What waits for a person, oldest first: candidates, then retire proposals."""
    import sqlalchemy as sa

    from amelio.db.schema import learnings

    L.sync_file(ws, project)
    with ws.engine.connect() as conn:
        pid = project_id(conn, project)
        rows = conn.execute(
            sa.select(learnings)
            .where(
                learnings.c.project_id == pid,
                sa.or_(
                    learnings.c.status == "candidate",
                    sa.and_(
                        learnings.c.status == "active", learnings.c.retire_proposal.is_not(None)
                    ),
                ),
            )
            .order_by(learnings.c.created_at, learnings.c.id)
        ).all()
    items = [r for r in rows if r.status == "candidate" or _pending_retire(r)]
    items.sort(key=lambda r: r.status != "candidate")
    return [L._row(r, project) for r in items]


def approve_learning(
    ws: Workspace,
    learning_id: int,
    *,
    actor: str,
    project: str = DEFAULT_PROJECT,
    rule: str | None = None,
) -> L.Learning:
    """Approve what waits on a learning: activate a candidate (superseding the one it
    contradicts), or retire a learning whose retire proposal is pending.

    ``rule``: the candidate's text as the reviewer edited it. A rule that looks like
    a secret or an injection may be approved too: the card said why it waited, and
    the person who approves it is the review the pattern asked for.
    """

    from amelio import db
    from amelio.db.schema import learnings, utcnow

    text = None if rule is None else L._clean_rule(rule)
    L.sync_file(ws, project)
    vector = None if text is None else L._vector(ws, text)  # not under the write lock
    now = utcnow()
    with db.transaction(ws.engine) as conn:
        pid = project_id(conn, project)
        row = _locked(conn, pid, learning_id)
        if _pending_retire(row):
            if text is not None:
                raise InvalidInput("A retire proposal has no text to edit.", field="rule")
            conn.execute(
                learnings.update()
                .where(learnings.c.id == learning_id)
                .values(
                    status="retired",
                    retired_reason=f"retire proposal approved by {actor}: "
                    + str(row.retire_proposal.get("reason", "")),
                    retire_proposal={**row.retire_proposal, "status": "approved", "by": actor},
                    reviewed_by=actor[:200],
                    reviewed_at=now,
                    updated_at=now,
                )
            )
        elif row.status == "candidate":
            values: dict[str, Any] = {
                "status": "active",
                "reviewed_by": actor[:200],
                "reviewed_at": now,
                "updated_at": now,
            }
            if text is not None and text != row.rule:
                values |= _reworded(conn, pid, row, text, vector, actor, now)
            if row.supersedes_id is not None:
                done = conn.execute(
                    learnings.update()
                    .where(learnings.c.id == row.supersedes_id, learnings.c.status == "active")
                    .values(
                        status="superseded",
                        superseded_by=learning_id,
                        reviewed_by=actor[:200],
                        reviewed_at=now,
                        updated_at=now,
                    )
                )
                if done.rowcount == 0:  # retired or superseded meanwhile: nothing to replace
                    values["supersedes_id"] = None
            conn.execute(learnings.update().where(learnings.c.id == learning_id).values(**values))
        else:
            raise Conflict(
                f"Learning #{learning_id} is {row.status} and waits for no decision.",
                learning_id=learning_id,
                status=row.status,
            )
    L._write_file(ws, project)
    return get_learning(ws, learning_id, project=project)


def reject_learning(
    ws: Workspace,
    learning_id: int,
    *,
    actor: str,
    project: str = DEFAULT_PROJECT,
    reason: str | None = None,
) -> L.Learning:
    """Reject a candidate (kept on record, retired) or a retire proposal (the
    learning stays active and is not proposed again for the same reason)."""
    from amelio import db
    from amelio.db.schema import learnings, utcnow

    now = utcnow()
    with db.transaction(ws.engine) as conn:
        pid = project_id(conn, project)
        row = _locked(conn, pid, learning_id)
        if _pending_retire(row):
            values: dict[str, Any] = {
                "retire_proposal": {
                    **row.retire_proposal,
                    "status": "rejected",
                    "by": actor,
                    "at": now.isoformat(),
                    "why": reason,
                },
            }
        elif row.status == "candidate":
            values = {
                "status": "retired",
                "retired_reason": f"rejected by {actor}" + (f": {reason}" if reason else ""),
            }
        else:
            raise Conflict(
                f"Learning #{learning_id} is {row.status} and waits for no decision.",
                learning_id=learning_id,
                status=row.status,
            )
        conn.execute(
            learnings.update()
            .where(learnings.c.id == learning_id)
            .values(**values, reviewed_by=actor[:200], reviewed_at=now, updated_at=now)
        )
    return get_learning(ws, learning_id, project=project)


def edit_learning(
    ws: Workspace, learning_id: int, rule: str, *, actor: str, project: str = DEFAULT_PROJECT
) -> L.Learning:
    """Change a candidate's or an active learning's text; a candidate stays one
    (approve it next), an edit never activates anything by itself."""
    from amelio import db
    from amelio.assistant.vetting import blocking, vet
    from amelio.db.schema import learnings, utcnow

    text = L._clean_rule(rule)
    flags = blocking(vet(text))
    L.sync_file(ws, project)
    vector = L._vector(ws, text)
    now = utcnow()
    with db.transaction(ws.engine) as conn:
        pid = project_id(conn, project)
        row = _locked(conn, pid, learning_id)
        if row.status not in ("candidate", "active"):
            raise Conflict(
                f"Learning #{learning_id} is {row.status}; only candidate and active "
                "learnings are edited.",
                learning_id=learning_id,
                status=row.status,
            )
        values = _reworded(conn, pid, row, text, vector, actor, now) | {"updated_at": now}
        if flags:  # an edit cannot smuggle a secret into prompts
            values |= {
                "status": "candidate",
                "held_reason": "looks like " + "; ".join(f"{f.kind} ({f.label})" for f in flags),
            }
        conn.execute(learnings.update().where(learnings.c.id == learning_id).values(**values))
    L._write_file(ws, project)
    return get_learning(ws, learning_id, project=project)


# -- usefulness --------------------------------------------------------------------------


@dataclass(frozen=True)
class Usefulness:
    """How a learning's skill's answers fared with it in the prompt and without it,
    since it was created (``None``: no answers on that side)."""

    used: int
    unused: int
    pass_with: float | None
    pass_without: float | None
    down_with: float | None
    down_without: float | None
    last_used: datetime | None

    @property
    def worse(self) -> bool:
        """Credibly worse with it: at least 10 answers each side, and a lower pass rate
        or a higher 👎 rate by 10 points or more."""
        if self.used < 10 or self.unused < 10:
            return False
        pass_drop = (self.pass_without or 0.0) - (self.pass_with or 0.0)
        down_rise = (self.down_with or 0.0) - (self.down_without or 0.0)
        return pass_drop >= 0.1 or down_rise >= 0.1

    def to_dict(self) -> dict[str, Any]:
        def pct(x: float | None) -> float | None:
            return None if x is None else round(x, 4)

        return {
            "answersWith": self.used,
            "answersWithout": self.unused,
            "passRateWith": pct(self.pass_with),
            "passRateWithout": pct(self.pass_without),
            "downRateWith": pct(self.down_with),
            "downRateWithout": pct(self.down_without),
            "lastUsed": self.last_used.isoformat() if self.last_used else None,
        }


def usefulness(conn: sa.Connection, pid: int, item: L.Learning) -> Usefulness:
    """Compare its skill's answers (every skill's, for a general learning) since it
    was created, with it in the prompt (``learningsUsed``) and without."""
    import sqlalchemy as sa

    from amelio.db.schema import feedback, interactions

    where = [interactions.c.project_id == pid, interactions.c.created_at >= item.created_at]
    if item.skill is not None:
        where.append(interactions.c.applied_skill == item.skill)
    down = (
        sa.select(feedback.c.interaction_id)
        .where(feedback.c.kind.in_(("down", "fixit")))
        .scalar_subquery()
    )
    rows = conn.execute(
        sa.select(
            interactions.c.learning_ids,
            interactions.c.success,
            interactions.c.created_at,
            interactions.c.id.in_(down).label("down"),
        ).where(*where)
    ).all()
    sides: dict[bool, list[Any]] = {True: [], False: []}
    for row in rows:
        sides[item.id in (row.learning_ids or ())].append(row)

    def rate(xs: list[Any], attr: str) -> float | None:
        return sum(bool(getattr(x, attr)) for x in xs) / len(xs) if xs else None

    used = sides[True]
    return Usefulness(
        used=len(used),
        unused=len(sides[False]),
        pass_with=rate(used, "success"),
        pass_without=rate(sides[False], "success"),
        down_with=rate(used, "down"),
        down_without=rate(sides[False], "down"),
        last_used=max((x.created_at for x in used), default=None),
    )


def used_since(conn: sa.Connection, pid: int, since: datetime) -> set[int]:
    """The learnings some prompt of the project used since ``since``
    (``learningsUsed``): one pass over the window's interactions."""
    import sqlalchemy as sa

    from amelio.db.schema import interactions

    used: set[int] = set()
    for (ids,) in conn.execute(
        sa.select(interactions.c.learning_ids).where(
            interactions.c.project_id == pid, interactions.c.created_at >= since
        )
    ):
        used.update(ids or ())
    return used


def propose_retirements(
    ws: Workspace, *, project: str = DEFAULT_PROJECT, now: datetime | None = None
) -> list[L.Learning]:
    """Put a retire proposal on each active learning that no prompt used for
    ``learnings_stale_days`` (counted from its creation when never used), or whose
    answers do credibly worse with it; one a person rejected is not proposed again
    for the same reason. Returns the learnings newly proposed."""
    import sqlalchemy as sa

    from amelio import db
    from amelio.db.schema import learnings, utcnow

    now = now or utcnow()
    stale_after = timedelta(days=ws.settings.learnings_stale_days)
    L.sync_file(ws, project)
    # Read (no write lock while every learning's answers are compared), then write.
    updates: dict[int, dict[str, Any]] = {}
    with ws.engine.connect() as conn:
        pid = project_id(conn, project)
        rows = conn.execute(
            sa.select(learnings).where(
                learnings.c.project_id == pid, learnings.c.status == "active"
            )
        ).all()
        recent = used_since(conn, pid, now - stale_after)
        for row in rows:
            previous = row.retire_proposal or {}
            if previous.get("status") == "pending":
                continue
            item = L._row(row, project)
            figures = usefulness(conn, pid, item)
            reason = None
            if figures.worse:
                reason = "worse"
            elif row.id not in recent and now - item.created_at >= stale_after:
                reason = "stale"
            if reason is None or (
                previous.get("status") == "rejected" and previous.get("reason") == reason
            ):
                continue
            updates[int(row.id)] = {
                "status": "pending",
                "reason": reason,
                "at": now.isoformat(),
                "figures": figures.to_dict(),
                "staleDays": ws.settings.learnings_stale_days,
            }
    proposed: list[int] = []
    with db.transaction(ws.engine) as conn:
        for lid, proposal in updates.items():
            done = conn.execute(
                learnings.update()
                .where(learnings.c.id == lid, learnings.c.status == "active")
                .values(retire_proposal=proposal, updated_at=now)
            )
            if done.rowcount:
                proposed.append(lid)
    return [get_learning(ws, i, project=project) for i in proposed]
