"""Idle compute lent by browsers (the MartyContributionV1 contract).

Pages running ``amelio.js`` may, with the person's consent and within a CPU
budget for their device's tier, embed search documents the server has not
embedded yet. :mod:`~amelio.contributions.schema` is the contract (the result a
browser sends), :mod:`~amelio.contributions.tokens` the server-issued client
identity, :mod:`~amelio.contributions.trust` which identities may vouch for each
other, and :mod:`~amelio.contributions.service` leases tasks, verifies results (two
independent clients agreeing, or the server's own spot-check), keeps each client's
trust and writes accepted vectors to the search store. Off unless the operator sets
``contributions = true``.
"""

from amelio.contributions.policy import DIMENSIONS, browsers_embed, import_embedder, unavailable
from amelio.contributions.schema import (
    CPU_SECONDS_PER_HOUR,
    Contribution,
    MartyContributionV1,
    contribution_adapter,
    decode_vectors,
    encode_vectors,
    json_schema,
)
from amelio.contributions.service import (
    INITIAL_TRUST,
    TRUST_FLOOR,
    Contributions,
    contribution_stats,
    input_digest,
)
from amelio.contributions.tokens import ClientTokens, InvalidClientToken, client_tokens

__all__ = [
    "CPU_SECONDS_PER_HOUR",
    "DIMENSIONS",
    "INITIAL_TRUST",
    "TRUST_FLOOR",
    "ClientTokens",
    "Contribution",
    "Contributions",
    "InvalidClientToken",
    "MartyContributionV1",
    "browsers_embed",
    "client_tokens",
    "contribution_adapter",
    "contribution_stats",
    "decode_vectors",
    "encode_vectors",
    "import_embedder",
    "input_digest",
    "json_schema",
    "unavailable",
]
