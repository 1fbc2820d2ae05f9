"""Before changing models: every skill's cases answered by the current model and by a
candidate, the change per skill with its interval, and a proposal for those that lose.

Models are retired (OpenAI retires gpt-5 and o3 on 11 December 2026, GPT-4o and
4.1 on 14 January 2027), and every skill must then be re-checked on a successor.
:func:`compare_models` does it for one project:

* **Cases.** Per skill: its pinned cases, the messages of its newest 👍 answers,
  and, when asked, scenarios the configured LLM writes from the skill's
  description (as a benchmark generates them).
* **Answers.** Each case through the same pipeline as a live answer (routing aside:
  the skill is applied, :func:`amelio.assistant.respond.answer_with`), once with
  the current model and once with the candidate, both cached in ``llm_cache``.
* **Measures.** The share of the skill's rules each answer passes, and, with a
  judge, the judge's score of each answer (both orders, as a benchmark judges).
  Per skill: the mean paired change (candidate − current) with a 95 % interval
  over its cases (percentile bootstrap, as a benchmark's). A skill **regresses**
  when an interval lies wholly below zero: its loss is larger than the noise of
  its cases.
* **Proposals.** With ``propose``, each regressed skill gets a proposal written
  for the candidate: Sage's rewrite from the candidate's failing answers when an
  LLM is configured and Sage writes a whole skill, else a template proposal; it
  is benchmarked *on the candidate model*, so its card says whether it wins back
  part of the loss.

:func:`compare_shadow` reads what shadow traffic stored instead
(:mod:`amelio.improve.shadow`): the live answers' rule results against the
candidate's, on the same messages, with no new LLM call.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from amelio.db.schema import feedback, interactions, projects, shadow_answers
from amelio.errors import AmelioError, ConfigError, InvalidInput, LLMError
from amelio.stats import bootstrap_mean

if TYPE_CHECKING:
    from amelio.llm import Provider
    from amelio.workspace.config import Settings
    from amelio.workspace.folder import Workspace

__all__ = [
    "ModelReport",
    "SkillDelta",
    "candidate_provider",
    "compare_models",
    "compare_shadow",
]


def _interval(deltas: Sequence[float]) -> tuple[float, tuple[float, float] | None]:
    """The mean of paired changes and its 95 % percentile-bootstrap interval, as
    benchmarks give theirs (None with fewer than two: one case is no interval)."""
    if not deltas:
        return 0.0, None
    mean = statistics.fmean(deltas)
    return mean, (bootstrap_mean(deltas)[1:] if len(deltas) > 1 else None)


@dataclass
class SkillDelta:
    """One skill on both models."""

    skill: str
    cases: dict[str, int]
    pass_current: float
    pass_candidate: float
    pass_change: float
    pass_interval: tuple[float, float] | None
    judge_current: float | None = None
    judge_candidate: float | None = None
    judge_change: float | None = None
    judge_interval: tuple[float, float] | None = None
    #: The candidate's answers that failed a rule the current model's passed (8 at
    #: most), and how many answers newly failed each rule.
    worse: list[dict[str, Any]] = field(default_factory=list)
    lost_rules: dict[str, int] = field(default_factory=dict)
    proposal_id: int | None = None
    proposal_verdict: str | None = None
    proposal_improvement: float | None = None
    note: str | None = None

    @property
    def regressed(self) -> bool:
        return any(
            interval is not None and interval[1] < 0
            for interval in (self.pass_interval, self.judge_interval)
        )

    @property
    def worst(self) -> float:
        """What sorts the report: the lower end of the rule change, else the change."""
        low = self.pass_interval[0] if self.pass_interval else self.pass_change
        return min(low, (self.judge_change or 0.0) / 10)

    def to_dict(self) -> dict[str, Any]:
        def rounded(x: float | None) -> float | None:
            return None if x is None else round(x, 4)

        def pair(x: tuple[float, float] | None) -> list[float] | None:
            return None if x is None else [round(x[0], 4), round(x[1], 4)]

        return {
            "skill": self.skill,
            "cases": self.cases,
            "passCurrent": rounded(self.pass_current),
            "passCandidate": rounded(self.pass_candidate),
            "passChange": rounded(self.pass_change),
            "passInterval": pair(self.pass_interval),
            "judgeCurrent": rounded(self.judge_current),
            "judgeCandidate": rounded(self.judge_candidate),
            "judgeChange": rounded(self.judge_change),
            "judgeInterval": pair(self.judge_interval),
            "regressed": self.regressed,
            "worse": self.worse,
            "lostRules": self.lost_rules,
            "proposalId": self.proposal_id,
            "proposalVerdict": self.proposal_verdict,
            "proposalImprovement": rounded(self.proposal_improvement),
            "note": self.note,
        }


@dataclass
class ModelReport:
    project: str
    current: str
    candidate: str
    source: str  # "replay" (answered now) or "shadow" (stored live)
    skills: list[SkillDelta] = field(default_factory=list)

    @property
    def regressed(self) -> list[SkillDelta]:
        return [s for s in self.skills if s.regressed]

    def to_dict(self) -> dict[str, Any]:
        return {
            "project": self.project,
            "current": self.current,
            "candidate": self.candidate,
            "source": self.source,
            "regressed": [s.skill for s in self.regressed],
            "skills": [s.to_dict() for s in self.skills],
        }

    def markdown(self) -> str:
        def pct(x: float | None) -> str:
            return "-" if x is None else f"{x:+.1%}"

        def span(x: tuple[float, float] | None, scale: float = 100.0) -> str:
            return "-" if x is None else f"{x[0] * scale:+.1f} to {x[1] * scale:+.1f}"

        lines = [
            f"# Model check: {self.candidate} against {self.current} ({self.project})",
            "",
            f"Source: {'shadow traffic (stored live answers)' if self.source == 'shadow' else 'cases answered by both models now'}.",  # noqa: E501
            "",
            "| skill | cases | rules passed (current → candidate) | change | 95 % interval "
            "| judge change (0-10) | interval | regressed | proposal |",
            "|---|---:|---|---:|---|---:|---|---|---|",
        ]
        for s in self.skills:
            proposal = (
                f"#{s.proposal_id} {s.proposal_verdict or ''}".strip() if s.proposal_id else "-"
            )
            lines.append(
                f"| {s.skill} | {sum(s.cases.values())} | {s.pass_current:.0%} → "
                f"{s.pass_candidate:.0%} | {pct(s.pass_change)} | {span(s.pass_interval)} "
                f"| {'-' if s.judge_change is None else f'{s.judge_change:+.2f}'} "
                f"| {span(s.judge_interval, 1.0)} | {'**yes**' if s.regressed else 'no'} "
                f"| {proposal} |"
            )
        notes = [f"- {s.skill}: {s.note}" for s in self.skills if s.note]
        if notes:
            lines += ["", *notes]
        return "\n".join(lines) + "\n"


def candidate_provider(
    settings: Settings,
    model: str,
    *,
    provider: str | None = None,
    base_url: str | None = None,
    purpose: str = "Model check",
) -> Provider:
    """The configured provider (or ``provider`` at ``base_url``) with ``model``."""
    from amelio.llm import get_provider, settings_for_model

    return get_provider(
        settings_for_model(settings, model, provider=provider, base_url=base_url),
        purpose=purpose,
    )


def _cases(
    ws: Workspace, skill: Any, project: str, limit: int, generated: int, writer: Provider | None
) -> list[tuple[str, str]]:
    """The skill's pinned cases, its newest 👍 messages, then generated scenarios."""
    from amelio.assistant.cases import list_cases
    from amelio.improve.bench import _generated

    found: list[tuple[str, str]] = [
        ("pinned", c.message) for c in list_cases(ws, project=project, skill=skill.name)
    ]
    with ws.engine.connect() as conn:
        liked = conn.execute(
            sa.select(interactions.c.message)
            .join(projects, projects.c.id == interactions.c.project_id)
            .join(feedback, feedback.c.interaction_id == interactions.c.id)
            .where(
                projects.c.name == project,
                interactions.c.applied_skill == skill.name,
                feedback.c.kind == "up",
            )
            .order_by(interactions.c.id.desc())
            .limit(limit * 3)
        ).scalars()
        found += [("thumbs_up", m) for m in liked]
    seen: set[str] = set()
    unique = []
    for source, message in found:
        key = " ".join(message.split())
        if key not in seen:
            seen.add(key)
            unique.append((source, message))
    unique = unique[:limit]
    if generated and writer is not None:
        unique += [
            ("generated", m)
            for m in _generated(
                writer, skill.name, skill.spec.description, skill.spec.triggers, generated
            )
        ]
    return unique


def _share(report: Any) -> float:
    """The share of its rules an answer passes; all of none for a skill without rules."""
    share = report.passed_share
    return 1.0 if share is None else float(share)


def _refused(model: str, exc: LLMError) -> ConfigError:
    return ConfigError(f"The provider refused model {model!r}: {exc.message}")


def compare_models(
    ws: Workspace,
    candidate: Provider,
    *,
    candidate_name: str,
    project: str,
    skills: Sequence[str] | None = None,
    limit: int = 20,
    generated: int = 0,
    current: Provider | None = None,
    judge: Provider | None = None,
    use_judge: bool = True,
    propose: bool = False,
    bench: bool = True,
) -> ModelReport:
    """Each skill's cases on the current model and on ``candidate`` (see the module
    docstring); the most regressed skill first. ``use_judge`` False scores by the
    rules alone; ``bench`` False files Sage's proposals without benchmarking them."""
    from amelio.assistant.respond import answer_with
    from amelio.improve.bench import _judge_pair, judge_provider
    from amelio.llm import get_provider
    from amelio.llm.cache import CachedProvider
    from amelio.skills.store import visible_skills

    settings = ws.settings
    base = current or get_provider(settings, purpose="Model check")
    now_runner = CachedProvider(base, ws.engine)
    new_runner = CachedProvider(candidate, ws.engine)
    judging = (
        None
        if not use_judge or (judge is None and settings.llm_provider == "none")
        else CachedProvider(judge or judge_provider(ws, base), ws.engine)
    )
    current_name = settings.llm_model or str(getattr(base, "model", "") or base.name)
    report = ModelReport(project, current_name, candidate_name, "replay")
    chosen = [s for s in visible_skills(ws.engine, project) if not skills or s.name in skills]
    unknown = set(skills or ()) - {s.name for s in chosen}
    if unknown:
        raise InvalidInput(
            f"No skill named {', '.join(sorted(unknown))} in project {project!r}.", field="skill"
        )
    asked_candidate = False
    for skill in chosen:
        cases = _cases(ws, skill, project, limit, generated, None if generated == 0 else base)
        if not cases:
            continue
        passes: list[tuple[float, float]] = []
        judged: list[tuple[float, float]] = []
        worse: list[dict[str, Any]] = []
        lost_rules: dict[str, int] = {}
        spent: list[Any] = []
        for _source, message in cases:
            # The candidate first: a model the provider refuses fails before any spend.
            try:
                new, new_report = answer_with(
                    ws, message, skill=skill.name, content=skill.spec.content,
                    provider=new_runner, project=project,
                )  # fmt: skip
            except LLMError as exc:
                if not asked_candidate:  # the first call: the model itself is refused
                    raise _refused(candidate_name, exc) from exc
                raise
            old, old_report = answer_with(
                ws, message, skill=skill.name, content=skill.spec.content, provider=now_runner,
                project=project,
            )  # fmt: skip
            asked_candidate = True
            passes.append((_share(old_report), _share(new_report)))
            lost = sorted(
                {r.rule_id for r in new_report.failed} - {r.rule_id for r in old_report.failed}
            )
            for rule_id in lost:
                lost_rules[rule_id] = lost_rules.get(rule_id, 0) + 1
            if lost and len(worse) < 8:
                worse.append({"message": message[:300], "answer": new.text[:600], "rules": lost})
            if judging is not None:
                try:
                    pair = _judge_pair(
                        ws, judging, message, old.text, new.text, ("old-first", "new-first"), spent
                    )
                except LLMError:
                    continue
                judged.append((pair["oldJudge"], pair["newJudge"]))
        change, interval = _interval([n - o for o, n in passes])
        delta = SkillDelta(
            skill=skill.name,
            cases=dict(sorted(Counter(source for source, _ in cases).items())),
            pass_current=statistics.fmean(o for o, _ in passes),
            pass_candidate=statistics.fmean(n for _, n in passes),
            pass_change=change,
            pass_interval=interval,
            worse=worse,
            lost_rules=lost_rules,
        )
        if judged:
            delta.judge_current = statistics.fmean(o for o, _ in judged)
            delta.judge_candidate = statistics.fmean(n for _, n in judged)
            delta.judge_change, delta.judge_interval = _interval([n - o for o, n in judged])
        report.skills.append(delta)
    report.skills.sort(key=lambda s: (not s.regressed, s.worst, s.skill))
    if propose:
        for delta in report.regressed:
            _propose(ws, delta, project, candidate, candidate_name, bench=bench)
    return report


def _propose(
    ws: Workspace,
    delta: SkillDelta,
    project: str,
    candidate: Provider,
    model: str,
    *,
    bench: bool = True,
) -> None:
    """A proposal that rewrites a regressed skill for ``model``: Sage's, from the
    candidate's failing answers, when an LLM is configured and Sage writes a whole
    skill; else a template proposal (one instruction per rule the candidate newly
    fails). Benchmarked on ``model`` unless ``bench`` is False. Recorded on
    ``delta``; what went wrong is its note."""
    from amelio.assistant.quality import Finding, SkillMetrics
    from amelio.improve.bench import run_benchmark
    from amelio.improve.proposals import create_proposal, pending_for
    from amelio.improve.sage import _sage_provider, sage_proposer
    from amelio.improve.templates import template_proposal
    from amelio.skills.store import get_skill

    skill = get_skill(ws.engine, delta.skill, project)
    with ws.engine.connect() as conn:
        pending = pending_for(conn, skill.id)
    if pending is not None:
        delta.note = f"proposal #{pending} is pending: no new one written"
        return
    answered = sum(delta.cases.values())
    finding = Finding(
        metrics=SkillMetrics(
            project,
            delta.skill,
            answered,
            round(answered * delta.pass_candidate),
            0,
            0,
            None,
            rule_failures=dict(delta.lost_rules),
        ),
        reasons=(
            f"on model {model} its answers pass {delta.pass_change:+.0%} of its rules "
            f"({delta.pass_current:.0%} → {delta.pass_candidate:.0%}); rewrite it so that "
            f"{model} follows it",
        ),
        success_bounds=(0.0, 1.0),
        failed_answers=tuple((", ".join(w["rules"]), w["answer"]) for w in delta.worse),
    )
    notes: list[str] = []
    content = rationale = None
    by, extra = "template", {}
    if ws.settings.llm_provider != "none":
        try:
            # Sage's proposer: an answer that is not a whole skill is an InvalidInput.
            drafted = sage_proposer(_sage_provider(ws))(ws, finding)
        except AmelioError as exc:
            notes.append(f"Sage's rewrite not used ({exc.message})")
        else:
            if drafted is None:
                notes.append("Sage found nothing to change")
            else:
                content, rationale, by = drafted.content, drafted.rationale, "sage"
                extra = dict(drafted.evidence)
    if content is None:
        template = template_proposal(skill.spec, finding)
        if template is None:
            delta.note = "; ".join([*notes, "no rule the candidate fails to write a line for"])
            return
        content, rationale = template.content, template.rationale
        notes.append("a template proposal instead" if notes else "a template proposal")
    try:
        proposal = create_proposal(
            ws,
            delta.skill,
            project=project,
            proposed_content=content,
            rationale=f"For model {model}: {rationale}",
            proposed_by=by,
            author=f"amelio bench --model {model}",
            evidence={**extra, "model": model, "modelCheck": delta.to_dict()},
        )
        delta.proposal_id = proposal.id
        if bench:
            ran = run_benchmark(ws, proposal.id, provider=candidate, notify=False)
            delta.proposal_verdict = ran.verdict
            delta.proposal_improvement = ran.improvement_pct
    except AmelioError as exc:
        notes.append(f"proposal not written: {exc.message}")
    delta.note = "; ".join(notes) or None


def compare_shadow(ws: Workspace, model: str, *, project: str) -> ModelReport:
    """The live answers' rule results against the shadow answers ``model`` gave to the
    same messages (:mod:`amelio.improve.shadow`), per skill; no LLM call."""
    settings = ws.settings
    if not settings.shadow_model:
        raise ConfigError(
            "Shadow traffic needs a second model: set shadow_model (and shadow_rate) first."
        )
    if settings.shadow_model != model:
        raise ConfigError(
            f"The shadow model is {settings.shadow_model!r}, not {model!r}: shadow answers "
            f"of {model!r} are what --shadow compares."
        )
    from amelio.db.schema import eval_results

    # The share of its rules each live answer passed, from its eval results.
    live = (
        sa.select(
            eval_results.c.interaction_id,
            sa.func.avg(sa.case((eval_results.c.passed, 1.0), else_=0.0)).label("share"),
        )
        .group_by(eval_results.c.interaction_id)
        .subquery()
    )
    with ws.engine.connect() as conn:
        rows = conn.execute(
            sa.select(
                shadow_answers.c.skill,
                shadow_answers.c.success,
                shadow_answers.c.passed_share,
                shadow_answers.c.failed_rules,
                shadow_answers.c.answer,
                interactions.c.message,
                interactions.c.success.label("live_success"),
                sa.func.coalesce(live.c.share, 1.0).label("live_share"),
            )
            .join(interactions, interactions.c.id == shadow_answers.c.interaction_id)
            .join(projects, projects.c.id == interactions.c.project_id)
            .outerjoin(live, live.c.interaction_id == interactions.c.id)
            .where(
                shadow_answers.c.model == model,
                shadow_answers.c.error.is_(None),
                projects.c.name == project,
                shadow_answers.c.skill.is_not(None),
            )
            .order_by(shadow_answers.c.id)
        ).all()
    if not rows:
        raise InvalidInput(
            f"No shadow answers of {model!r} in project {project!r} yet: they come with "
            "shadow_rate of live traffic.",
            field="model",
        )
    report = ModelReport(project, settings.llm_model, model, "shadow")
    by_skill: dict[str, list[Any]] = {}
    for r in rows:
        by_skill.setdefault(r.skill, []).append(r)
    for skill, items in by_skill.items():
        pairs = [(float(r.live_share), r.passed_share) for r in items]
        change, interval = _interval([n - o for o, n in pairs])
        lost = [r for r in items if r.live_success and not r.success]
        worse = [
            {"message": r.message[:300], "answer": r.answer[:600], "rules": list(r.failed_rules)}
            for r in lost[:8]
        ]
        report.skills.append(
            SkillDelta(
                skill=skill,
                cases={"shadow": len(items)},
                pass_current=statistics.fmean(o for o, _ in pairs),
                pass_candidate=statistics.fmean(n for _, n in pairs),
                pass_change=change,
                pass_interval=interval,
                worse=worse,
                lost_rules=dict(Counter(rule for r in lost for rule in r.failed_rules)),
            )
        )
    report.skills.sort(key=lambda s: (not s.regressed, s.worst, s.skill))
    return report
