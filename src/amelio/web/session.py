"""Dashboard sessions: a signed, HTTP-only cookie, and CSRF tokens bound to it.

The cookie holds the API key's id, role, a random nonce and an expiry, signed by
the workspace's signer for the purpose ``dashboard-session``; the key itself
never goes to the browser. Every request re-checks that the key still exists and
is not revoked, so revoking a key ends its sessions at once. Forms carry a token
derived from the session nonce (purpose ``dashboard-csrf``): a page on another
site cannot read it, so it cannot forge a POST.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass

from amelio.errors import InvalidToken
from amelio.privacy.signing import signer
from amelio.workspace.config import Settings

__all__ = ["COOKIE", "Session", "csrf_token", "dump_session", "load_session", "valid_csrf"]

COOKIE = "amelio_session"
LIFETIME_S = 12 * 3600
_SESSION = "dashboard-session"
_CSRF = "dashboard-csrf"


@dataclass(frozen=True)
class Session:
    key_id: int
    role: str
    name: str
    nonce: str


def dump_session(settings: Settings, *, key_id: int, role: str, name: str) -> str:
    data = {"k": key_id, "r": role, "n": name, "x": secrets.token_urlsafe(16)}
    value = json.dumps(data, separators=(",", ":"))
    return signer(settings).sign(value, _SESSION, max_age_s=LIFETIME_S)


def load_session(settings: Settings, cookie: str | None) -> Session | None:
    """The session in a cookie, or None when it is missing, forged or expired."""
    if not cookie:
        return None
    try:
        data = json.loads(signer(settings).unsign(cookie, _SESSION))
        return Session(int(data["k"]), str(data["r"]), str(data["n"]), str(data["x"]))
    except (InvalidToken, ValueError, KeyError, TypeError):
        return None


def csrf_token(settings: Settings, session: Session) -> str:
    return signer(settings).hexdigest(session.nonce, _CSRF)


def valid_csrf(settings: Settings, session: Session, token: str | None) -> bool:
    return signer(settings).matches(session.nonce, _CSRF, token)
