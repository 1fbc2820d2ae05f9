"""Dashboard sessions: an HMAC-signed, HTTP-only cookie, and CSRF tokens bound to it.

The cookie holds the API key's id, role, a random nonce and an expiry, signed
with the workspace's secret key; the key itself never goes to the browser. Every
request re-checks that the key still exists and is not revoked, so revoking a
key ends its sessions at once. Forms carry a token derived from the session
nonce: a page on another site cannot read it, so it cannot forge a POST.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass

from amelio.privacy.identity import secret_key
from amelio.workspace.config import Settings

__all__ = ["COOKIE", "Session", "csrf_token", "dump_session", "load_session", "valid_csrf"]

COOKIE = "amelio_session"
LIFETIME_S = 12 * 3600


@dataclass(frozen=True)
class Session:
    key_id: int
    role: str
    name: str
    nonce: str
    expires: int


def _sign(settings: Settings, payload: bytes) -> str:
    return hmac.new(secret_key(settings), b"session:" + payload, hashlib.sha256).hexdigest()


def dump_session(settings: Settings, *, key_id: int, role: str, name: str) -> str:
    data = {
        "k": key_id,
        "r": role,
        "n": name,
        "x": secrets.token_urlsafe(16),
        "e": int(time.time()) + LIFETIME_S,
    }
    payload = base64.urlsafe_b64encode(json.dumps(data, separators=(",", ":")).encode())
    return f"{payload.decode()}.{_sign(settings, payload)}"


def load_session(settings: Settings, cookie: str | None) -> Session | None:
    """The session in a cookie, or None when it is missing, forged or expired."""
    if not cookie or "." not in cookie or len(cookie) > 4096 or not cookie.isascii():
        return None  # a signed cookie is base64 and hex: anything else is forged
    payload, signature = cookie.rsplit(".", 1)
    if not hmac.compare_digest(_sign(settings, payload.encode()), signature):
        return None
    try:
        data = json.loads(base64.urlsafe_b64decode(payload.encode()))
        session = Session(
            int(data["k"]), str(data["r"]), str(data["n"]), str(data["x"]), int(data["e"])
        )
    except (ValueError, KeyError, TypeError):
        return None
    return session if session.expires > time.time() else None


def csrf_token(settings: Settings, session: Session) -> str:
    return hmac.new(
        secret_key(settings), b"csrf:" + session.nonce.encode(), hashlib.sha256
    ).hexdigest()


def valid_csrf(settings: Settings, session: Session, token: str | None) -> bool:
    if not token or not token.isascii():  # compare_digest refuses non-ASCII str
        return False
    return hmac.compare_digest(csrf_token(settings, session), token)
