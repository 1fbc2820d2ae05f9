"""Prompt assembly: base system prompt + ``SKILLS_HINT`` + ``LEARNINGS`` + the message.

:func:`assemble` is pure and deterministic (same parts, same prompt, same hash),
so an interaction's ``promptHash`` identifies exactly what the model saw.
:func:`build_prompt` gathers the parts for a message from a workspace.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Any

from amelio import db
from amelio.assistant.learnings import LearningsBlock, prompt_block
from amelio.improve.rollouts import serving
from amelio.ops.tracing import span
from amelio.routing.router import Route, route_message
from amelio.skills.model import Skill
from amelio.skills.store import get_skill
from amelio.workspace.folder import Workspace
from amelio.workspace.projects import DEFAULT_PROJECT

__all__ = ["Prompt", "assemble", "build_prompt", "skill_block"]

MESSAGE_HEADER = "USER MESSAGE:"
SKILL_HEADER = "ACTIVE SKILL:"


@dataclass(frozen=True)
class Prompt:
    """What the model receives: ``system`` (instructions) and ``message`` (the user's),
    or both as one ``text`` for single-prompt providers such as the Claude CLI."""

    system: str
    message: str
    route: Route | None = None
    learnings: LearningsBlock | None = None
    #: The skill whose rulebook is in the prompt and whose rules check the answer (at
    #: the version a canary rollout gave this conversation).
    applied: Skill | None = None
    #: The canary rollout that chose the applied version, and the arm: ``canary`` (the
    #: new version) or ``control`` (the old one); None without a rollout.
    rollout_id: int | None = None
    arm: str | None = None

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
            "learningsUsed": list(self.learnings.ids) if self.learnings else [],
        }


def skill_block(name: str, content: str) -> str:
    """The applied skill's rulebook, so the model follows its current version."""
    return f"{SKILL_HEADER} {name}\n\n{content.strip()}" if content.strip() else ""


def assemble(system_prompt: str, hint: str, learnings: str, skill: str = "") -> str:
    """The system part: non-empty blocks in a fixed order, separated by blank lines."""
    parts = (system_prompt, hint, skill, learnings)
    return "\n\n".join(part.strip() for part in parts if part.strip())


def build_prompt(
    ws: Workspace,
    message: str,
    *,
    project: str = DEFAULT_PROJECT,
    scorer: str | None = None,
    skill: str | None = None,
    content: str | None = None,
    unit: str | None = None,
) -> Prompt:
    """Route the message, pick the learnings for the hinted skills, add the applied
    skill's rulebook, assemble.

    ``skill`` forces the applied skill (benchmarks run one skill on any message);
    ``content`` replaces its rulebook (the old and new versions of a proposal).
    ``unit`` (the user, else the conversation: :func:`amelio.improve.rollouts.unit_of`)
    is what a canary rollout of the applied skill sticks to; a forced ``skill`` is
    never rolled out (a benchmark compares the versions it is given).
    """

    settings = ws.settings
    with db.reading(ws.engine) as conn:
        with span("amelio.route", {"amelio.project": project}) as routed:
            route = route_message(ws, message, project=project, scorer=scorer, conn=conn)
            if routed is not None:
                routed.set_attributes(
                    {"amelio.route.scorer": route.scorer, "amelio.route.skills": list(route.names)}
                )
        with span("amelio.prompt", {"amelio.project": project}) as prompting:
            hinted = list(route.names)
            applied: Skill | None = None
            if skill is not None:
                applied = get_skill(conn, skill, project)
                hinted.append(skill)
            elif settings.apply_skill == "top" and route.top is not None:
                applied = route.top.skill or get_skill(conn, route.top.name, project)
            rollout_id = arm = None
            if applied is not None and skill is None:
                served = serving(conn, applied, unit)
                applied, rollout_id, arm = served.skill, served.rollout_id, served.arm
            block = prompt_block(ws, project=project, skills=hinted, conn=conn, message=message)
            if prompting is not None:
                prompting.set_attributes(
                    {
                        "amelio.prompt.learnings": len(block.ids),
                        "amelio.prompt.skill": applied.name if applied else "",
                    }
                )
    if applied is not None and content is not None:
        applied = replace(applied, spec=replace(applied.spec, content=content))
    body = ""
    if applied is not None and settings.prompt_skill_body == "top":
        body = skill_block(applied.name, applied.spec.content)
    system = assemble(settings.system_prompt, route.hint_block(), block.text, body)
    return Prompt(system, message, route, block, applied, rollout_id, arm)
