"""Which Telegram chats may talk to Amelio, for which project and with which role.

A chat earns a link by redeeming a one-time code that an operator printed with
``amelio telegram invite``: the code travels out of band (a direct message, a
meeting), so being able to find the bot is not enough to use it. Only the code's
SHA-256 is stored, as for API keys, and it is redeemed by one conditional UPDATE:
a code used, expired or raced by two chats at once links exactly one chat or none.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NoReturn

import sqlalchemy as sa

from amelio import db
from amelio.db.schema import projects, telegram_chats, telegram_invites, utcnow
from amelio.errors import Conflict, InvalidInput, NotFound
from amelio.workspace.folder import Workspace
from amelio.workspace.projects import require_project

__all__ = [
    "DEFAULT_TTL",
    "MAX_TTL",
    "ROLES",
    "ChatLink",
    "Invite",
    "admin_chats",
    "create_invite",
    "get_link",
    "list_links",
    "redeem_invite",
    "unlink",
]

ROLES = ("user", "admin")
DEFAULT_TTL = timedelta(hours=24)
MAX_TTL = timedelta(days=30)
#: Telegram passes at most 64 characters of [A-Za-z0-9_-] through a t.me/BOT?start=
#: link; 16 url-safe characters are 96 random bits.
_CODE_BYTES = 12
MAX_CODE_CHARS = 64


@dataclass(frozen=True)
class Invite:
    id: int
    project: str
    role: str
    expires_at: datetime

    def to_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "project": self.project,
            "role": self.role,
            "expiresAt": self.expires_at.isoformat(),
        }


@dataclass(frozen=True)
class ChatLink:
    chat_id: int
    project: str
    role: str
    title: str | None
    linked_by: str | None
    linked_at: datetime

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    def to_dict(self) -> dict[str, object]:
        return {
            "chatId": self.chat_id,
            "project": self.project,
            "role": self.role,
            "title": self.title,
            "linkedBy": self.linked_by,
            "linkedAt": self.linked_at.isoformat(),
        }


def _hash(code: str) -> str:
    return hashlib.sha256(code.encode("utf-8")).hexdigest()


def create_invite(
    ws: Workspace,
    *,
    project: str,
    role: str,
    ttl: timedelta = DEFAULT_TTL,
    created_by: str | None = None,
) -> tuple[Invite, str]:
    """A one-time code that links the chat which sends ``/start CODE`` to ``project``
    with ``role``; returns the invite and the code, which is never stored."""
    if role not in ROLES:
        raise InvalidInput(f"Unknown role {role!r}: use user or admin.", field="role")
    if not timedelta(minutes=1) <= ttl <= MAX_TTL:
        raise InvalidInput("An invite lives between one minute and 30 days.", field="ttl")
    project_id = require_project(ws.engine, project)
    code = secrets.token_urlsafe(_CODE_BYTES)
    now = utcnow()
    with db.transaction(ws.engine) as conn:
        result = conn.execute(
            telegram_invites.insert().values(
                code_hash=_hash(code),
                project_id=project_id,
                role=role,
                created_by=created_by,
                created_at=now,
                expires_at=now + ttl,
            )
        )
        assert result.inserted_primary_key is not None
        invite_id = int(result.inserted_primary_key[0])
    return Invite(invite_id, project, role, now + ttl), code


def redeem_invite(
    ws: Workspace, code: str, *, chat_id: int, title: str | None = None, user: str | None = None
) -> ChatLink:
    """Link ``chat_id`` with the invite ``code`` names, once; a chat already linked is
    linked anew (a new project or role)."""
    code = code.strip()
    if not code or len(code) > MAX_CODE_CHARS:
        raise InvalidInput("This invite code is not valid.", field="code")
    now = utcnow()
    with db.transaction(ws.engine) as conn:
        claimed = conn.execute(
            telegram_invites.update()
            .where(
                telegram_invites.c.code_hash == _hash(code),
                telegram_invites.c.used_at.is_(None),
                telegram_invites.c.expires_at > now,
            )
            .values(used_at=now, used_by_chat=chat_id)
            .returning(
                telegram_invites.c.id, telegram_invites.c.project_id, telegram_invites.c.role
            )
        ).first()
        if claimed is None:
            _refuse(conn, code)
        conn.execute(telegram_chats.delete().where(telegram_chats.c.chat_id == chat_id))
        conn.execute(
            telegram_chats.insert().values(
                chat_id=chat_id,
                project_id=claimed.project_id,
                role=claimed.role,
                title=(title or "")[:200] or None,
                linked_by=(user or "")[:200] or None,
                linked_at=now,
                invite_id=claimed.id,
            )
        )
    link = get_link(ws, chat_id)
    assert link is not None
    return link


def _refuse(conn: sa.Connection, code: str) -> NoReturn:
    """Say why ``code`` could not be redeemed (the UPDATE that claims it only knows
    that it could not)."""
    row = conn.execute(
        sa.select(telegram_invites.c.used_at, telegram_invites.c.expires_at).where(
            telegram_invites.c.code_hash == _hash(code)
        )
    ).first()
    if row is None:
        raise InvalidInput("This invite code is not valid.", field="code")
    if row.used_at is not None:
        raise Conflict("This invite code was already used: ask for a new one.")
    raise InvalidInput(
        f"This invite code expired at {row.expires_at:%Y-%m-%d %H:%M} UTC: ask for a new one.",
        field="code",
    )


def _links() -> sa.Select[tuple[object, ...]]:
    return sa.select(telegram_chats, projects.c.name.label("project")).join(
        projects, projects.c.id == telegram_chats.c.project_id
    )


def _link(row: sa.Row[tuple[object, ...]]) -> ChatLink:
    m = row._mapping
    return ChatLink(
        int(m["chat_id"]),
        str(m["project"]),
        str(m["role"]),
        m["title"],
        m["linked_by"],
        m["linked_at"],
    )


#: Built once: every update the bot receives asks it (SQLAlchemy caches its compiled
#: form, so only the parameter changes).
_BY_CHAT = _links().where(telegram_chats.c.chat_id == sa.bindparam("chat_id"))


def get_link(ws: Workspace, chat_id: int) -> ChatLink | None:
    """The link of ``chat_id``, or None. Read from the database on every update, not
    cached: an unlink takes effect on the next message, in every process."""
    with db.reading(ws.engine) as conn:
        row = conn.execute(_BY_CHAT, {"chat_id": chat_id}).first()
    return _link(row) if row is not None else None


def list_links(ws: Workspace, *, project: str | None = None) -> list[ChatLink]:
    query = _links().order_by(projects.c.name, telegram_chats.c.linked_at)
    if project is not None:
        query = query.where(projects.c.name == project)
    with db.reading(ws.engine) as conn:
        return [_link(row) for row in conn.execute(query)]


def admin_chats(ws: Workspace, project: str | None = None) -> list[ChatLink]:
    """The chats that receive reports and proposal cards (of ``project``, or all)."""
    return [link for link in list_links(ws, project=project) if link.is_admin]


def unlink(ws: Workspace, chat_id: int) -> ChatLink:
    """Remove a chat's link; the chat gets the unlinked instruction from then on."""
    link = get_link(ws, chat_id)
    if link is None:
        raise NotFound(f"Chat {chat_id} is not linked.", chat_id=chat_id)
    with db.transaction(ws.engine) as conn:
        conn.execute(telegram_chats.delete().where(telegram_chats.c.chat_id == chat_id))
    return link
