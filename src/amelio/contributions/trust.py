"""Whose results may vouch for each other: networks, provenance and probation.

Two results that agree prove something only if two independent parties computed
them. A page's client key is public and identities are free (one request without a
``clientToken``), so an identity alone says nothing about who stands behind it: one
script can mint two and have them "agree" on anything. What an identity cannot
choose is where and when it was minted, so the server keeps both, and two
identities are **related** (never verify each other, never hold the same task) when:

* they were minted from one remote network: the same IPv4 /24 or IPv6 /48 (what one
  household, office or hosting customer typically holds), or
* one client key minted them within ``contributions_related_seconds`` of each other
  (a script minting a pair at once from two networks).

A network is kept only as a keyed digest of its prefix, never the address: enough to
tell two networks apart, not to say which they are.

A new identity is on **probation**: the server checks each of its results by
embedding a sample of the texts itself until ``contributions_probation`` of them
passed. Agreement with peers does not count towards it, since peers are exactly what
a forger can make up.

An identity's **trust** starts at :data:`INITIAL_TRUST`, rises a little with each
accepted result (:data:`TRUST_GAIN`) and drops sharply when the server proves a result
wrong (:data:`TRUST_PENALTY`); under :data:`TRUST_FLOOR` it gets no tasks.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from amelio.privacy.signing import Signer

__all__ = [
    "INITIAL_TRUST",
    "NETWORK_PREFIX",
    "TRUST_FLOOR",
    "TRUST_GAIN",
    "TRUST_PENALTY",
    "Contributor",
    "network_id",
    "network_of",
    "related",
]

INITIAL_TRUST = 0.5
#: Under this trust a client gets no more tasks.
TRUST_FLOOR = 0.2
#: An accepted result moves trust this share of the way to 1.
TRUST_GAIN = 0.1
#: A result proven wrong multiplies trust by this (0.5 → 0.125: under the floor).
TRUST_PENALTY = 0.25

#: The prefix length one remote network is taken to be, by IP version.
NETWORK_PREFIX = {4: 24, 6: 48}
#: The signer purpose that network digests are made under.
NETWORK_PURPOSE = "contribution-network"


def network_of(address: str | None) -> str:
    """The network ``address`` belongs to, as a prefix (``203.0.113.0/24``,
    ``2001:db8:7::/48``); an IPv4 address mapped into IPv6 is its IPv4 network. What
    is not an IP address (a Unix socket, a test client) is a network of its own name."""
    if not address:
        return "unknown"
    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return f"host:{address}"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    net = ipaddress.ip_network(f"{ip}/{NETWORK_PREFIX[ip.version]}", strict=False)
    return str(net)


def network_id(address: str | None, signer: Signer) -> str:
    """What is stored of ``address``: a keyed digest of its network (32 hex digits),
    by the workspace's one signer under a purpose of its own."""
    return signer.hexdigest(network_of(address), NETWORK_PURPOSE)[:32]


@dataclass(frozen=True)
class Contributor:
    """One browser identity, as far as verification needs it."""

    id: str
    trust: float
    #: :func:`network_id` of the address that minted it ("" for an identity minted
    #: before networks were kept: related by the network to no one).
    network: str
    #: The API key that minted it (None before keys were kept).
    key_id: int | None
    created_ms: int
    #: Its results the server confirmed by embedding the texts itself.
    checked: int

    def on_probation(self, probation: int) -> bool:
        """Whether its results still need the server's own check."""
        return self.checked < probation


def related(a: Contributor, b: Contributor, window_ms: int) -> bool:
    """Whether ``a`` and ``b`` may stand for one party, so that their agreement proves
    nothing: one identity, one network, or one key minting both within ``window_ms``."""
    if a.id == b.id:
        return True
    if a.network and a.network == b.network:
        return True
    return (
        a.key_id is not None
        and a.key_id == b.key_id
        and abs(a.created_ms - b.created_ms) < window_ms
    )
