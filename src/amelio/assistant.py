"""respond(): the online path of the skill loop.

message → router → learnings → prompt → LLM → evals → answer + footnotes, and
every step recorded as one interaction, so quality metrics can always be
rebuilt from what was stored. The LLM call is the only slow part; everything
Amelio adds around it is measured by ``benchmarks/respond_overhead.py``.

Under ``pii_scrub = all`` the stored message, answer and eval details are
scrubbed (:mod:`amelio.pii`); the model still sees the message and the person
still gets the answer as written: only the record loses the personal data.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from amelio import db, evals
from amelio.db.schema import eval_results, interactions, projects, utcnow
from amelio.errors import LLMError
from amelio.identity import user_ref
from amelio.llm import Completion, LLMRequest, Provider, TextDelta, get_provider
from amelio.pii import scrub_for_storage
from amelio.projects import DEFAULT_PROJECT, project_id
from amelio.prompt import Prompt, build_prompt
from amelio.router import RouteHit
from amelio.skills.model import Skill
from amelio.workspace import Workspace

__all__ = ["Reply", "answer_with", "get_interaction", "respond", "respond_stream"]


@dataclass(frozen=True)
class Reply:
    """An answer as the user sees it (``text``: answer + footnotes) and as it was checked."""

    interaction_id: int
    text: str
    answer: str
    footnotes: tuple[str, ...]
    skills: tuple[RouteHit, ...]
    applied_skill: str | None
    evals: evals.EvalReport
    completion: Completion
    prompt_hash: str
    learning_ids: tuple[int, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {
            "interactionId": self.interaction_id,
            "text": self.text,
            "answer": self.answer,
            "footnotes": list(self.footnotes),
            "skills": [h.to_dict() for h in self.skills],
            "appliedSkill": self.applied_skill,
            "evals": self.evals.to_dict(),
            "promptHash": self.prompt_hash,
            "learningIds": list(self.learning_ids),
            "model": self.completion.model,
            "provider": self.completion.provider,
            "usage": {"inputTokens": self.completion.input_tokens,
                      "outputTokens": self.completion.output_tokens,
                      "costUsd": self.completion.cost_usd},
            "latencyMs": round(self.completion.latency_ms, 2),
        }


# Compiled rules per (skill id, version): regexes and schemas compile once, not
# per answer. Versions never change content, so entries never go stale.
_rules_cache: dict[tuple[int, int], tuple[evals.EvalRule, ...]] = {}
_rules_lock = threading.Lock()


def _rules(skill: Skill) -> tuple[evals.EvalRule, ...]:
    key = (skill.id, skill.version)
    with _rules_lock:
        cached = _rules_cache.get(key)
    if cached is None:
        cached = evals.parse_rules(list(skill.spec.evals or ()))
        with _rules_lock:
            if len(_rules_cache) > 1024:
                _rules_cache.clear()
            _rules_cache[key] = cached
    return cached


def _prepare(ws: Workspace, message: str, project: str, scorer: str | None
             ) -> tuple[Prompt, Skill | None, LLMRequest]:
    prompt = build_prompt(ws, message, project=project, scorer=scorer)
    request = LLMRequest.single(prompt.system, message, max_tokens=ws.settings.llm_max_tokens)
    return prompt, prompt.applied, request


def _finish(ws: Workspace, *, prompt: Prompt, applied: Skill | None, completion: Completion,
            project: str, user: str | None, started: float) -> Reply:
    """Check the answer, store the interaction and its eval results in one transaction."""
    rules = _rules(applied) if applied is not None else ()
    report = evals.evaluate(completion.text, rules, max_chars=ws.settings.max_text_chars)
    footnotes = tuple(evals.render_footnotes(report))
    hits = prompt.route.hits if prompt.route else ()
    learning_ids = prompt.learnings.ids if prompt.learnings else ()
    total_ms = (time.perf_counter() - started) * 1000

    def clean(text: str) -> str:
        # Eval details too: one may quote the answer (starts_with shows its start).
        return scrub_for_storage(ws.settings, text, "interactions")

    with db.transaction(ws.engine) as conn:
        result = conn.execute(interactions.insert().values(
            project_id=project_id(conn, project),
            user_ref=user_ref(ws.settings, user) if user else None,
            message=clean(prompt.message),
            hinted=[{"name": h.name, "score": round(h.score, 4)} for h in hits],
            applied_skill=applied.name if applied else None,
            skill_version=applied.version if applied else None,
            prompt_hash=prompt.hash,
            learning_ids=list(learning_ids),
            answer=clean(completion.text),
            success=report.success,
            provider=completion.provider,
            model=completion.model,
            llm_ms=completion.latency_ms,
            total_ms=total_ms,
            input_tokens=completion.input_tokens,
            output_tokens=completion.output_tokens,
            cost_usd=completion.cost_usd,
            created_at=utcnow(),
        ))
        assert result.inserted_primary_key is not None
        interaction_id = int(result.inserted_primary_key[0])
        if report.results:
            conn.execute(eval_results.insert(), [
                {"interaction_id": interaction_id, "rule_id": r.rule_id, "rule_name": r.name,
                 "rule_type": r.type, "severity": r.severity, "passed": r.passed,
                 "detail": clean(r.detail)}
                for r in report.results
            ])
    return Reply(
        interaction_id=interaction_id,
        text=evals.append_footnotes(completion.text, report),
        answer=completion.text,
        footnotes=footnotes,
        skills=hits,
        applied_skill=applied.name if applied else None,
        evals=report,
        completion=completion,
        prompt_hash=prompt.hash,
        learning_ids=learning_ids,
    )


def respond(ws: Workspace, message: str, *, project: str = DEFAULT_PROJECT,
            user: str | None = None, provider: Provider | None = None,
            scorer: str | None = None) -> Reply:
    """Answer ``message`` with the configured LLM and record the interaction."""
    started = time.perf_counter()
    provider = provider or get_provider(ws.settings, purpose="Chat")
    prompt, applied, request = _prepare(ws, message, project, scorer)
    completion = provider.complete(request)
    return _finish(ws, prompt=prompt, applied=applied, completion=completion, project=project,
                   user=user, started=started)


def respond_stream(ws: Workspace, message: str, *, project: str = DEFAULT_PROJECT,
                   user: str | None = None, provider: Provider | None = None,
                   scorer: str | None = None) -> Iterator[TextDelta | Reply]:
    """Like :func:`respond`, yielding text deltas as the model writes, then the Reply.

    Routing, the prompt and the provider are set up before the first ``next()``
    returns, so configuration errors surface before anything is streamed.
    """
    started = time.perf_counter()
    provider = provider or get_provider(ws.settings, purpose="Chat")
    prompt, applied, request = _prepare(ws, message, project, scorer)

    def events() -> Iterator[TextDelta | Reply]:
        completion: Completion | None = None
        for event in provider.stream(request):
            if isinstance(event, Completion):
                completion = event
            else:
                yield event
        if completion is None:
            raise LLMError("The provider's stream ended without a final answer.")
        yield _finish(ws, prompt=prompt, applied=applied, completion=completion,
                      project=project, user=user, started=started)

    return events()


def get_interaction(ws: Workspace, interaction_id: int) -> dict[str, Any]:
    """One stored interaction with its eval results (for display and feedback)."""
    from amelio.errors import NotFound

    with ws.engine.connect() as conn:
        row = conn.execute(
            sa.select(interactions, projects.c.name.label("project_name"))
            .join(projects, projects.c.id == interactions.c.project_id)
            .where(interactions.c.id == interaction_id)).first()
        if row is None:
            raise NotFound(f"No interaction {interaction_id}.", interaction_id=interaction_id)
        rules = conn.execute(sa.select(eval_results).where(
            eval_results.c.interaction_id == interaction_id).order_by(eval_results.c.id)).all()
    m = row._mapping
    return {
        "interactionId": m["id"], "project": m["project_name"], "message": m["message"],
        "answer": m["answer"],
        "hinted": m["hinted"], "appliedSkill": m["applied_skill"],
        "skillVersion": m["skill_version"], "promptHash": m["prompt_hash"],
        "learningIds": m["learning_ids"], "success": m["success"], "model": m["model"],
        "provider": m["provider"], "llmMs": m["llm_ms"], "totalMs": m["total_ms"],
        "inputTokens": m["input_tokens"], "outputTokens": m["output_tokens"],
        "costUsd": m["cost_usd"], "createdAt": m["created_at"].isoformat(),
        "evals": [{"ruleId": r.rule_id, "name": r.rule_name, "type": r.rule_type,
                   "severity": r.severity, "passed": r.passed, "detail": r.detail}
                  for r in rules],
    }


def answer_with(ws: Workspace, message: str, *, skill: str, content: str, provider: Provider,
                project: str = DEFAULT_PROJECT) -> tuple[Completion, evals.EvalReport]:
    """The pipeline respond() runs, with ``skill`` applied at ``content`` and nothing
    stored: how a benchmark compares an old and a new version of a skill."""
    prompt = build_prompt(ws, message, project=project, skill=skill, content=content)
    request = LLMRequest.single(prompt.system, message, max_tokens=ws.settings.llm_max_tokens)
    completion = provider.complete(request)
    assert prompt.applied is not None
    report = evals.evaluate(completion.text, _rules(prompt.applied),
                            max_chars=ws.settings.max_text_chars)
    return completion, report
