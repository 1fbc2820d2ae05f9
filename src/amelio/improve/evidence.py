"""One piece of failure evidence, as findings group it.

Its own module so that the assistant's side (:mod:`amelio.improve.findings`) and
search's (:mod:`amelio.improve.search_findings`) build the same record without
importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

__all__ = ["Evidence"]


@dataclass(frozen=True)
class Evidence:
    ref: str
    skill: str | None
    text: str
    at: datetime
    #: What a search fix is drawn from (queries, clicks, the hidden document), read
    #: fresh from the window each run and never stored.
    detail: dict[str, Any] | None = field(default=None, compare=False)
