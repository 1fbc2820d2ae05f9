"""Idle compute lent by browsers (the MartyContributionV1 contract).

Pages running ``amelio.js`` may, with the person's consent and within a CPU
budget for their device's tier, embed search documents the server has not
embedded yet. :mod:`~amelio.contributions.schema` is the contract (the result a
browser sends), :mod:`~amelio.contributions.tokens` the server-issued client
identity, :mod:`~amelio.contributions.trust` which identities may vouch for each
other, and :class:`~amelio.contributions.service.Contributions` leases tasks
(:mod:`~amelio.contributions.leases`), records results
(:mod:`~amelio.contributions.results`), verifies them (two independent clients
agreeing, or the server's own spot-check) and writes accepted vectors to the search
store (:mod:`~amelio.contributions.verdicts`), keeping each client's trust;
:mod:`~amelio.contributions.stats` reports on it all. Off unless the operator sets
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
    input_digest,
    json_schema,
)
from amelio.contributions.service import Contributions
from amelio.contributions.stats import contribution_stats
from amelio.contributions.tokens import ClientTokens, InvalidClientToken, client_tokens
from amelio.contributions.trust import INITIAL_TRUST, TRUST_FLOOR

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
