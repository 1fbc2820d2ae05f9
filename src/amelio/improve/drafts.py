"""What a proposer hands back, and where a proposal remembers what it was written from.

Kept apart from :mod:`amelio.improve.nightly` so that everything that drafts
proposals (the nightly run, Sage, findings) can share these without importing
the nightly run itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from amelio.assistant.quality import Finding
    from amelio.workspace.folder import Workspace

__all__ = ["WRITTEN_FROM", "Drafted", "Proposer"]


@dataclass(frozen=True)
class Drafted:
    """What a proposer returns: the new content and why."""

    content: str
    rationale: str
    evidence: dict[str, Any] = field(default_factory=dict)


#: The evidence key that lists the interactions a proposal was written from (a
#: benchmark replays none of them): a proposer that saw interactions records them.
WRITTEN_FROM = "writtenFrom"

#: A proposer turns an underperforming skill's evidence into a draft, or None with
#: nothing to propose.
Proposer = Callable[["Workspace", "Finding"], Drafted | None]
