"""API keys with roles and project scopes. Only a SHA-256 of each key is stored;
the key is shown once.

Keys are 256-bit random tokens, so a fast hash is enough (nothing to brute
force), and lookup by hash keeps authentication one indexed query.

A ``bot`` or ``client`` key may be bound to one or more projects: it then reads
and writes those projects only (a bot key for a customer's assistant must not
see another customer's interactions). A key bound to none is global; ``admin``
keys are always global, and keys made before scopes existed stay global.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, get_args

import sqlalchemy as sa

from amelio import db
from amelio.db.schema import api_key_projects, api_keys, projects, utcnow
from amelio.errors import InvalidInput, NotFound
from amelio.workspace.projects import ensure_project

__all__ = [
    "ROLES",
    "ApiKey",
    "Role",
    "authenticate",
    "create_key",
    "get_key",
    "list_keys",
    "revoke_key",
]

Role = Literal["admin", "bot", "client"]
ROLES: tuple[str, ...] = get_args(Role)
_PREFIX = "amk_"


@dataclass(frozen=True)
class ApiKey:
    id: int
    name: str
    role: Role
    prefix: str
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None
    #: The projects the key is bound to; empty for a global key.
    projects: tuple[str, ...] = ()

    @property
    def is_global(self) -> bool:
        return not self.projects

    def allows(self, project: str) -> bool:
        """Whether this key may read and write ``project``."""
        return not self.projects or project in self.projects

    def to_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "name": self.name,
            "role": self.role,
            "prefix": self.prefix,
            "projects": list(self.projects) or None,
            "createdAt": self.created_at,
            "lastUsedAt": self.last_used_at,
            "revokedAt": self.revoked_at,
        }


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _row_to_key(row: sa.Row[tuple[object, ...]], scope: tuple[str, ...] = ()) -> ApiKey:
    m = row._mapping
    return ApiKey(
        m["id"],
        m["name"],
        m["role"],
        m["prefix"],
        m["created_at"],
        m["last_used_at"],
        m["revoked_at"],
        scope,
    )


def _scopes(conn: sa.Connection, key_ids: list[int]) -> dict[int, tuple[str, ...]]:
    """The project names each key is bound to (keys without any are left out)."""
    if not key_ids:
        return {}
    rows = conn.execute(
        sa.select(api_key_projects.c.key_id, projects.c.name)
        .join(projects, projects.c.id == api_key_projects.c.project_id)
        .where(api_key_projects.c.key_id.in_(key_ids))
        .order_by(projects.c.name)
    ).all()
    found: dict[int, list[str]] = {}
    for key_id, project in rows:
        found.setdefault(key_id, []).append(project)
    return {k: tuple(v) for k, v in found.items()}


def create_key(
    engine: sa.Engine, *, name: str, role: str, projects: tuple[str, ...] | list[str] = ()
) -> tuple[ApiKey, str]:
    """A new key, bound to ``projects`` (created if needed; none: global); returns it
    with the plaintext token, which is never stored."""
    if role not in ROLES:
        raise InvalidInput(f"Unknown role {role!r}: use one of {', '.join(ROLES)}.", field="role")
    if not name.strip():
        raise InvalidInput("A key needs a name (who or what uses it).", field="name")
    if len(name.strip()) > 100 or "\x00" in name:
        raise InvalidInput("A key name is at most 100 characters of text.", field="name")
    scope = tuple(sorted(set(projects)))
    if scope and role == "admin":
        raise InvalidInput(
            "An admin key is always global; bind bot or client keys to projects instead.",
            field="projects",
        )
    token = _PREFIX + secrets.token_urlsafe(32)
    with db.transaction(engine) as conn:
        project_ids = [ensure_project(conn, p) for p in scope]
        result = conn.execute(
            api_keys.insert().values(
                name=name.strip(),
                role=role,
                key_hash=_hash(token),
                prefix=token[:12],
                created_at=utcnow(),
            )
        )
        assert result.inserted_primary_key is not None
        key_id = result.inserted_primary_key[0]
        if project_ids:
            conn.execute(
                api_key_projects.insert(),
                [{"key_id": key_id, "project_id": pid} for pid in project_ids],
            )
        row = conn.execute(sa.select(api_keys).where(api_keys.c.id == key_id)).one()
    return _row_to_key(row, scope), token


# One query on every request: the key and its projects together (a row per project,
# one row with no project for a global key). Built once: building it costs more
# than running it.
_AUTHENTICATE = (
    sa.select(api_keys, projects.c.name.label("scope_project"))
    .outerjoin(api_key_projects, api_key_projects.c.key_id == api_keys.c.id)
    .outerjoin(projects, projects.c.id == api_key_projects.c.project_id)
    .where(api_keys.c.key_hash == sa.bindparam("key_hash"), api_keys.c.revoked_at.is_(None))
)


def authenticate(engine: sa.Engine, token: str) -> ApiKey | None:
    """The live key matching ``token``, or None."""
    if not token.startswith(_PREFIX) or len(token) > 200:
        return None
    with db.reading(engine) as conn:
        rows = conn.execute(_AUTHENTICATE, {"key_hash": _hash(token)}).all()
    if not rows:
        return None
    row = rows[0]
    scope = tuple(sorted(r.scope_project for r in rows if r.scope_project is not None))
    now = utcnow()
    last = row.last_used_at
    # A write a minute at most, and only then a write transaction: on SQLite a
    # write per request would queue every request behind the one writer.
    if last is None or (now - last).total_seconds() > 60:
        with db.transaction(engine) as conn:
            conn.execute(api_keys.update().where(api_keys.c.id == row.id).values(last_used_at=now))
    return _row_to_key(row, scope)


def get_key(engine: sa.Engine, key_id: int) -> ApiKey | None:
    """A live key by id (None when unknown or revoked): sessions re-check it per request."""
    with db.reading(engine) as conn:
        row = conn.execute(
            sa.select(api_keys).where(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None))
        ).first()
        if row is None:
            return None
        return _row_to_key(row, _scopes(conn, [row.id]).get(row.id, ()))


def list_keys(engine: sa.Engine) -> list[ApiKey]:
    with engine.connect() as conn:
        rows = conn.execute(sa.select(api_keys).order_by(api_keys.c.id)).all()
        scopes = _scopes(conn, [r.id for r in rows])
    return [_row_to_key(r, scopes.get(r.id, ())) for r in rows]


def revoke_key(engine: sa.Engine, key_id: int) -> None:
    with db.transaction(engine) as conn:
        result = conn.execute(
            api_keys.update()
            .where(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None))
            .values(revoked_at=utcnow())
        )
    if result.rowcount == 0:
        raise NotFound(f"No live API key with id {key_id}.", key_id=key_id)
