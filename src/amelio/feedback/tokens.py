"""``feedbackToken``: proof that a search response really served a query.

The search module signs one token per response, binding its ``queryId``,
``requestId`` and an expiry; the collector accepts an event about a query only
with that query's token. Without it anyone holding a client key could inject
clicks for queries that were never served and steer the feedback ranking.

A token is the workspace signer's token for the purpose ``feedback-token``
(:mod:`amelio.privacy.signing`): the ``queryId`` and ``requestId``, an expiry
``feedback_token_ttl`` after issue, and an HMAC-SHA256 of them that no other
purpose's key can make. Tokens are stateless: any server sharing the secret
verifies them, nothing is stored per query.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from amelio.errors import InvalidInput, InvalidToken
from amelio.privacy.signing import Signer, secret_key
from amelio.workspace.config import Settings

__all__ = ["InvalidToken", "TokenClaims", "TokenSigner", "check_binding", "token_signer"]

_PURPOSE = "feedback-token"
_NAME = "feedbackToken"
_SEP = "\n"


@dataclass(frozen=True)
class TokenClaims:
    query_id: str
    request_id: str


def _seconds(now_ms: int | None) -> float:
    return time.time() if now_ms is None else now_ms / 1000


class TokenSigner:
    """Issues and verifies feedback tokens under one key."""

    def __init__(self, key: bytes, ttl_s: int) -> None:
        self._signer = Signer(key)
        self.ttl_s = ttl_s

    def issue(self, query_id: str, request_id: str, *, now_ms: int | None = None) -> str:
        """The token a search response carries for ``query_id``."""
        if not query_id or not request_id or _SEP in query_id + request_id:
            raise InvalidInput("A feedback token needs a queryId and a requestId (single-line).")
        return self._signer.sign(
            query_id + _SEP + request_id, _PURPOSE, max_age_s=self.ttl_s, now=_seconds(now_ms)
        )

    def read(self, token: str, *, now_ms: int | None = None) -> TokenClaims:
        """The claims of a genuine, unexpired ``token``; :class:`InvalidToken` otherwise."""
        value = self._signer.unsign(token, _PURPOSE, now=_seconds(now_ms), name=_NAME)
        query_id, sep, request_id = value.partition(_SEP)
        if not sep:  # only a key holder could get here
            raise InvalidToken(f"{_NAME} is malformed", reason="malformed")
        return TokenClaims(query_id, request_id)

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
