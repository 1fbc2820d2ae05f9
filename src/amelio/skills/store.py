"""Skills in the database, the source of truth once imported.

Every change goes through :func:`write_version`, which bumps the skill's
version with a compare-and-set and appends the full state to
``skill_versions`` in the same transaction: history can't skip or fork, and two
concurrent writers can't both win.

Because of that, the ``(id, version)`` pairs of the skills a project sees change
whenever any of them does, in whichever process wrote it: :func:`visible_skills`
(the router's read on every request) compares them, one narrow query, with the
ones it last read in full, instead of reading and decoding every skill again.

The same write replaces the routing generation (:func:`bump_routing_generation`),
as every routing example write does: one number that says whether a router kept
outside the database (``amelio route``'s snapshot) is still current.
"""

from __future__ import annotations

import secrets
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from amelio import db, evals
from amelio.db.schema import routing_state, skill_events, skill_versions, skills, utcnow
from amelio.errors import Conflict, InvalidInput, SkillFileError, SkillNotFound
from amelio.skills import files
from amelio.skills.model import Skill, SkillSpec, SkillVersion
from amelio.workspace.projects import DEFAULT_PROJECT, ensure_project, project_id

__all__ = [
    "ImportReport",
    "SkillEvent",
    "bump_routing_generation",
    "export_skills",
    "find_skill_row",
    "fork_skill",
    "get_skill",
    "import_skills",
    "list_skills",
    "list_versions",
    "record_event",
    "rollback_skill",
    "routing_generation",
    "save_skills",
    "skill_log",
    "spec_from_row",
    "update_project_skill",
    "update_skill",
    "version_of_file",
    "visible_skills",
    "write_version",
]

_UNSET: Any = object()


@dataclass(frozen=True)
class ImportReport:
    created: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    project: str | None = None
    details: Mapping[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "project": self.project,
            "created": list(self.created),
            "updated": list(self.updated),
            "unchanged": list(self.unchanged),
            "versions": dict(self.details),
        }


def spec_from_row(m: sa.RowMapping, name: str) -> SkillSpec:
    """The spec held by a ``skills`` or ``skill_versions`` row (``row._mapping``).

    Public for the modules that read a skill's row in their own transaction
    (approving a proposal locks it first) and must write it back through
    :func:`write_version`.
    """
    ev = m["evals"]
    return SkillSpec(
        name=name,
        description=m["description"],
        triggers=tuple(m["triggers"]),
        keywords=tuple(m["keywords"]),
        content=m["content"],
        evals=None if ev is None else tuple(ev),
        extra=dict(m["extra"]),
    )


def _skill_from_row(row: sa.Row[Any], project: str | None) -> Skill:
    m = row._mapping
    return Skill(
        id=m["id"],
        spec=spec_from_row(m, m["name"]),
        project=project,
        version=m["version"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
    )


def _columns(spec: SkillSpec) -> dict[str, Any]:
    return {
        "description": spec.description,
        "triggers": list(spec.triggers),
        "keywords": list(spec.keywords),
        "extra": dict(spec.extra),
        "content": spec.content,
        "evals": None if spec.evals is None else [dict(r) for r in spec.evals],
        "content_hash": spec.content_hash(),
    }


def _scope_clause(pid: int | None) -> sa.ColumnElement[bool]:
    return skills.c.project_id.is_(None) if pid is None else skills.c.project_id == pid


def find_skill_row(
    conn: sa.Connection, name: str, pid: int | None, *, lock: bool = False
) -> sa.Row[Any] | None:
    """The ``skills`` row of ``name`` in exactly one scope (``pid``: a project's id, or
    None for the global skill), or None; no fallback from a project to the global one.

    ``lock`` holds it for the rest of a write transaction (PostgreSQL), so concurrent
    writers queue instead of colliding. Public for writers that work inside their
    own transaction (approving a proposal checks and creates skills with it).
    """
    query = sa.select(skills).where(skills.c.name == name, _scope_clause(pid))
    return conn.execute(query.with_for_update() if lock else query).first()


@contextmanager
def _writing(engine: sa.Engine) -> Iterator[sa.Connection]:
    """A write transaction where losing a race is a :class:`Conflict`, not a crash."""
    try:
        with db.transaction(engine) as conn:
            yield conn
    except sa.exc.IntegrityError as exc:
        raise Conflict(
            "A concurrent change to the same skill won; reload and try again.",
            reason=str(exc.orig)[:200],
        ) from exc


def record_event(
    conn: sa.Connection,
    skill_id: int,
    kind: str,
    *,
    actor: str,
    reason: str,
    version: int | None = None,
    proposal_id: int | None = None,
) -> None:
    """Append to a skill's evolution log (inside the caller's transaction)."""
    conn.execute(
        skill_events.insert().values(
            skill_id=skill_id,
            kind=kind,
            version=version,
            proposal_id=proposal_id,
            actor=actor[:200],
            reason=reason[:10_000],
            created_at=utcnow(),
        )
    )


_GENERATION = sa.select(routing_state.c.generation).where(routing_state.c.id == 1)


def bump_routing_generation(conn: sa.Connection) -> None:
    """Give the routing generation a new random value, inside the caller's transaction.

    Called by every write to what a router is built from (:func:`write_version`, and
    :mod:`amelio.routing.examples`' writes), so the value commits, or rolls back,
    with the change it announces."""
    conn.execute(
        routing_state.update()
        .where(routing_state.c.id == 1)
        .values(generation=secrets.randbits(63))
    )


def routing_generation(bind: sa.Engine | sa.Connection) -> int:
    """The routing generation now: equal to an earlier read only if no skill and no
    routing example was written in between, by any process."""
    with db.reading(bind) as conn:
        return int(conn.execute(_GENERATION).scalar_one())


def write_version(
    conn: sa.Connection,
    spec: SkillSpec,
    pid: int | None,
    *,
    author: str,
    reason: str,
    expected_version: int | None = None,
    kind: str = "edit",
    proposal_id: int | None = None,
) -> int:
    """Create or advance one skill, record the new version and log the change, inside
    the caller's transaction; returns the new version.

    The only way a version is written (see the module's docstring). Public so that a
    change that must commit together with other rows (a proposal approved and the
    skill's new version) goes through the same compare-and-set; anything else calls
    :func:`update_skill`, :func:`save_skills` or :func:`fork_skill`.
    """
    files.check_skill_name(spec.name)  # every way in (API, proposals, imports) ends here
    now = utcnow()
    author, reason = author[:200], reason[:10_000]
    row = find_skill_row(conn, spec.name, pid, lock=True)
    if row is None:
        result = conn.execute(
            skills.insert().values(
                name=spec.name,
                project_id=pid,
                version=1,
                created_at=now,
                updated_at=now,
                **_columns(spec),
            )
        )
        assert result.inserted_primary_key is not None
        skill_id, version = int(result.inserted_primary_key[0]), 1
    else:
        current = int(row.version)
        if expected_version is not None and expected_version != current:
            raise Conflict(
                f"Skill {spec.name!r} is at version {current}, not {expected_version}: "
                "someone changed it meanwhile. Reload it and try again.",
                skill=spec.name,
                version=current,
            )
        skill_id, version = int(row.id), current + 1
        result = conn.execute(
            skills.update()
            .where(skills.c.id == skill_id, skills.c.version == current)
            .values(version=version, updated_at=now, **_columns(spec))
        )
        if result.rowcount != 1:
            raise Conflict(
                f"Skill {spec.name!r} changed while it was being saved; try again.", skill=spec.name
            )
    conn.execute(
        skill_versions.insert().values(
            skill_id=skill_id,
            version=version,
            author=author,
            reason=reason,
            created_at=now,
            **_columns(spec),
        )
    )
    record_event(
        conn,
        skill_id,
        "import" if kind == "import" and version == 1 else kind,
        actor=author,
        reason=reason,
        version=version,
        proposal_id=proposal_id,
    )
    bump_routing_generation(conn)
    return version


def _pid(conn: sa.Connection, project: str | None, *, create: bool = False) -> int | None:
    """The id of a fork scope; None (global) for no project."""
    if project is None:
        return None
    return ensure_project(conn, project) if create else project_id(conn, project)


def save_skills(
    engine: sa.Engine,
    specs: Sequence[SkillSpec],
    *,
    project: str | None = None,
    author: str = "import",
    reason: str = "imported",
) -> ImportReport:
    """Store specs in one transaction: new ones at v1, changed ones at v+1."""
    created: list[str] = []
    updated: list[str] = []
    unchanged: list[str] = []
    versions: dict[str, int] = {}
    with _writing(engine) as conn:
        pid = _pid(conn, project, create=True)
        # Every row locked before the first write: write_version's last statement takes
        # the routing generation's row, and a transaction that took it must not wait for
        # a skill's row afterwards (another writer holding that row waits for it: a
        # deadlock on PostgreSQL). Locked in name order, as any two imports agree on.
        for name in sorted({spec.name for spec in specs}):
            find_skill_row(conn, name, pid, lock=True)
        for spec in specs:
            row = find_skill_row(conn, spec.name, pid, lock=True)  # held already: no wait
            if row is not None and row.content_hash == spec.content_hash():
                unchanged.append(spec.name)
                versions[spec.name] = int(row.version)
                continue
            versions[spec.name] = write_version(
                conn, spec, pid, author=author, reason=reason, kind="import"
            )
            (created if row is None else updated).append(spec.name)
    return ImportReport(tuple(created), tuple(updated), tuple(unchanged), project, versions)


def import_skills(
    engine: sa.Engine,
    path: str | Path,
    *,
    project: str | None = None,
    author: str = "import",
) -> ImportReport:
    """Read every skill under ``path`` and store them all, or none on any error."""
    specs = files.read_skills(path)
    return save_skills(
        engine,
        specs,
        project=project,
        author=author,
        reason=f"imported from {Path(path).resolve()}",
    )


def _visible_scope(pid: int | None) -> sa.ColumnElement[bool]:
    scope: sa.ColumnElement[bool] = skills.c.project_id.is_(None)
    return scope if pid is None else sa.or_(scope, skills.c.project_id == pid)


def _visible(
    conn: sa.Connection, pid: int | None, project: str | None
) -> tuple[list[Skill], tuple[tuple[int, int], ...]]:
    """The skills a project sees, by name, and the stamp of the rows they came from."""
    # Globals first, so a project's fork of the same name replaces its global.
    rows = conn.execute(
        sa.select(skills).where(_visible_scope(pid)).order_by(skills.c.project_id.is_not(None))
    ).all()
    by_name = {r.name: _skill_from_row(r, None if r.project_id is None else project) for r in rows}
    stamp = tuple(sorted((int(r.id), int(r.version)) for r in rows))
    return [by_name[n] for n in sorted(by_name)], stamp


def list_skills(engine: sa.Engine | sa.Connection, project: str | None = None) -> list[Skill]:
    """The skills a project sees: its forks, then the globals it did not fork, by name.

    ``project=None`` lists the global skills only.
    """
    with db.reading(engine) as conn:
        return _visible(conn, _pid(conn, project), project)[0]


# The skills each project saw at the last full read, per engine, with that read's stamp.
_seen: weakref.WeakKeyDictionary[
    sa.Engine, dict[str | None, tuple[tuple[tuple[int, int], ...], tuple[Skill, ...]]]
] = weakref.WeakKeyDictionary()
_seen_lock = threading.Lock()


# The hot path's one query, built once (building it costs more than running it).
_STAMP_GLOBAL = (
    sa.select(skills.c.id, skills.c.version)
    .where(skills.c.project_id.is_(None))
    .order_by(skills.c.id)
)
_STAMP = (
    sa.select(skills.c.id, skills.c.version)
    .where(sa.or_(skills.c.project_id.is_(None), skills.c.project_id == sa.bindparam("project_id")))
    .order_by(skills.c.id)
)


def visible_skills(
    engine: sa.Engine | sa.Connection, project: str | None = None
) -> tuple[Skill, ...]:
    """:func:`list_skills` for the hot path (routing every message): the same skills,
    shared between calls, so treat them as read-only.

    One query reads only the ``(id, version)`` of the visible rows; the full rows
    are read and decoded again only when that stamp differs from the last full
    read's. Every write bumps a version or adds a row (nothing deletes a skill),
    so a change made by any process or engine is seen on the next call.
    """
    with db.reading(engine) as conn:
        pid = _pid(conn, project)
        stamp = tuple(
            (int(i), int(v))
            for i, v in conn.execute(_STAMP_GLOBAL if pid is None else _STAMP, {"project_id": pid})
        )
        with _seen_lock:
            cached = _seen.get(conn.engine, {}).get(project)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        # The stamp is taken from the rows read, not the query above: a write in
        # between is then caught by the next call instead of hidden under an old stamp.
        found, stamp = _visible(conn, pid, project)
    visible = tuple(found)
    with _seen_lock:
        per_engine = _seen.setdefault(conn.engine, {})
        if len(per_engine) >= 1024:  # bounded however many projects a service has
            per_engine.clear()
        per_engine[project] = (stamp, visible)
    return visible


def _resolve(conn: sa.Connection, name: str, project: str | None) -> tuple[sa.Row[Any], str | None]:
    pid = _pid(conn, project)
    if pid is not None:
        row = find_skill_row(conn, name, pid)
        if row is not None:
            return row, project
    row = find_skill_row(conn, name, None)
    if row is None:
        where = f" for project {project!r}" if project and project != DEFAULT_PROJECT else ""
        raise SkillNotFound(
            f"No skill named {name!r}{where}. `amelio skills list` shows the skills there are.",
            skill=name,
            project=project,
        )
    return row, None


def get_skill(engine: sa.Engine | sa.Connection, name: str, project: str | None = None) -> Skill:
    """The skill ``name`` as ``project`` sees it: its fork, else the global one."""
    with db.reading(engine) as conn:
        row, scope = _resolve(conn, name, project)
    return _skill_from_row(row, scope)


def list_versions(engine: sa.Engine, name: str, project: str | None = None) -> list[SkillVersion]:
    """The full history of the skill ``project`` sees, oldest first."""
    with engine.connect() as conn:
        row, _ = _resolve(conn, name, project)
        rows = conn.execute(
            sa.select(skill_versions)
            .where(skill_versions.c.skill_id == row.id)
            .order_by(skill_versions.c.version)
        ).all()
    return [
        SkillVersion(
            version=r.version,
            spec=spec_from_row(r._mapping, name),
            author=r.author,
            reason=r.reason,
            created_at=r.created_at,
        )
        for r in rows
    ]


def update_skill(
    engine: sa.Engine,
    name: str,
    *,
    project: str | None = None,
    author: str,
    reason: str,
    content: str = _UNSET,
    description: str = _UNSET,
    triggers: Sequence[str] = _UNSET,
    keywords: Sequence[str] = _UNSET,
    rules: Sequence[Mapping[str, Any]] | None = _UNSET,
    examples: Sequence[str] = _UNSET,
    expected_version: int | None = None,
    kind: str = "edit",
    proposal_id: int | None = None,
) -> Skill:
    """Change a skill in its own scope, as a new version (rules are validated first).

    ``expected_version`` turns on optimistic locking: the change fails with
    :class:`Conflict` when someone else saved a version since it was read.
    """
    changes: dict[str, Any] = {}
    for field_name, value in (("content", content), ("description", description)):
        if value is not _UNSET and "\x00" in value:
            raise InvalidInput(f"The {field_name} contains a NUL character.", field=field_name)
    if content is not _UNSET:
        changes["content"] = content.strip("\n") + "\n" if content.strip() else ""
    if description is not _UNSET:
        changes["description"] = description
    if triggers is not _UNSET:
        changes["triggers"] = tuple(triggers)
    if keywords is not _UNSET:
        changes["keywords"] = tuple(keywords)
    if rules is not _UNSET:
        changes["evals"] = (
            None if rules is None else tuple(r.to_dict() for r in evals.parse_rules(list(rules)))
        )
    with _writing(engine) as conn:
        row, scope = _resolve(conn, name, project)
        spec = replace(spec_from_row(row._mapping, name), **changes)
        if examples is not _UNSET:  # SKILL.md's examples: live in the front matter's extra
            extra = {k: v for k, v in spec.extra.items() if k != "examples"}
            kept = files.check_examples(list(examples), file=f"skill {name}")
            spec = replace(spec, extra={**extra, "examples": kept} if kept else extra)
        pid = row.project_id
        if expected_version is not None and expected_version != row.version:
            raise Conflict(
                f"Skill {name!r} is at version {row.version}, not {expected_version}: "
                "someone changed it meanwhile. Reload it and try again.",
                skill=name,
                version=row.version,
            )
        if spec.content_hash() != row.content_hash:  # the same content is not a new version
            write_version(
                conn,
                spec,
                pid,
                author=author,
                reason=reason,
                expected_version=expected_version,
                kind=kind,
                proposal_id=proposal_id,
            )
        new = find_skill_row(conn, name, pid)
        assert new is not None
    return _skill_from_row(new, scope)


def version_of_file(
    engine: sa.Engine, name: str, project: str | None = None
) -> Callable[[bytes], int | None]:
    """Which version of skill ``name`` (as ``project`` sees it) a SKILL.md's bytes
    hold: the newest with that front matter and body, or None (a hand edit). It
    names the backups an older Amelio wrote by position."""
    newest: dict[str, int] = {}
    for v in list_versions(engine, name, project):  # oldest first: the newest wins
        newest[replace(v.spec, evals=None).content_hash()] = v.version

    def version_of(raw: bytes) -> int | None:
        try:
            spec = files.parse_skill_md(raw.decode("utf-8"), source=name, default_name=name)
        except (SkillFileError, UnicodeDecodeError):
            return None
        return newest.get(spec.content_hash())

    return version_of


def fork_skill(engine: sa.Engine, name: str, project: str, *, author: str) -> Skill:
    """Copy a global skill into ``project`` so it can change there alone."""
    with _writing(engine) as conn:
        pid = _pid(conn, project, create=True)
        if find_skill_row(conn, name, pid) is not None:
            raise Conflict(f"Project {project!r} already has its own {name!r}.", skill=name)
        row = find_skill_row(conn, name, None)
        if row is None:
            raise SkillNotFound(f"No global skill named {name!r} to fork.", skill=name)
        write_version(
            conn,
            spec_from_row(row._mapping, name),
            pid,
            author=author,
            reason=f"forked from global v{row.version}",
            kind="fork",
        )
        new = find_skill_row(conn, name, pid)
        assert new is not None
    return _skill_from_row(new, project)


def update_project_skill(
    engine: sa.Engine,
    name: str,
    project: str | None,
    *,
    author: str,
    reason: str,
    expected_version: int | None = None,
    **changes: Any,
) -> Skill:
    """Change the skill ``name`` in ``project``'s own scope: a global skill the project
    has not forked yet is forked into it first, so the global one never changes.

    ``changes`` are :func:`update_skill`'s (``content``, ``description``,
    ``triggers``, ``keywords``, ``rules``). ``project=None`` changes the skill where
    the default project sees it (its fork, else the global skill). A project that
    does not exist yet is created, as ``skills import --project`` does.
    ``expected_version`` is the version the change was based on, as the project saw
    it: before a fork, the global skill's (:class:`Conflict` if that moved on).
    """
    if project is not None:
        with db.transaction(engine) as conn:
            ensure_project(conn, project)
    current = get_skill(engine, name, project or DEFAULT_PROJECT)
    if project is not None and current.project != project:
        if expected_version is not None and expected_version != current.version:
            raise Conflict(
                f"Skill {name!r} is at version {current.version}, not {expected_version}.",
                skill=name,
                version=current.version,
            )
        current = fork_skill(engine, name, project, author=author)
        expected_version = current.version
    return update_skill(
        engine,
        name,
        project=current.project,
        author=author,
        reason=reason,
        expected_version=expected_version,
        **changes,
    )


def rollback_skill(
    engine: sa.Engine,
    name: str,
    version: int,
    *,
    project: str | None = None,
    author: str,
) -> Skill:
    """Make an old version current again, as a new version (history only grows)."""
    history = {v.version: v for v in list_versions(engine, name, project)}
    if version not in history:
        raise SkillNotFound(
            f"Skill {name!r} has no version {version}.", skill=name, version=version
        )
    old = history[version].spec
    return update_skill(
        engine,
        name,
        project=project,
        author=author,
        reason=f"rollback to v{version}",
        content=old.content,
        description=old.description,
        triggers=old.triggers,
        keywords=old.keywords,
        rules=None if old.evals is None else list(old.evals),
        kind="rollback",
    )


def export_skills(engine: sa.Engine, dest: str | Path, *, project: str | None = None) -> list[Path]:
    """Write one scope's skills (global, or a project's forks) as files."""
    with engine.connect() as conn:
        pid = _pid(conn, project)
        rows = conn.execute(
            sa.select(skills).where(_scope_clause(pid)).order_by(skills.c.name)
        ).all()
    return files.write_skills([spec_from_row(r._mapping, r.name) for r in rows], dest)


@dataclass(frozen=True)
class SkillEvent:
    kind: str
    version: int | None
    proposal_id: int | None
    actor: str
    reason: str
    created_at: datetime

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "version": self.version,
            "proposalId": self.proposal_id,
            "actor": self.actor,
            "reason": self.reason,
            "createdAt": self.created_at.isoformat(),
        }


def skill_log(engine: sa.Engine, name: str, project: str | None = None) -> list[SkillEvent]:
    """The evolution log of the skill ``project`` sees, oldest first."""
    with engine.connect() as conn:
        row, _ = _resolve(conn, name, project)
        rows = conn.execute(
            sa.select(skill_events)
            .where(skill_events.c.skill_id == row.id)
            .order_by(skill_events.c.id)
        ).all()
    return [
        SkillEvent(r.kind, r.version, r.proposal_id, r.actor, r.reason, r.created_at) for r in rows
    ]
