"""The skill generator: a new skill drafted from a notebook (the seed's Neural
Skill Generator).

A person names an objective ("how we handle refund requests"); the generator
retrieves the notebook's passages about it, asks the LLM (as an "AI architect")
for a strict Markdown rulebook as a complete ``SKILL.md``, and checks the answer
as a skill file: front matter with a valid new name, a description, triggers
and keywords, and a rulebook body. A valid answer becomes a proposal
(``proposed_by: generator``, scope ``new``) that does nothing until a person
approves it; an invalid one is refused with the reason and nothing is stored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from amelio.errors import Conflict, InvalidInput, LLMError
from amelio.improve.proposals import Proposal, create_skill_proposal
from amelio.knowledge.index import Passage, embedder_for, search
from amelio.knowledge.notebooks import notebook_id
from amelio.knowledge.query import numbered_passages
from amelio.llm import LLMRequest, Provider, get_provider
from amelio.workspace.folder import Workspace
from amelio.workspace.projects import DEFAULT_PROJECT

__all__ = ["GENERATOR_SYSTEM", "GeneratedSkill", "generate_skill", "parse_generated_skill"]

MAX_OBJECTIVE = 2000
PASSAGES = 8
GENERATOR_SYSTEM = (
    "You are an AI architect who turns an organisation's knowledge into skills: strict "
    "Markdown rulebooks an AI assistant follows. From the numbered knowledge passages ONLY, "
    "write one new skill for the objective. Reply with the complete SKILL.md file and nothing "
    "else, in exactly this shape:\n"
    "---\n"
    "name: a-short-lowercase-hyphenated-name\n"
    "description: One sentence saying when to use the skill.\n"
    "triggers: [phrases a user message would contain when the skill applies]\n"
    "keywords: [domain terms]\n"
    "---\n"
    "# Title\n\n"
    "Numbered, concrete, checkable rules, each followed by the passages it comes from, "
    "as [1] or [2][3]. No rule that the passages do not support."
)
_FENCE = re.compile(r"^```[\w-]*\n(.*?)\n?```\s*$", re.DOTALL)


def parse_generated_skill(text: str) -> str:
    """The SKILL.md text inside the LLM's answer (code fences and any words before
    the front matter dropped); validation happens when the proposal is made."""
    answer = text.strip()
    fence = _FENCE.match(answer)
    if fence:
        answer = fence.group(1).strip()
    start = answer.find("---\n")
    if start > 0 and answer[:start].strip() and "\n---" in answer[start + 4 :]:
        answer = answer[start:]
    return answer + "\n"


@dataclass(frozen=True)
class GeneratedSkill:
    proposal: Proposal
    passages: tuple[Passage, ...]
    model: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "proposal": self.proposal.to_dict(with_content=True),
            "model": self.model,
            "sources": sorted({p.source_id for p in self.passages}),
        }


def _provider(ws: Workspace) -> Provider:
    settings = ws.settings
    return get_provider(
        settings.model_copy(update={"llm_timeout": settings.knowledge_generate_timeout}),
        purpose="The skill generator",
    )


def generate_skill(
    ws: Workspace,
    notebook: str,
    objective: str,
    *,
    project: str = DEFAULT_PROJECT,
    provider: Provider | None = None,
    author: str = "generator",
) -> GeneratedSkill:
    """Draft a new skill from ``notebook`` for ``objective`` and store it as a
    pending proposal; :class:`LLMError` (nothing stored) when the LLM's answer is
    not a valid new skill."""
    objective = " ".join(objective.split())
    if not objective:
        raise InvalidInput(
            "The objective is empty: say what the skill should do.", field="objective"
        )
    if len(objective) > MAX_OBJECTIVE:
        raise InvalidInput(f"The objective is over {MAX_OBJECTIVE} characters.", field="objective")
    with ws.engine.connect() as conn:
        nid = notebook_id(conn, notebook, project)
    passages = tuple(
        search(
            ws.settings,
            ws.engine,
            nid,
            objective,
            top_k=max(PASSAGES, ws.settings.knowledge_top_k),
            embedder=embedder_for(ws.settings),
        )
    )
    if not passages:
        raise InvalidInput(
            f"Notebook {notebook!r} has nothing about {objective!r}: sync sources about it first.",
            field="objective",
        )
    llm = provider or _provider(ws)
    completion = llm.complete(
        LLMRequest.single(
            GENERATOR_SYSTEM,
            f"OBJECTIVE: {objective}\n\nPASSAGES:\n\n{numbered_passages(passages)}",
            max_tokens=4000,
            temperature=0,
        )
    )
    skill_md = parse_generated_skill(completion.text)
    evidence = {
        "notebook": notebook,
        "objective": objective,
        "model": completion.model,
        "sources": sorted({p.source_id for p in passages}),
        "passages": [
            {"n": i, "sourceId": p.source_id, "chunk": p.position}
            for i, p in enumerate(passages, start=1)
        ],
        "inputTokens": completion.input_tokens,
        "outputTokens": completion.output_tokens,
    }
    try:
        proposal = create_skill_proposal(
            ws,
            skill_md,
            rationale=f"Generated from notebook {notebook!r} for: {objective}",
            proposed_by="generator",
            author=author,
            project=project,
            scope="global" if project == DEFAULT_PROJECT else "project",
            evidence=evidence,
            source="generated SKILL.md",
        )
    except (InvalidInput, Conflict) as exc:
        raise LLMError(
            f"The generated skill was rejected, nothing was stored: {exc.message}",
            model=completion.model,
            **exc.details,
        ) from exc
    return GeneratedSkill(proposal, passages, completion.model)
