"""Pseudonymous user references and the workspace's secret key.

Raw user ids never reach storage: they are stored as an HMAC under the
workspace's secret, so the same person is recognized across their votes while
the database alone cannot tell who they are.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from functools import cache
from pathlib import Path

from amelio.workspace.config import Settings

__all__ = ["ANONYMOUS", "forget_cached_key", "secret_key", "user_ref"]

ANONYMOUS = "anonymous"
_KEY_FILE = "secret_key"


@cache
def _file_key(path: Path) -> bytes:
    if path.is_file():
        return path.read_text(encoding="utf-8").strip().encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    # Written whole to a private file, then linked into place: the link fails if
    # another process won the race, and nobody ever reads a half-written key (an
    # O_EXCL create would let a second process read the file while still empty).
    staged = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(token + "\n")
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(staged, path)
        except FileExistsError:
            return path.read_text(encoding="utf-8").strip().encode("utf-8")
    finally:
        staged.unlink(missing_ok=True)
    return token.encode("utf-8")


def forget_cached_key() -> None:
    """Read the key file anew next time: a restore has just replaced it."""
    _file_key.cache_clear()


def secret_key(settings: Settings) -> bytes:
    """``secret_key`` from the settings, else the workspace's generated one."""
    configured = settings.secret_key.get_secret_value()
    if configured:
        return configured.encode("utf-8")
    return _file_key((settings.data_dir / _KEY_FILE).resolve())


def install_secret_key(settings: Settings, key: bytes) -> None:
    """Make ``key`` the workspace's generated secret key (an import brings its
    source's, so that the feedback chain verifies and pseudonyms stay the same).
    Written to a private file and moved into place; this process forgets the old one."""
    path = (settings.data_dir / _KEY_FILE).resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    staged = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.strip() + b"\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(staged, path)
    _file_key.cache_clear()


def user_ref(settings: Settings, user: str | None) -> str:
    """A stable pseudonym for ``user`` (``anonymous`` when there is none)."""
    if not user:
        return ANONYMOUS
    digest = hmac.new(secret_key(settings), user.encode("utf-8"), hashlib.sha256)
    return digest.hexdigest()[:32]
