"""Sage: an LLM rewrites underperforming skills from their failures.

Sage reads a skill with its evidence (metrics, the rules that fail *with the
texts of answers that failed them*, the judge's reasons from earlier
benchmarks, the learnings people taught) and writes the whole new rulebook,
or ``NO_CHANGE``. Reflective rewriting works from failure text, not from a
score: "success rate 40 %" tells a model nothing about what to change, the
failed answer does.

The answer becomes a proposal (``proposed_by: sage``) only if it is a whole
skill: an empty answer, a diff, a fragment ("rest unchanged…") or a copy of the
evidence itself (its ``METRICS:``/``CORRECTIONS PEOPLE GAVE:`` blocks) is rejected
with a logged reason, never stored, and so is a rewrite whose added text breaks
the skill's own forbidding rules (:func:`amelio.improve.proposals.own_rule_breaks`).
Each proposal is then benchmarked.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from amelio.assistant.learnings import list_learnings
from amelio.assistant.quality import (
    Finding,
    evidence_sources,
    find_underperformers,
    quality_metrics,
    recent_failed_answers,
)
from amelio.db.schema import benchmark_runs, benchmark_scenarios, proposals
from amelio.errors import AmelioError, InvalidInput
from amelio.improve.bench import PINNED, judge_provider, run_benchmark
from amelio.improve.budget import Budget, BudgetExceeded, Estimate, sage_estimate
from amelio.improve.drafts import WRITTEN_FROM, Drafted, Proposer
from amelio.improve.nightly import (
    improve_notification,
    proposal_actions,
    run_improve,
)
from amelio.improve.notifiers import Notification, notify_all
from amelio.improve.proposals import (
    ResemblesRejected,
    create_proposal,
    describe_breaks,
    own_rule_breaks,
    pending_for,
)
from amelio.llm import LLMRequest, Provider, get_provider
from amelio.skills.model import Skill
from amelio.skills.store import get_skill, list_skills
from amelio.workspace.folder import Workspace
from amelio.workspace.projects import DEFAULT_PROJECT

__all__ = ["SageResult", "analyze", "improve_with_sage", "parse_sage_answer", "sage_proposer"]

log = logging.getLogger(__name__)

NO_CHANGE = "NO_CHANGE"
SAGE_SYSTEM = (
    "You are Sage, an expert editor of the skills (Markdown rulebooks) an AI assistant "
    "follows. You get one skill and evidence of how it performed: metrics, the eval rules its "
    "answers failed with the failing answers, a judge's comments and corrections people "
    "gave. Rewrite the skill so future answers avoid those failures: keep what works, keep "
    "its structure and headings, make instructions concrete and checkable. Reply with the "
    "COMPLETE new skill body in Markdown (no YAML front matter, no commentary, no diff), or "
    f"exactly {NO_CHANGE} if the skill needs no change."
)
_PLACEHOLDER = re.compile(
    r"\((?:the )?(?:rest|remainder|remaining|everything else)[^)]{0,40}(?:unchanged|same|as "
    r"before)\)|\[\s*\.\.\.\s*\]|^\s*\.\.\.\s*$|\brest of the skill (?:is )?unchanged\b",
    re.IGNORECASE | re.MULTILINE,
)


#: The headings of Sage's evidence, in its prompt. A rewrite holding one of them at a
#: line start is the model copying its input into the skill (a 0.5B model does: its
#: "rewrite" was the old skill followed by its own METRICS and CORRECTIONS blocks),
#: which would teach every later answer the evidence instead of the lesson.
_CURRENT = "CURRENT CONTENT:"
_METRICS = "METRICS:"
_FLAGGED = "WHY IT IS FLAGGED:"
_FAILED = "ANSWERS THAT FAILED A RULE:"
_JUDGE_COMMENTS = "JUDGE COMMENTS FROM EARLIER BENCHMARKS:"
_CORRECTIONS = "CORRECTIONS PEOPLE GAVE:"
EVIDENCE_HEADINGS = (_CURRENT, _METRICS, _FLAGGED, _FAILED, _JUDGE_COMMENTS, _CORRECTIONS)


class SageRejected(ValueError):
    """Sage's answer is not a whole skill; the message says why."""


@dataclass(frozen=True)
class SageResult:
    skill: str
    project: str
    outcome: str  # proposed | no_change | skipped | rejected | error
    reason: str = ""
    proposal_id: int | None = None
    benchmark: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "skill": self.skill,
            "project": self.project,
            "outcome": self.outcome,
            "reason": self.reason,
            "proposalId": self.proposal_id,
            "benchmark": self.benchmark,
        }


def parse_sage_answer(text: str, current: str) -> str | None:
    """The new content, None for ``NO_CHANGE``; :class:`SageRejected` otherwise."""
    answer = text.strip()
    if answer.upper().strip(".` ") == NO_CHANGE or answer.splitlines()[:1] == [NO_CHANGE]:
        return None
    fence = re.match(r"^```[\w-]*\n(.*?)\n?```\s*$", answer, re.DOTALL)
    if fence:
        answer = fence.group(1).strip()
    if not answer:
        raise SageRejected("the answer is empty")
    lines = answer.splitlines()
    if any(line.startswith("@@ ") for line in lines) or (
        any(line.startswith("--- ") for line in lines)
        and any(line.startswith("+++ ") for line in lines)
    ):
        raise SageRejected("the answer is a diff, not the whole skill")
    if _PLACEHOLDER.search(answer):
        raise SageRejected(
            "the answer elides part of the skill (a placeholder such as 'rest unchanged')"
        )
    if len(answer) < 0.5 * len(current.strip()):
        raise SageRejected(
            f"the answer looks like a fragment ({len(answer)} characters for a "
            f"skill of {len(current.strip())})"
        )
    if answer.strip() == current.strip():
        return None
    echoed = [
        heading
        for heading in EVIDENCE_HEADINGS
        if re.search(rf"(?m)^\s*{re.escape(heading)}", answer) and heading not in current
    ]
    if echoed:
        raise SageRejected(
            f"the answer copies Sage's evidence into the skill ({', '.join(echoed)}) "
            "instead of rewriting it"
        )
    return answer + "\n"


def _judge_reasons(ws: Workspace, skill_id: int, limit: int = 6) -> list[str]:
    query = (
        sa.select(benchmark_scenarios.c.result)
        .join(benchmark_runs, benchmark_runs.c.id == benchmark_scenarios.c.run_id)
        .join(proposals, proposals.c.id == benchmark_runs.c.proposal_id)
        .where(proposals.c.skill_id == skill_id, benchmark_scenarios.c.source != PINNED)
        .order_by(benchmark_scenarios.c.id.desc())
        .limit(limit)
    )
    with ws.engine.connect() as conn:
        return [str(r.get("reason")) for r in conn.execute(query).scalars() if r.get("reason")]


def _prompt(ws: Workspace, skill: Skill, project: str, finding: Finding | None) -> str:
    metrics = next((m for m in quality_metrics(ws, project) if m.skill == skill.name), None)
    parts = [
        f"SKILL: {skill.name}",
        f"DESCRIPTION: {skill.spec.description}",
        "",
        _CURRENT,
        skill.spec.content.strip(),
        "",
    ]
    if metrics is not None:
        parts.append(
            f"{_METRICS} used {metrics.applied_count} times, success rate "
            f"{metrics.success_rate:.0%}, {metrics.feedback_positive} 👍 / "
            f"{metrics.feedback_negative} 👎."
        )
        if finding is not None:
            parts.append(f"{_FLAGGED} " + "; ".join(finding.reasons) + ".")
        rules = {str(r.get("id")): r for r in skill.spec.evals or ()}
        for rule_id, count in sorted(metrics.rule_failures.items(), key=lambda x: -x[1]):
            name = rules.get(rule_id, {}).get("name", rule_id)
            parts.append(f"- rule {rule_id} “{name}” failed {count} times")
    failed = finding.failed_answers if finding else recent_failed_answers(ws, project, skill.name)
    if failed:
        parts += ["", _FAILED]
        parts += [f"[{rule_id}] {text}" for rule_id, text in failed]
    reasons = _judge_reasons(ws, skill.id)
    if reasons:
        parts += ["", _JUDGE_COMMENTS, *(f"- {r}" for r in reasons)]
    taught = [i.rule for i in list_learnings(ws, project=project) if i.skill == skill.name]
    if taught:
        parts += ["", _CORRECTIONS, *(f"- {r}" for r in taught)]
    return "\n".join(parts)


def _sage_provider(ws: Workspace) -> Provider:
    settings = ws.settings
    update: dict[str, Any] = {"llm_timeout": settings.sage_timeout}
    if settings.sage_model:
        update["llm_model"] = settings.sage_model
    return get_provider(settings.model_copy(update=update), purpose="Sage")


def _draft(
    ws: Workspace, provider: Provider, skill: Skill, project: str, finding: Finding | None
) -> Drafted | None:
    completion = provider.complete(
        LLMRequest.single(SAGE_SYSTEM, _prompt(ws, skill, project, finding), max_tokens=4000)
    )
    content = parse_sage_answer(completion.text, skill.spec.content)
    if content is None:
        return None
    reasons = "; ".join(finding.reasons) if finding else "asked to review it"
    sources = (
        finding.sources
        if finding
        else evidence_sources(
            ws,
            project,
            skill.name,
            [i.id for i in list_learnings(ws, project=project) if i.skill == skill.name],
        )
    )
    return Drafted(
        content,
        f"Sage ({completion.model}) rewrote {skill.name}: {reasons}.",
        {
            "model": completion.model,
            "inputTokens": completion.input_tokens,
            "outputTokens": completion.output_tokens,
            "costUsd": completion.cost_usd,
            WRITTEN_FROM: list(sources),
        },
    )


def _budgeted(ws: Workspace, provider: Provider, budget: Budget) -> tuple[Provider, Provider]:
    """Sage's provider and the benchmark's judge, each call counted against ``budget``."""
    return budget.wrap(provider), budget.wrap(judge_provider(ws, provider))


def sage_proposer(provider: Provider, budget: Budget | None = None) -> Proposer:
    """A proposer for :func:`amelio.improve.nightly.run_improve` that asks Sage; a
    skill it cannot rewrite within ``budget`` is recorded as left undone."""

    def propose(ws: Workspace, finding: Finding) -> Drafted | None:
        skill = get_skill(ws.engine, finding.skill, finding.project)
        try:
            return _draft(ws, provider, skill, finding.project, finding)
        except SageRejected as exc:
            raise InvalidInput(f"Sage's answer was rejected: {exc}") from exc
        except BudgetExceeded:
            if budget is not None:
                budget.undone.append(f"{finding.skill} ({finding.project}): not rewritten")
            raise

    return propose


def _targets(
    ws: Workspace, project: str, names: Sequence[str] | None
) -> list[tuple[str, Finding | None]]:
    findings = {f.skill: f for f in find_underperformers(ws, project)}
    if names:
        visible = {s.name for s in list_skills(ws.engine, project)}
        unknown = [n for n in names if n not in visible]
        if unknown:
            raise InvalidInput(
                f"Unknown skill(s) for project {project!r}: {', '.join(unknown)}.", field="skills"
            )
        return [(n, findings.get(n)) for n in dict.fromkeys(names)]
    used = sorted(
        (m for m in quality_metrics(ws, project) if m.skill not in findings),
        key=lambda m: (m.success_rate, -m.feedback_negative, m.skill),
    )
    order: list[tuple[str, Finding | None]] = [(f.skill, f) for f in findings.values()]
    order += [(m.skill, None) for m in used]
    return order[: ws.settings.sage_max_skills]


def estimate(
    ws: Workspace,
    *,
    projects: Sequence[str],
    skills: Sequence[str] | None = None,
    benchmark: bool = True,
    underperformers_only: bool = False,
) -> Estimate:
    """What :func:`analyze` (or, with ``underperformers_only``, ``amelio improve
    --sage``) would spend at most on ``projects``: Sage's rewrite of each skill it
    would take up, and its benchmark with ``benchmark``. Reads only."""
    targets = []
    for project in projects:
        chosen = (
            [(f.skill, f) for f in find_underperformers(ws, project)]
            if underperformers_only
            else _targets(ws, project, skills)
        )
        for name, finding in chosen:
            skill = get_skill(ws.engine, name, project)
            with ws.engine.connect() as conn:
                if pending_for(conn, skill.id) is not None:
                    continue
            prompt = _prompt(ws, skill, project, finding)
            targets.append((name, project, prompt, skill.spec.content))
    return sage_estimate(ws, targets, benchmark=benchmark)


def analyze(
    ws: Workspace,
    *,
    project: str = DEFAULT_PROJECT,
    skills: Sequence[str] | None = None,
    provider: Provider | None = None,
    benchmark: bool = True,
    on_proposal: Callable[[int], None] | None = None,
    budget: Budget | None = None,
) -> list[SageResult]:
    """Ask Sage to rewrite the weakest skills; each rewrite becomes a benchmarked proposal.

    ``on_proposal`` replaces the inline benchmark (the server runs it in the background).
    Every call is counted against ``budget`` (none: unbounded), and the run stops at
    the first call that would go over: what was left undone is in ``budget.undone``.
    """
    budget = budget or Budget()
    provider, judge = _budgeted(ws, provider or _sage_provider(ws), budget)
    results: list[SageResult] = []
    targets = _targets(ws, project, skills)
    for index, (name, finding) in enumerate(targets):
        skill = get_skill(ws.engine, name, project)
        with ws.engine.connect() as conn:
            pending = pending_for(conn, skill.id)
        if pending is not None:
            results.append(SageResult(name, project, "skipped", f"proposal #{pending} is pending"))
            continue
        try:
            draft = _draft(ws, provider, skill, project, finding)
        except SageRejected as exc:
            log.warning("sage: answer for %s rejected: %s", name, exc)
            results.append(SageResult(name, project, "rejected", str(exc)))
            continue
        except BudgetExceeded as exc:
            budget.undone += [f"{n}: not rewritten" for n, _ in targets[index:]]
            results.append(SageResult(name, project, "skipped", exc.message))
            break
        except AmelioError as exc:
            results.append(SageResult(name, project, "error", exc.message))
            continue
        if draft is None:
            results.append(SageResult(name, project, "no_change", "Sage answered NO_CHANGE"))
            continue
        breaks = own_rule_breaks(skill.spec, draft.content)
        if breaks:
            results.append(SageResult(name, project, "rejected", describe_breaks(breaks)))
            continue
        try:
            proposal = create_proposal(
                ws,
                name,
                project=project,
                proposed_content=draft.content,
                rationale=draft.rationale,
                evidence=draft.evidence,
                proposed_by="sage",
                author="sage",
            )
        except ResemblesRejected as exc:  # a person already said no to this change
            results.append(SageResult(name, project, "rejected", exc.message))
            continue
        verdict = None
        if on_proposal is not None:
            on_proposal(proposal.id)
        elif benchmark:
            try:
                report = run_benchmark(
                    ws, proposal.id, provider=provider, judge=judge, notify=False
                )
                verdict = {
                    "runId": report.run_id,
                    "verdict": report.verdict,
                    "improvementPct": report.improvement_pct,
                }
            except BudgetExceeded as exc:
                budget.undone.append(f"proposal #{proposal.id}: not benchmarked")
                verdict = {"error": exc.message}
            except AmelioError as exc:
                verdict = {"error": exc.message}
        results.append(SageResult(name, project, "proposed", draft.rationale, proposal.id, verdict))
    proposed = [r for r in results if r.proposal_id is not None]
    if proposed:
        notify_all(ws.settings, sage_notification(ws, project, proposed))
    return results


def sage_notification(ws: Workspace, project: str, results: Sequence[SageResult]) -> Notification:
    """What the notifiers receive after a Sage analysis that proposed something."""
    lines = [
        f"- #{r.proposal_id} {r.skill}: {r.reason}"
        + (
            f" (benchmark: {r.benchmark.get('verdict') or r.benchmark.get('error')})"
            if r.benchmark
            else ""
        )
        for r in results
    ]
    count = len(results)
    return Notification(
        kind="sage.report",
        title=f"Sage: {count} new proposal{'s' * (count != 1)} in {project}",
        text="\n".join(lines),
        payload={"project": project, "results": [r.to_dict() for r in results]},
        actions=proposal_actions(ws, [{"id": r.proposal_id, "skill": r.skill} for r in results]),
    )


def improve_with_sage(
    ws: Workspace,
    *,
    projects: Sequence[str] | None = None,
    dry_run: bool = False,
    notify: bool = True,
    provider: Provider | None = None,
    budget: Budget | None = None,
) -> Any:
    """``amelio improve --sage``: the nightly loop with Sage writing the proposals,
    each then benchmarked. Calls count against ``budget`` as in :func:`analyze`, and
    the report's ``budget`` says what was spent and left undone."""
    budget = budget or Budget()
    provider, judge = _budgeted(ws, provider or _sage_provider(ws), budget)
    # The notifiers hear of the run once its benchmarks are done, so that each
    # proposal arrives with its verdict rather than before it.
    report = run_improve(
        ws,
        projects=projects,
        dry_run=dry_run,
        proposer=sage_proposer(provider, budget),
        mode="sage",
        notify=False,
    )
    for made in report.proposals:
        if made.get("id") is None:
            continue
        try:
            bench = run_benchmark(ws, made["id"], provider=provider, judge=judge, notify=False)
            made["benchmark"] = {"verdict": bench.verdict, "improvementPct": bench.improvement_pct}
        except BudgetExceeded as exc:
            budget.undone.append(f"proposal #{made['id']}: not benchmarked")
            made["benchmark"] = {"error": exc.message}
        except AmelioError as exc:
            made["benchmark"] = {"error": exc.message}
    report.budget = budget.to_dict()
    if notify and not dry_run:
        report.deliveries = [
            d.to_dict() for d in notify_all(ws.settings, improve_notification(ws, report))
        ]
    return report
