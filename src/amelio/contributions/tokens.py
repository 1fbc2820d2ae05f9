"""``clientToken``: the server-issued identity of one contributing browser.

Trust is earned per client (its results agreeing with others'), so a client must
not be able to pick its identity: it could otherwise claim a trusted client's id,
or shed a bad record by inventing a new one under a name of its choice. The server
therefore issues each new client a token, ``c1.<clientId>.<mac>``: the client's
ULID and an HMAC-SHA256 of it under a key derived from the workspace secret for
this one purpose (so it can never be confused with a feedbackToken or a user
hash). Tokens are stateless and do not expire: the client keeps its token (and its
trust) as long as it likes, and any server sharing the secret verifies it.

A token that is malformed, forged or signed by another workspace is refused with
422 ``invalid_client_token``: the request's API key is fine, one of its fields is
not; the client should drop the token and ask ``GET /v1/contributions/tasks``
without one for a new identity.
"""

from __future__ import annotations

import hashlib
import hmac
import re

from amelio.errors import InvalidInput
from amelio.feedback.tokens import _b64
from amelio.privacy.identity import secret_key
from amelio.workspace.config import Settings

__all__ = ["CLIENT_TOKEN_PATTERN", "ClientTokens", "InvalidClientToken", "client_tokens"]

_VERSION = "c1"
_PURPOSE = b"amelio.contributions.client.v1"
_ULID_CHARS = r"[0-7][0-9A-HJKMNP-TV-Z]{25}"  # upper-case, as issued
_ULID = re.compile(f"^{_ULID_CHARS}$")
#: What a token looks like (documentation for the API; :meth:`ClientTokens.read` checks).
CLIENT_TOKEN_PATTERN = rf"^{_VERSION}\.{_ULID_CHARS}\.[A-Za-z0-9_-]{{43}}$"


class InvalidClientToken(InvalidInput):
    """A clientToken that is malformed, forged, or from another workspace."""

    code = "invalid_client_token"


class ClientTokens:
    """Issues and verifies client tokens under one key."""

    def __init__(self, key: bytes) -> None:
        self._key = hmac.new(key, _PURPOSE, hashlib.sha256).digest()

    def _mac(self, client_id: str) -> str:
        return _b64(hmac.digest(self._key, client_id.encode("ascii"), "sha256"))

    def issue(self, client_id: str) -> str:
        """The token of ``client_id`` (a ULID, upper-case)."""
        if not _ULID.match(client_id):
            raise ValueError(f"a client id is an upper-case ULID, not {client_id!r}")
        return f"{_VERSION}.{client_id}.{self._mac(client_id)}"

    def read(self, token: str) -> str:
        """The client id of a genuine ``token``; :class:`InvalidClientToken` otherwise."""
        version, _, rest = token.partition(".")
        client_id, _, mac = rest.partition(".")
        if not token.isascii() or version != _VERSION or not _ULID.match(client_id) or not mac:
            raise InvalidClientToken(
                "clientToken is malformed: send the token GET /v1/contributions/tasks "
                "returned, or leave it out to be issued a new one.",
                field="clientToken",
            )
        if not hmac.compare_digest(mac, self._mac(client_id)):
            raise InvalidClientToken(
                "clientToken signature does not match (forged, altered, or issued by "
                "another server): leave it out to be issued a new one.",
                field="clientToken",
            )
        return client_id


def client_tokens(settings: Settings) -> ClientTokens:
    """The workspace's client-token signer (keyed by ``secret_key``)."""
    return ClientTokens(secret_key(settings))
