"""Personal data kept out of storage: one switch (``pii_scrub``) over every write path.

Free text that people type (search queries, comments, chat messages) may hold an
e-mail address, a phone, card or IBAN number, or an IP address. Each write path
that stores such text calls :func:`scrub_for_storage` with the *area* it writes,
and the ``pii_scrub`` setting decides which areas are scrubbed:

- ``events``  (default): feedback events and search impressions, the data that
  is collected in bulk from every user and kept for analysis;
- ``all``: also interaction messages and answers (and the eval details quoting
  an answer), comments on answers (👎 and Fix It) and learnings, with their
  ``learnings.md`` mirror;
- ``off``: nothing (for a store that must keep text verbatim, at the operator's risk).

``events`` is the default because the assistant's own records are what a person
reads to judge an answer, fix a skill or replay a benchmark: an operator who
does not need the verbatim text turns on ``all``. Scrubbing happens on the way
in: switching to ``all`` does not rewrite what is already stored.

Knowledge-layer texts (notebook sources, their chunks) are never scrubbed: they
are business documents whose contact details are the content.

The patterns themselves live in :mod:`amelio.privacy.anonymize` (``scrub``);
the list of fields, per area, is in ``docs/feedback.md#what-is-scrubbed``.
"""

from __future__ import annotations

from typing import Literal

from amelio.privacy.anonymize import scrub
from amelio.workspace.config import Settings

__all__ = ["Area", "scrub_for_storage", "scrubs"]

Area = Literal["events", "impressions", "interactions", "comments", "learnings"]
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
