"""Projects (tenants) inside one workspace; ``default`` always exists.

:data:`DEFAULT_PROJECT` and :func:`validate_name` are cheap to import (every
command module needs them); the functions that query the database import
SQLAlchemy when first called.
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from amelio.errors import InvalidInput, ProjectNotFound

if TYPE_CHECKING:
    import sqlalchemy as sa

__all__ = [
    "DEFAULT_PROJECT",
    "Project",
    "create_project",
    "ensure_project",
    "list_projects",
    "project_id",
    "require_project",
    "valid_name",
    "validate_name",
]

DEFAULT_PROJECT = "default"
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,99}")


@dataclass(frozen=True)
class Project:
    id: int
    name: str
    created_at: datetime


def valid_name(name: object) -> bool:
    """Names end up in paths and URLs, so the whole name (no trailing newline, no
    separator, no dot) is kept to a safe alphabet."""
    return isinstance(name, str) and _NAME.fullmatch(name) is not None


def validate_name(name: str, *, what: str = "project") -> str:
    """``name`` if it is :func:`valid_name`, else :class:`InvalidInput` saying why."""
    if not valid_name(name):
        raise InvalidInput(
            f"Invalid {what} name {name!r}: use 1-100 lowercase letters, digits, '-' or '_', "
            "starting with a letter or digit.",
            field=what,
        )
    return name


# Projects are never renamed or deleted, so a name's id can be remembered per
# engine: it saves a query on every request.
_ids: weakref.WeakKeyDictionary[sa.Engine, dict[str, int]] = weakref.WeakKeyDictionary()


def project_id(conn: sa.Connection, name: str) -> int:
    cache = _ids.setdefault(conn.engine, {})
    if name in cache:
        return cache[name]
    import sqlalchemy as sa

    from amelio.db.schema import projects

    validate_name(name)
    row = conn.execute(sa.select(projects.c.id).where(projects.c.name == name)).first()
    if row is None:
        raise ProjectNotFound(
            f"No project named {name!r}. Create it with `amelio projects create {name}`.",
            project=name,
        )
    cache[name] = int(row.id)
    return cache[name]


def require_project(engine: sa.Engine, name: str) -> int:
    """The id of existing project ``name`` (:class:`ProjectNotFound` otherwise),
    without opening a connection once the name is known: every authorized request
    asks this."""
    known = _ids.get(engine, {}).get(name)
    if known is not None:
        return known
    from amelio import db

    with db.reading(engine) as conn:
        return project_id(conn, name)


def ensure_project(conn: sa.Connection, name: str) -> int:
    """The id of project ``name``, creating it if needed (safe under concurrency:
    a second creator's insert is a no-op, not a unique-constraint error)."""
    import sqlalchemy as sa

    from amelio import db
    from amelio.db.schema import projects, utcnow

    validate_name(name)
    try:
        return project_id(conn, name)
    except ProjectNotFound:
        pass
    db.insert_ignore(conn, projects, {"name": name, "created_at": utcnow()}, ["name"])
    row = conn.execute(sa.select(projects.c.id).where(projects.c.name == name)).one()
    return int(row.id)


def create_project(engine: sa.Engine, name: str) -> Project:
    import sqlalchemy as sa

    from amelio import db
    from amelio.db.schema import projects

    with db.transaction(engine) as conn:
        pid = ensure_project(conn, name)
        row = conn.execute(sa.select(projects).where(projects.c.id == pid)).one()
    return Project(row.id, row.name, row.created_at)


def list_projects(engine: sa.Engine) -> list[Project]:
    import sqlalchemy as sa

    from amelio.db.schema import projects

    with engine.connect() as conn:
        rows = conn.execute(sa.select(projects).order_by(projects.c.name)).all()
    return [Project(r.id, r.name, r.created_at) for r in rows]
