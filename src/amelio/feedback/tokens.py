"""``feedbackToken``: proof that a search response really served a query.

The search module signs one token per response, binding its ``queryId``,
``requestId`` and an expiry; the collector accepts an event about a query only
with that query's token. Without it anyone holding a client key could inject
clicks for queries that were never served and steer the feedback ranking.

A token is ``v1.<claims>.<mac>``: the claims (``queryId``, ``requestId``, expiry
in Unix milliseconds) in URL-safe base64, then an HMAC-SHA256 of them under a
key derived from the workspace secret for this one purpose, so a token can
never be confused with a user hash or a chain signature. Tokens are stateless:
any server sharing the secret verifies them, nothing is stored per query.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
from dataclasses import dataclass

from amelio.errors import InvalidInput, InvalidToken
from amelio.privacy.identity import secret_key
from amelio.workspace.config import Settings

__all__ = ["InvalidToken", "TokenClaims", "TokenSigner", "check_binding", "token_signer"]

_VERSION = "v1"
_PURPOSE = b"amelio.feedback.token.v1"
_SEP = "\n"


@dataclass(frozen=True)
class TokenClaims:
    query_id: str
    request_id: str
    expires_ms: int


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class TokenSigner:
    """Issues and verifies feedback tokens under one key."""

    def __init__(self, key: bytes, ttl_s: int) -> None:
        self._key = hmac.new(key, _PURPOSE, hashlib.sha256).digest()
        self.ttl_s = ttl_s

    def _mac(self, claims: str) -> str:
        return _b64(hmac.digest(self._key, claims.encode("ascii"), "sha256"))

    def issue(self, query_id: str, request_id: str, *, now_ms: int | None = None) -> str:
        """The token a search response carries for ``query_id``."""
        if not query_id or not request_id or _SEP in query_id + request_id:
            raise InvalidInput("A feedback token needs a queryId and a requestId (single-line).")
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        raw = _SEP.join((query_id, request_id, str(now_ms + self.ttl_s * 1000)))
        claims = _b64(raw.encode("utf-8"))
        return f"{_VERSION}.{claims}.{self._mac(claims)}"

    def read(self, token: str, *, now_ms: int | None = None) -> TokenClaims:
        """The claims of a genuine, unexpired ``token``; :class:`InvalidToken` otherwise."""
        if not token.isascii():  # a genuine token is base64 and dots, nothing else
            raise InvalidToken("feedbackToken is malformed")
        version, _, rest = token.partition(".")
        claims, _, mac = rest.partition(".")
        if version != _VERSION or not claims or not mac:
            raise InvalidToken("feedbackToken is malformed")
        if not hmac.compare_digest(mac, self._mac(claims)):
            raise InvalidToken(
                "feedbackToken signature does not match (forged or from another server)"
            )
        try:
            query_id, request_id, expiry = _unb64(claims).decode("utf-8").split(_SEP)
            expires_ms = int(expiry)
        except (ValueError, binascii.Error) as exc:  # only a key holder could get here
            raise InvalidToken("feedbackToken is malformed") from exc
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        if now_ms > expires_ms:
            raise InvalidToken("feedbackToken has expired")
        return TokenClaims(query_id, request_id, expires_ms)

    def verify(
        self, token: str, query_id: str, request_id: str | None = None, *, now_ms: int | None = None
    ) -> TokenClaims:
        """Check that ``token`` was issued for this query (and request, when given)."""
        claims = self.read(token, now_ms=now_ms)
        check_binding(claims, query_id, request_id)
        return claims


def check_binding(claims: TokenClaims, query_id: str, request_id: str | None) -> None:
    """Raise :class:`InvalidToken` unless ``claims`` name this query and request."""
    if claims.query_id != query_id:
        raise InvalidToken("feedbackToken was issued for another queryId")
    if request_id is not None and claims.request_id != request_id:
        raise InvalidToken("feedbackToken was issued for another requestId")


def token_signer(settings: Settings) -> TokenSigner:
    """The workspace's signer: the search module issues with it, the collector verifies."""
    return TokenSigner(secret_key(settings), settings.feedback_token_ttl)
