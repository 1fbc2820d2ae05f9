"""Personal data kept out of storage: one switch (``pii_scrub``) over every write path.

Free text that people type (search queries, comments, chat messages) may hold an
e-mail address, a phone, card or IBAN number, or an IP address. Each write path
that stores such text calls :func:`scrub_for_storage` with the *area* it writes,
and the ``pii_scrub`` setting decides which areas are scrubbed:

- ``events``  (default): feedback events and search impressions;
- ``all``: also interaction messages and answers, answer feedback comments and
  learnings;
- ``off``: nothing (for a store that must keep text verbatim, at the operator's risk).

The patterns themselves live in :mod:`amelio.feedback.anonymize` (``scrub``).
"""

from __future__ import annotations

from typing import Literal

from amelio.config import Settings
from amelio.feedback.anonymize import scrub

__all__ = ["Area", "scrub_for_storage", "scrubs"]

Area = Literal["events", "impressions", "interactions", "learnings"]
_EVENT_AREAS = frozenset({"events", "impressions"})


def scrubs(settings: Settings, area: Area) -> bool:
    """Whether text stored in ``area`` is scrubbed under ``settings.pii_scrub``."""
    mode = settings.pii_scrub
    if mode == "off":
        return False
    return mode == "all" or area in _EVENT_AREAS


def scrub_for_storage(settings: Settings, text: str, area: Area) -> str:
    """``text`` as it may be stored in ``area``: scrubbed when the setting says so."""
    return scrub(text) if text and scrubs(settings, area) else text
