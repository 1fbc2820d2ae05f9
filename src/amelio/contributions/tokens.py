"""``clientToken``: the server-issued identity of one contributing browser.

Trust is earned per client (its results agreeing with others'), so a client must
not be able to pick its identity: it could otherwise claim a trusted client's id,
or shed a bad record by inventing a new one under a name of its choice. The server
therefore issues each new client a token: the workspace signer's token for the
purpose ``client-token`` (:mod:`amelio.privacy.signing`), carrying the client's
ULID, which no other purpose's token can pass for. Tokens are stateless and do
not expire: the client keeps its token (and its trust) as long as it likes, and
any server sharing the secret verifies it.

A token that is malformed, forged, signed for another purpose or by another
workspace is refused with 422 ``invalid_client_token``: the request's API key is
fine, one of its fields is not; the client should drop the token and ask
``GET /v1/contributions/tasks`` without one for a new identity.
"""

from __future__ import annotations

import re

from amelio.errors import InvalidInput, InvalidToken
from amelio.privacy.signing import Signer, secret_key
from amelio.workspace.config import Settings

__all__ = ["CLIENT_TOKEN_PATTERN", "ClientTokens", "InvalidClientToken", "client_tokens"]

_PURPOSE = "client-token"
_ULID = re.compile(r"^[0-7][0-9A-HJKMNP-TV-Z]{25}$")  # upper-case, as issued
#: What a token looks like (documentation for the API; :meth:`ClientTokens.read` checks):
#: the purpose, the ULID's 26 bytes in base64 (35 characters), the signature.
CLIENT_TOKEN_PATTERN = rf"^{_PURPOSE}\.[A-Za-z0-9_-]{{35}}\.[A-Za-z0-9_-]{{43}}$"


class InvalidClientToken(InvalidInput):
    """A clientToken that is malformed, forged, or from another workspace."""

    code = "invalid_client_token"


class ClientTokens:
    """Issues and verifies client tokens under one key."""

    def __init__(self, key: bytes) -> None:
        self._signer = Signer(key)

    def issue(self, client_id: str) -> str:
        """The token of ``client_id`` (a ULID, upper-case)."""
        if not _ULID.match(client_id):
            raise ValueError(f"a client id is an upper-case ULID, not {client_id!r}")
        return self._signer.sign(client_id, _PURPOSE)

    def read(self, token: str) -> str:
        """The client id of a genuine ``token``; :class:`InvalidClientToken` otherwise."""
        try:
            client_id = self._signer.unsign(token, _PURPOSE, name="clientToken")
        except InvalidToken as exc:
            raise InvalidClientToken(
                f"{exc.message}. Leave it out to be issued a new one.",
                field="clientToken",
                **exc.details,
            ) from exc
        if not _ULID.match(client_id):  # only a key holder could sign one
            raise InvalidClientToken("clientToken is malformed.", field="clientToken")
        return client_id


def client_tokens(settings: Settings) -> ClientTokens:
    """The workspace's client-token signer (keyed by ``secret_key``)."""
    return ClientTokens(secret_key(settings))
