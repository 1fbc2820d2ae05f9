"""Pseudonymous user references.

Raw user ids never reach storage: they are stored as a keyed hash under the
workspace's secret, so the same person is recognized across their votes while
the database alone cannot tell who they are. The hash is the one every stored
``user_ref`` was made with, so a person keeps their pseudonym across versions.
"""

from __future__ import annotations

from amelio.privacy.signing import signer
from amelio.workspace.config import Settings

__all__ = ["ANONYMOUS", "user_ref"]

ANONYMOUS = "anonymous"


def user_ref(settings: Settings, user: str | None) -> str:
    """A stable pseudonym for ``user`` (``anonymous`` when there is none)."""
    if not user:
        return ANONYMOUS
    return signer(settings).hexdigest(user, "pseudonym")[:32]
