"""One signer: every MAC Amelio makes with the workspace's secret key, by purpose.

Feedback tokens, client tokens, dashboard sessions and their CSRF tokens,
Telegram's webhook secret, user pseudonyms, the feedback chain's key and the
daily salt are all keyed by one secret. Each is made under a *purpose*, and a
purpose is a namespace: a token signed for one never verifies for another, and
a digest made for one never equals one made for another, so a pseudonym stored
in the database can never give away the key of a token or of the chain.

**Tokens.** :meth:`Signer.sign` writes ``<purpose>.<value>[.<expiry>].<mac>``:
the value in URL-safe base64, the expiry (Unix seconds, when the token has a
``max_age_s``), then 43 characters of HMAC-SHA256 over all that precedes.
:meth:`Signer.unsign` gives the value back, or raises :class:`InvalidToken`
saying which of four things is wrong (``details["reason"]``): ``malformed``
(truncated, or not a token at all), ``purpose`` (signed for another purpose),
``signature`` (forged, altered, or signed by another workspace) or ``expired``.
Tokens are stateless: any server sharing the secret checks them.

**Digests.** :meth:`Signer.digest` is a keyed hash that is never read back:
a pseudonym, a CSRF token, a key derived for one use.

**How purposes stay apart.** A MAC is ``HMAC-SHA256(secret, label ‖ message)``,
where a purpose's label is the byte 0xFF, its name and a NUL. UTF-8 text never
holds 0xFF and no name holds a NUL, so no two purposes can ever MAC the same
bytes. Four purposes keep the labels their stored outputs were made under
(:data:`_STORED`); pseudonyms, stored since the first release as
``HMAC(secret, user)``, have the empty label, and a value that begins with
another purpose's label (the other stored ones; 0xFF, which no text holds) is
hashed under the pseudonym's own label instead, so no pseudonym can equal
another purpose's MAC or key.

The workspace's secret is ``secret_key`` from the settings, else a random key
generated once into ``.amelio/secret_key`` (:func:`secret_key`).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os
import re
import secrets
import time
from functools import cache
from pathlib import Path

from amelio.errors import InvalidToken
from amelio.workspace.config import Settings

__all__ = [
    "Signer",
    "equal",
    "forget_cached_key",
    "install_secret_key",
    "secret_key",
    "signer",
]

_KEY_FILE = "secret_key"
_NAME = re.compile(r"^[a-z][a-z0-9-]{0,39}$")
_MAC_CHARS = 43  # 32 bytes of SHA-256 in unpadded base64
#: Purposes whose outputs are stored keep the labels they were made under.
_STORED: dict[str, bytes] = {
    "pseudonym": b"",  # user_ref in interactions and votes; each day's event hashes
    "feedback-chain": b"amelio.feedback.chain.v1",  # the key of every stored link
    "feedback-salt": b"amelio.feedback.salt.v1:",  # the salt of a day (value: its date)
    "key-check": b"amelio backup: secret key check",  # the key's fingerprint in backups
}
#: What a pseudonym's value may not begin with: another purpose's label.
_RESERVED = (b"\xff", *(label for label in _STORED.values() if label))


@cache
def _label(purpose: str) -> bytes:
    stored = _STORED.get(purpose)
    if stored is not None:
        return stored
    if not _NAME.match(purpose):
        raise ValueError(f"a purpose is a short lower-case name, not {purpose!r}")
    return b"\xff" + purpose.encode("ascii") + b"\x00"


def equal(given: str | None, expected: str) -> bool:
    """Whether a secret someone sent is ``expected``, compared in constant time."""
    if not given or not given.isascii():  # compare_digest refuses non-ASCII text
        return False
    return hmac.compare_digest(given, expected)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Signer:
    """Signs, checks and hashes under one secret, always for a named purpose."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def digest(self, value: str | bytes, purpose: str) -> bytes:
        """HMAC-SHA256 of ``value`` for ``purpose`` (32 bytes)."""
        message = value.encode("utf-8") if isinstance(value, str) else value
        label = _label(purpose)
        if not label and message.startswith(_RESERVED):
            label = b"\xffpseudonym\x00"
        return hmac.digest(self._secret, label + message, "sha256")

    def hexdigest(self, value: str | bytes, purpose: str) -> str:
        return self.digest(value, purpose).hex()

    def matches(self, value: str | bytes, purpose: str, given: str | None) -> bool:
        """Whether ``given`` is :meth:`hexdigest` of ``value``."""
        return equal(given, self.hexdigest(value, purpose))

    def _mac(self, body: str, purpose: str) -> str:
        if purpose in _STORED:  # an open label: a token's MAC could be some pseudonym
            raise ValueError(f"{purpose!r} is for digests only, not for tokens")
        return _b64(self.digest(body.encode("ascii"), purpose))

    def sign(
        self,
        value: str,
        purpose: str,
        *,
        max_age_s: float | None = None,
        now: float | None = None,
    ) -> str:
        """A token carrying ``value`` for ``purpose``; with ``max_age_s`` it expires."""
        parts = [purpose, _b64(value.encode("utf-8"))]
        if max_age_s is not None:
            parts.append(str(int((time.time() if now is None else now) + max_age_s)))
        body = ".".join(parts)
        return f"{body}.{self._mac(body, purpose)}"

    def unsign(
        self, token: str, purpose: str, *, now: float | None = None, name: str | None = None
    ) -> str:
        """The value of a genuine, unexpired ``token`` signed for ``purpose``; else
        :class:`InvalidToken` (its message calls the token ``name``)."""
        what = name or f"the {purpose} token"
        parts = token.split(".")
        if (
            not token.isascii()
            or len(parts) not in (3, 4)
            or len(parts[-1]) != _MAC_CHARS
            or (len(parts) == 4 and not parts[2].isdigit())
        ):
            raise InvalidToken(f"{what} is truncated or malformed", reason="malformed")
        if parts[0] != purpose:
            shown = repr(parts[0]) if _NAME.match(parts[0]) else "another"
            raise InvalidToken(
                f"{what} was signed for {shown} purpose, not {purpose!r}", reason="purpose"
            )
        body = token[: -_MAC_CHARS - 1]
        if not hmac.compare_digest(parts[-1], self._mac(body, purpose)):
            raise InvalidToken(
                f"{what} signature does not match (forged, altered, or signed by another "
                "workspace)",
                reason="signature",
            )
        if len(parts) == 4 and (time.time() if now is None else now) > int(parts[2]):
            raise InvalidToken(f"{what} has expired", reason="expired")
        try:
            return _unb64(parts[1]).decode("utf-8")
        except (ValueError, binascii.Error) as exc:  # only a key holder could get here
            raise InvalidToken(f"{what} is truncated or malformed", reason="malformed") from exc


# -- the workspace's secret ---------------------------------------------------------------


def _staged(path: Path, data: bytes) -> Path:
    """``data`` written whole and synced to a private file beside ``path``, to be
    moved or linked into place: nobody ever reads a half-written key."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    staged = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        staged.unlink(missing_ok=True)
        raise
    return staged


@cache
def _file_key(path: Path) -> bytes:
    if path.is_file():
        return path.read_text(encoding="utf-8").strip().encode("utf-8")
    token = secrets.token_urlsafe(32).encode("ascii")
    # Linked into place: the link fails if another process won the race (an
    # O_EXCL create would let a second process read the file while still empty).
    staged = _staged(path, token + b"\n")
    try:
        os.link(staged, path)
    except FileExistsError:
        return path.read_text(encoding="utf-8").strip().encode("utf-8")
    finally:
        staged.unlink(missing_ok=True)
    return token


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
    source's, so that the feedback chain verifies and pseudonyms stay the same);
    this process forgets the old one."""
    path = (settings.data_dir / _KEY_FILE).resolve()
    os.replace(_staged(path, key.strip() + b"\n"), path)
    _file_key.cache_clear()


def signer(settings: Settings) -> Signer:
    """The workspace's signer, keyed by :func:`secret_key`."""
    return Signer(secret_key(settings))
