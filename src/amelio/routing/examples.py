"""The examples the learned router learns skills from, and how an admin curates them.

Every answer a user kept is a labelled example of the skill that served it: when a
👍 lands on an interaction whose evals passed and that no one marked 👎 or Fix It,
its message becomes an example of its applied skill, in its project. A later 👎 or
Fix It takes it back. An admin can add an example by hand and remove a wrong one;
a removal is kept (``removed_at``), so a later 👍 on that interaction does not bring
it back. A skill's SKILL.md ``examples:`` are examples too: removing one of those
writes a new version of the skill, as any edit does.

The router reads the newest ``router_max_examples`` per skill and project
(:func:`examples_by_skill`), and rebuilds only when :func:`stamp` moves: at once
after a change in this process, within a second after one in another process.
"""

from __future__ import annotations

import threading
import time
import weakref
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from amelio import db
from amelio.db.schema import aware, projects, routing_examples, utcnow
from amelio.errors import InvalidInput, NotFound
from amelio.skills.files import MAX_EXAMPLE_CHARS
from amelio.workspace.folder import Workspace
from amelio.workspace.projects import DEFAULT_PROJECT, project_id

__all__ = [
    "RoutingExample",
    "add_example",
    "examples_by_skill",
    "list_examples",
    "on_answer_feedback",
    "remove",
    "remove_example",
    "remove_skill_example",
    "stamp",
]


@dataclass(frozen=True)
class RoutingExample:
    """One example: ``id`` is None for a SKILL.md example (``source`` ``"skill"``)."""

    id: int | None
    skill: str
    text: str
    source: str  # "skill", "interaction" or "manual"
    project: str | None
    interaction_id: int | None = None
    author: str | None = None
    created_at: datetime | None = None
    removed_at: datetime | None = None
    removed_by: str | None = None

    #: How to name it to :func:`remove`: the row id, or ``md<N>`` for the N-th
    #: SKILL.md example.
    ref: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "ref": self.ref,
            "id": self.id,
            "skill": self.skill,
            "text": self.text,
            "source": self.source,
            "project": self.project,
            "interactionId": self.interaction_id,
            "author": self.author,
            "createdAt": self.created_at.isoformat() if self.created_at else None,
            "removedAt": self.removed_at.isoformat() if self.removed_at else None,
            "removedBy": self.removed_by,
        }


_active = routing_examples.c.removed_at.is_(None)
# The newest creation time is in the stamp because a 👎 deletes an example's row, and
# SQLite gives a deleted last row's id to the next insert: (count, last id) alone would
# not move when the newest example is taken back and another one is added.
_STAMP = (
    sa.select(
        sa.func.count(routing_examples.c.id),
        sa.func.max(routing_examples.c.id),
        sa.func.max(routing_examples.c.created_at),
    )
    .select_from(routing_examples.join(projects, projects.c.id == routing_examples.c.project_id))
    .where(projects.c.name == sa.bindparam("project"), _active)
)


#: How long a stamp read from the database stands for other processes' changes; this
#: process's own changes are seen at once (:data:`_writes`). The routing path reads
#: the stamp at most once a second per project instead of on every message.
STAMP_TTL_S = 1.0
_writes = 0
_stamps_lock = threading.Lock()
Stamp = tuple[int, int, object]
_stamps: weakref.WeakKeyDictionary[sa.Engine, dict[str, tuple[float, int, Stamp]]] = (
    weakref.WeakKeyDictionary()
)


def _wrote() -> None:
    global _writes
    with _stamps_lock:
        _writes += 1


def stamp(bind: sa.Engine | sa.Connection, project: str = DEFAULT_PROJECT) -> Stamp:
    """Changes whenever an example of ``project`` is added or removed: at once for a
    change this process made, within :data:`STAMP_TTL_S` for another process's."""
    engine = bind.engine if isinstance(bind, sa.Connection) else bind
    now = time.monotonic()
    with _stamps_lock:
        writes = _writes
        cached = _stamps.get(engine, {}).get(project)
    if cached is not None and cached[1] == writes and now - cached[0] < STAMP_TTL_S:
        return cached[2]
    with db.reading(bind) as conn:
        count, last, newest = conn.execute(_STAMP, {"project": project}).one()
    found = (int(count), int(last or 0), newest)
    with _stamps_lock:
        per_engine = _stamps.setdefault(engine, {})
        if len(per_engine) >= 1024:
            per_engine.clear()
        per_engine[project] = (now, writes, found)
    return found


def examples_by_skill(
    bind: sa.Engine | sa.Connection, project: str = DEFAULT_PROJECT, *, per_skill: int = 50
) -> dict[str, list[str]]:
    """The newest ``per_skill`` active examples of each skill in ``project``."""
    if per_skill <= 0:
        return {}
    newest = (
        sa.func.row_number()
        .over(partition_by=routing_examples.c.skill, order_by=routing_examples.c.id.desc())
        .label("n")
    )
    ranked = (
        sa.select(routing_examples.c.skill, routing_examples.c.text, newest)
        .join(projects, projects.c.id == routing_examples.c.project_id)
        .where(projects.c.name == project, _active)
        .subquery()
    )
    found: dict[str, list[str]] = {}
    with db.reading(bind) as conn:
        for skill, text in conn.execute(
            sa.select(ranked.c.skill, ranked.c.text)
            .where(ranked.c.n <= per_skill)
            .order_by(ranked.c.skill, ranked.c.n)
        ):
            found.setdefault(skill, []).append(text)
    return found


def on_answer_feedback(conn: sa.Connection, interaction: Any, kind: str, *, objected: bool) -> None:
    """Keep the learned router's examples in step with a vote on ``interaction`` (its
    row, with ``project_id``, ``message``, ``applied_skill`` and ``success``), in the
    caller's transaction: a 👍 on a passing answer no one objected to (``objected``:
    anyone marked it 👎 or Fix It) adds its message; a 👎 or Fix It takes it back
    (an admin's removal stays)."""
    from amelio.skills.store import bump_routing_generation

    where = routing_examples.c.interaction_id == interaction.id
    if kind != "up":
        if conn.execute(routing_examples.delete().where(where, _active)).rowcount:
            bump_routing_generation(conn)
            _wrote()
        return
    message = " ".join(str(interaction.message).split())
    if (
        not (interaction.success and interaction.applied_skill and message)
        or len(message) > MAX_EXAMPLE_CHARS
    ):
        return
    if objected or conn.execute(sa.select(routing_examples.c.id).where(where)).first():
        return
    conn.execute(
        routing_examples.insert().values(
            project_id=interaction.project_id,
            skill=interaction.applied_skill,
            text=message,
            source="interaction",
            interaction_id=interaction.id,
            created_at=utcnow(),
        )
    )
    bump_routing_generation(conn)
    _wrote()


def _row(row: sa.Row[Any], project: str) -> RoutingExample:
    return RoutingExample(
        id=row.id,
        skill=row.skill,
        text=row.text,
        source=row.source,
        project=project,
        interaction_id=row.interaction_id,
        author=row.author,
        created_at=aware(row.created_at),
        removed_at=aware(row.removed_at) if row.removed_at else None,
        removed_by=row.removed_by,
        ref=str(row.id),
    )


def list_examples(
    ws: Workspace, skill: str, *, project: str = DEFAULT_PROJECT, removed: bool = False
) -> list[RoutingExample]:
    """The examples the router learns ``skill`` from in ``project``: SKILL.md's first,
    then logged and added ones, newest first (with ``removed``, the removed ones too)."""
    from amelio.skills.store import get_skill

    found = get_skill(ws.engine, skill, project)
    out = [
        RoutingExample(None, skill, text, "skill", found.project, ref=f"md{n}")
        for n, text in enumerate(found.spec.examples, start=1)
    ]
    query = (
        sa.select(routing_examples)
        .join(projects, projects.c.id == routing_examples.c.project_id)
        .where(projects.c.name == project, routing_examples.c.skill == skill)
        .order_by(routing_examples.c.id.desc())
    )
    if not removed:
        query = query.where(_active)
    with db.reading(ws.engine) as conn:
        out.extend(_row(r, project) for r in conn.execute(query))
    return out


def add_example(
    ws: Workspace,
    skill: str,
    text: str,
    *,
    project: str = DEFAULT_PROJECT,
    author: str | None = None,
) -> RoutingExample:
    """Teach the router that ``text`` is a message for ``skill`` in ``project``."""
    from amelio.skills.store import bump_routing_generation, get_skill

    text = " ".join(text.split())
    if not text:
        raise InvalidInput("An example needs some text.", field="text")
    if len(text) > MAX_EXAMPLE_CHARS:
        raise InvalidInput(f"An example is at most {MAX_EXAMPLE_CHARS} characters.", field="text")
    get_skill(ws.engine, skill, project)  # a clear error for an unknown skill
    with db.transaction(ws.engine) as conn:
        result = conn.execute(
            routing_examples.insert()
            .values(
                project_id=project_id(conn, project),
                skill=skill,
                text=text,
                source="manual",
                author=author,
                created_at=utcnow(),
            )
            .returning(*routing_examples.c)
        )
        row = result.one()
        bump_routing_generation(conn)
    _wrote()
    return _row(row, project)


def remove(
    ws: Workspace, skill: str, ref: str, *, project: str = DEFAULT_PROJECT, author: str = "admin"
) -> RoutingExample:
    """Remove example ``ref`` of ``skill`` as :func:`list_examples` names it: a row id
    (:func:`remove_example`) or ``md<N>``, the N-th SKILL.md example
    (:func:`remove_skill_example`, a new version of the skill)."""
    ref = ref.strip()
    digits = ref[2:] if ref.startswith("md") else ref
    if not (digits.isascii() and digits.isdigit()):
        raise InvalidInput(
            f"{ref!r} names no example: use a number or md<N> from `amelio skills examples list`.",
            field="ref",
        )
    if ref.startswith("md"):
        listed = [e for e in list_examples(ws, skill, project=project) if e.ref == ref]
        if not listed:
            raise NotFound(f"Skill {skill!r} has no SKILL.md example {ref}.", skill=skill)
        remove_skill_example(ws, skill, listed[0].text, project=project, author=author)
        return listed[0]
    return remove_example(ws, int(ref), project=project, author=author, skill=skill)


def remove_example(
    ws: Workspace,
    example_id: int,
    *,
    project: str = DEFAULT_PROJECT,
    author: str = "admin",
    skill: str | None = None,
) -> RoutingExample:
    """Stop the router learning from example ``example_id`` (kept, marked removed, so
    the same answer is not learned again); with ``skill``, only if it is that skill's."""
    from amelio.skills.store import bump_routing_generation

    with db.transaction(ws.engine) as conn:
        row = conn.execute(
            sa.select(routing_examples)
            .where(
                routing_examples.c.id == example_id,
                routing_examples.c.project_id == project_id(conn, project),
            )
            .with_for_update()
        ).first()
        if row is None or (skill is not None and row.skill != skill):
            of = f" of skill {skill!r}" if skill is not None else ""
            raise NotFound(
                f"No routing example {example_id}{of} in project {project!r}.",
                example_id=example_id,
            )
        if row.removed_at is None:
            conn.execute(
                routing_examples.update()
                .where(routing_examples.c.id == example_id)
                .values(removed_at=utcnow(), removed_by=author)
            )
            row = conn.execute(
                sa.select(routing_examples).where(routing_examples.c.id == example_id)
            ).one()
            bump_routing_generation(conn)
    _wrote()
    return _row(row, project)


def remove_skill_example(
    ws: Workspace, skill: str, text: str, *, project: str = DEFAULT_PROJECT, author: str = "admin"
) -> int:
    """Drop ``text`` from ``skill``'s SKILL.md ``examples:``: a new version of the skill
    (in the default project, of the row it sees; another project's fork, made first
    if need be). Returns the new version number."""
    from amelio.skills.store import get_skill, update_project_skill

    found = get_skill(ws.engine, skill, project)
    kept = [e for e in found.spec.examples if e != text]
    if len(kept) == len(found.spec.examples):
        raise NotFound(f"Skill {skill!r} has no example {text!r} in its SKILL.md.", skill=skill)
    # The default project edits the skill where it sees it (a global one in place), as
    # every other edit from the default project does; another project forks first.
    scope = None if project == DEFAULT_PROJECT else project
    updated = update_project_skill(
        ws.engine,
        skill,
        scope,
        author=author,
        reason=f"routing example removed: {text[:80]}",
        expected_version=found.version,
        examples=kept,
    )
    return updated.version
