"""Prompt assembly: base system prompt + ``SKILLS_HINT`` + ``LEARNINGS`` + the message.

:func:`assemble` is pure and deterministic (same parts, same prompt, same hash),
so an interaction's ``promptHash`` identifies exactly what the model saw.
:func:`build_prompt` gathers the parts for a message from a workspace.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from amelio import db
from amelio.learnings import LearningsBlock, prompt_block
from amelio.projects import DEFAULT_PROJECT
from amelio.router import Route, route_message
from amelio.workspace import Workspace

__all__ = ["Prompt", "assemble", "build_prompt"]

MESSAGE_HEADER = "USER MESSAGE:"


@dataclass(frozen=True)
class Prompt:
    """What the model receives: ``system`` (instructions) and ``message`` (the user's),
    or both as one ``text`` for single-prompt providers such as the Claude CLI."""

    system: str
    message: str
    route: Route | None = None
    learnings: LearningsBlock | None = None

    @property
    def text(self) -> str:
        return f"{self.system}\n\n{MESSAGE_HEADER}\n{self.message}"

    @property
    def hash(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "message": self.message,
            "text": self.text,
            "promptHash": self.hash,
            "skills": [h.to_dict() for h in self.route.hits] if self.route else [],
            "learningIds": list(self.learnings.ids) if self.learnings else [],
        }


def assemble(system_prompt: str, hint: str, learnings: str) -> str:
    """The system part: non-empty blocks in a fixed order, separated by blank lines."""
    return "\n\n".join(part.strip() for part in (system_prompt, hint, learnings) if part.strip())


def build_prompt(ws: Workspace, message: str, *, project: str = DEFAULT_PROJECT,
                 scorer: str | None = None) -> Prompt:
    """Route the message, pick the learnings for the hinted skills, assemble."""
    with db.reading(ws.engine) as conn:
        route = route_message(ws, message, project=project, scorer=scorer, conn=conn)
        block = prompt_block(ws, project=project, skills=route.names, conn=conn)
    system = assemble(ws.settings.system_prompt, route.hint_block(), block.text)
    return Prompt(system, message, route, block)
