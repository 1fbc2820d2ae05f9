"""A/B benchmarks: does a proposal make a skill answer better?

For each scenario the old and the new content of the skill answer the same
message through the same pipeline and model. Each answer gets a deterministic
score (the share of the skill's eval rules it passes, out of 10) and an LLM
judge's score (1–10 with a reason); combined = 0.6 × evals + 0.4 × judge (the
judge alone when the skill has no rules).

Beyond the seed, so that a verdict means something:

* the judge sees both A/B orders and the two scores are averaged (``--no-swap``
  for the seed's single seeded random order); a scenario whose preferred side
  flips with the order is a tie, and the report shows the position-consistency
  rate;
* a judge that prefers the same side in both orders in fewer than
  ``bench_min_judge_consistency`` of the scenarios (0.6) is reading positions, not
  answers: its scores are left out and the verdict rests on the rules (with no
  rules, it is TIE), and the report says so (``judgeUsed``, ``judgeNote``);
* ``PASSED``/``FAILED`` need the paired differences of combined scores to be
  non-zero with ``bench_confidence`` by an exact Wilcoxon signed-rank test (with
  3 scenarios the smallest p is 0.25: the seed's 3 wins of 3 prove nothing), and
  anything else is ``TIE``;
* a run stops as soon as no verdict is reachable any more (``bench_stop_early``):
  once so many scenarios showed no difference that even the rest could not make
  the test significant, their calls would buy nothing but a longer TIE;
* replayed scenarios are held out: none is a message the proposal was written from
  (its evidence's ``writtenFrom``), so it is not judged on its training cases;
* the judge scores each pair ``judge_repeats`` times in each order, and its
  agreement with people's votes and decisions (Cohen's κ,
  :mod:`amelio.improve.agreement`) decides whether it counts for the skill;
* the old version also answers each scenario again and is scored against itself:
  a PASSED needs its interval above that noise floor;
* the skill's pinned cases (:mod:`amelio.assistant.cases`: answers people kept, and
  messages a Fix It corrected) are re-answered with both versions and checked against
  the skill's eval rules; a rule the old version's answer passes and the new one's
  fails is a regression, and a proposal with one is FAILED whatever the scenarios
  say (``scenarioVerdict`` keeps what they said);
* identical LLM calls come from a cache, so a re-run costs nothing.
"""

from __future__ import annotations

import json
import logging
import random
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from amelio import db
from amelio.assistant.cases import count_cases, list_cases
from amelio.assistant.respond import answer_with
from amelio.db.schema import benchmark_runs, benchmark_scenarios, interactions, projects, utcnow
from amelio.errors import AmelioError, InvalidInput, LLMError
from amelio.evals import EvalReport
from amelio.improve.agreement import Agreement, json_objects, judge_agreement, judge_score
from amelio.improve.drafts import WRITTEN_FROM
from amelio.improve.nightly import proposal_actions
from amelio.improve.notifiers import Notification, notify_all
from amelio.improve.proposals import get_proposal
from amelio.llm import Completion, LLMRequest, Provider, get_provider
from amelio.llm.cache import CachedProvider
from amelio.skills.store import get_skill
from amelio.stats import bootstrap_mean, min_scenarios, wilcoxon_signed_rank
from amelio.workspace.config import Settings
from amelio.workspace.folder import Workspace

__all__ = [
    "BenchmarkReport",
    "ScenarioPlan",
    "agreement_note",
    "held_out_note",
    "judge_provider",
    "latest_verdict",
    "list_benchmarks",
    "parse_judge",
    "parse_scenarios_option",
    "pinned_note",
    "run_benchmark",
    "stopped_note",
]

log = logging.getLogger(__name__)

EVAL_WEIGHT, JUDGE_WEIGHT = 0.6, 0.4
#: The ``source`` of a pinned case's row among a run's scenarios.
PINNED = "pinned"

_JUDGE_SYSTEM = (
    "You are a strict, fair judge of AI assistant answers. You see a user message and two "
    "answers, A and B. Score each from 1 (useless or wrong) to 10 (excellent) for how well "
    "it helps the user, is correct, and follows good practice. Reply with JSON only: "
    '{"score_a": <1-10>, "score_b": <1-10>, "reason": "<one or two sentences>"}'
)
_SCENARIO_SYSTEM = (
    "You write realistic test messages that users send to an AI assistant. Reply with a "
    "JSON array of strings only, no commentary."
)


@dataclass(frozen=True)
class ScenarioPlan:
    """How many scenarios, from where: ``generated``, ``replay`` or ``both``."""

    source: str
    count: int


def parse_scenarios_option(value: str | int | None, default: ScenarioPlan) -> ScenarioPlan:
    """``8``, ``generated:8``, ``replay:5`` or ``both`` / ``both:6``."""
    if value is None:
        return default
    text = str(value).strip()
    source, _, count = text.partition(":") if ":" in text else ("", "", text)
    if not count.isdigit() and source == "" and text in ("generated", "replay", "both"):
        source, count = text, str(default.count)
    source = source or default.source
    if (
        source not in ("generated", "replay", "both")
        or not count.isdigit()
        or not 1 <= int(count) <= 100
    ):
        raise InvalidInput(
            f"Bad scenarios {text!r}: use N, generated:N, replay:N or both:N (N from 1 to 100).",
            field="scenarios",
        )
    return ScenarioPlan(source, int(count))


@dataclass
class BenchmarkReport:
    run_id: int
    proposal_id: int
    verdict: str
    improvement_pct: float | None
    summary: dict[str, Any]
    scenarios: list[dict[str, Any]] = field(default_factory=list)
    pinned: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "runId": self.run_id,
            "proposalId": self.proposal_id,
            "verdict": self.verdict,
            "improvementPct": self.improvement_pct,
            **self.summary,
            "scenarios": self.scenarios,
            "pinned": self.pinned,
        }


# -- judging ------------------------------------------------------------------------------


def parse_judge(text: str) -> tuple[float, float, str]:
    """Scores for A and B and the reason, from a judge reply; ValueError if malformed.

    Accepts the JSON object anywhere in the reply (judges add prose and fences),
    never guesses a score that is not there.
    """
    for data in json_objects(text):
        a, b = judge_score(data.get("score_a")), judge_score(data.get("score_b"))
        if a is not None and b is not None:
            return a, b, str(data.get("reason", "")).strip()[:1000]
    raise ValueError(f"no valid scores in judge reply: {text[:120]!r}")


def _judge(
    judge: Provider,
    message: str,
    first: str,
    second: str,
    tries: int = 2,
    *,
    temperature: float = 0,
    sample: int = 0,
) -> tuple[float, float, str, Completion]:
    user = f"USER MESSAGE:\n{message}\n\nANSWER A:\n{first}\n\nANSWER B:\n{second}"
    last_error = ""
    for attempt in range(tries):
        extra = "" if attempt == 0 else "\n\nReply with the JSON object only."
        completion = judge.complete(
            LLMRequest.single(
                _JUDGE_SYSTEM,
                user + extra,
                max_tokens=300,
                temperature=temperature,
                sample=sample,
            )
        )
        try:
            a, b, reason = parse_judge(completion.text)
            return a, b, reason, completion
        except ValueError as exc:
            last_error = str(exc)
    raise LLMError(f"The judge gave no usable scores after {tries} tries ({last_error}).")


# -- scenarios ----------------------------------------------------------------------------


#: How many of a skill's newest distinct messages a replay draws its scenarios from.
REPLAY_POOL = 200


def _replayed(
    ws: Workspace,
    skill: str,
    project: str,
    count: int,
    written_from: Sequence[int] | None,
    seed: int,
) -> tuple[list[str], dict[str, Any]]:
    """Up to ``count`` real messages ``skill`` answered, drawn with ``seed`` from its
    newest :data:`REPLAY_POOL` distinct ones, leaving out every message of the
    interactions the proposal was written from (``written_from``; None when unknown,
    as for a person's proposal): a proposal judged on the cases it was written from
    would be judged on its training set. Returns the messages and the split, for the
    report."""

    def norm(text: str) -> str:
        return " ".join(text.split())

    where = (interactions.c.applied_skill == skill, projects.c.name == project)
    with ws.engine.connect() as conn:
        newest = conn.execute(
            sa.select(interactions.c.message)
            .join(projects, projects.c.id == interactions.c.project_id)
            .where(*where)
            .order_by(interactions.c.id.desc())
            .limit(REPLAY_POOL * 5)
        ).scalars()
        candidates = list(dict.fromkeys(norm(m) for m in newest))[:REPLAY_POOL]
        seen = (
            {
                norm(m)
                for m in conn.scalars(
                    sa.select(interactions.c.message).where(
                        interactions.c.id.in_(list(written_from))
                    )
                )
            }
            if written_from
            else set()
        )
    pool = [m for m in candidates if m not in seen]
    drawn = random.Random(f"replay:{seed}").sample(pool, min(count, len(pool)))  # noqa: S311
    split = {
        "writtenFrom": None if written_from is None else len(written_from),
        "leftOut": len(candidates) - len(pool),
        "pool": len(pool),
        "replayed": len(drawn),
    }
    return drawn, split


def _generated(
    provider: Provider, skill_name: str, description: str, triggers: Sequence[str], count: int
) -> list[str]:
    user = (
        f"Write {count} different, realistic messages a user could send that need the "
        f"skill '{skill_name}': {description}\nTypical words: {', '.join(triggers)}.\n"
        f"Vary length and difficulty. Reply with a JSON array of {count} strings."
    )
    text = provider.complete(LLMRequest.single(_SCENARIO_SYSTEM, user, max_tokens=1500)).text
    match = re.search(r"\[.*\]", text, re.DOTALL)
    items: list[str] = []
    if match:
        try:
            data = json.loads(match.group(0))
            items = [str(x).strip() for x in data if isinstance(x, str) and x.strip()]
        except json.JSONDecodeError:
            items = []
    if not items:  # one message a line, list markers stripped
        items = [
            re.sub(r"^\s*(?:[-*]|\d+[.)])\s*", "", line).strip().strip('"')
            for line in text.splitlines()
            if line.strip()
        ]
    return [i for i in items if i][:count]


def _scenarios(
    ws: Workspace,
    provider: Provider,
    plan: ScenarioPlan,
    skill: Any,
    proposal: Any,
    seed: int,
) -> tuple[list[tuple[str, str]], dict[str, Any]]:
    out: list[tuple[str, str]] = []
    # bench_hold_out off (to measure what holding out is worth): nothing is left out.
    seen = _written_from(proposal) if ws.settings.bench_hold_out else []
    split: dict[str, Any] = {"writtenFrom": None if seen is None else len(seen), "replayed": 0}
    if plan.source in ("replay", "both"):
        replayed, split = _replayed(ws, skill.name, proposal.project, plan.count, seen, seed)
        out += [("replay", m) for m in replayed]
    missing = plan.count - len(out)
    if plan.source in ("generated", "both") and missing > 0:
        out += [
            ("generated", m)
            for m in _generated(
                provider, skill.name, skill.spec.description, skill.spec.triggers, missing
            )
        ]
    if not out:
        left = f" ({split['leftOut']} left out: the proposal was written from them)"
        raise InvalidInput(
            f"No scenarios for {skill.name}: no logged messages to replay"
            + (left if split.get("leftOut") else "")
            + " and none generated.",
            field="scenarios",
        )
    return out[: plan.count], split


def _written_from(proposal: Any) -> list[int] | None:
    """The interactions a proposal was written from, as its proposer recorded them, or
    None when nobody knows (a person's proposal, or one from before they were kept)."""
    ids = (proposal.evidence or {}).get(WRITTEN_FROM)
    return [int(i) for i in ids] if isinstance(ids, list) else None


# -- the run ------------------------------------------------------------------------------


def _eval_score(report: Any) -> float | None:
    share = report.passed_share
    return None if share is None else 10 * share


@dataclass(frozen=True)
class Weighing:
    """What a run's verdict rests on: the share of each scenario's score from the
    skill's eval rules and from the judge, and why the judge was left out.

    A judge that prefers one side in one A/B order and the other side in the other
    is reading positions, not answers: below ``bench_min_judge_consistency`` its
    scores would add noise to the rules' objective half, so they are left out of
    the verdict (still shown); with no rules either, nothing is left to decide on
    and the verdict is TIE.
    """

    evals: float
    judge: float
    consistency: float | None  # over the scenarios judged in both orders
    note: str | None = None

    @property
    def decides(self) -> bool:
        return self.evals + self.judge > 0

    def counts(self, row: dict[str, Any]) -> bool:
        """Whether a judged scenario's difference counts: one the judge scored by
        position (its preference flipped with the order) says nothing while the
        judge's scores are in the combined score."""
        return self.judge == 0 or row["consistent"]


def _judged(row: dict[str, Any]) -> bool:
    """Whether the judge scored the scenario (an error row is data, not a score)."""
    return "error" not in row


def _weigh(
    ws: Workspace,
    rows: Sequence[dict[str, Any]],
    swap: bool,
    judge_only: bool,
    agreement: Agreement | None,
) -> Weighing:
    settings = ws.settings
    judged = [r for r in rows if _judged(r)]
    consistency = (
        round(sum(r["consistent"] for r in judged) / len(judged), 3) if swap and judged else None
    )
    evals, judge = (0.0, 1.0) if judge_only else (EVAL_WEIGHT, JUDGE_WEIGHT)
    floor = settings.bench_min_judge_consistency
    pairs = agreement.pairs if agreement is not None else 0
    kappa = agreement.kappa if agreement and pairs >= settings.bench_min_judge_pairs else None
    if consistency is not None and consistency < floor:
        seen = (
            f"the judge preferred the same side in both orders in {consistency:.0%} of "
            f"scenarios, under bench_min_judge_consistency {floor:.0%}"
        )
    elif kappa is not None and kappa < settings.bench_min_judge_kappa:
        seen = (
            f"judge not proven for this skill: its agreement with people is κ {kappa:.2f} "
            f"over {pairs} pairs, under bench_min_judge_kappa "
            f"{settings.bench_min_judge_kappa:.2f}"
        )
    else:
        return Weighing(evals, judge, consistency)
    if judge_only:
        return Weighing(
            0.0, 0.0, consistency, f"No verdict: {seen}, and the skill has no eval rules."
        )
    return Weighing(
        1.0,
        0.0,
        consistency,
        f"Judge left out: {seen}; the verdict rests on the eval rules and the pinned cases.",
    )


def _silent(row: dict[str, Any]) -> bool:
    """A scenario that shows no difference whether the judge counts or not: the
    rules score both sides alike, and the judge does too or flips with the order."""
    if not _judged(row):  # an error: it never counts
        return True
    same_rules = row["oldEval"] == row["newEval"]
    return same_rules and (row["oldJudge"] == row["newJudge"] or not row["consistent"])


def _futile(rows: Sequence[dict[str, Any]], planned: int, confidence: float) -> bool:
    """Whether no verdict is reachable any more: even if every scenario still to run
    differed, in the same direction, too few non-zero differences would be left for
    the signed-rank test to reach ``confidence`` (:func:`min_scenarios`). Stopping
    then changes no verdict and saves the remaining calls (four a scenario). A run
    planned too small to be significant at all runs whole: it was asked for its
    report, and says it cannot prove anything."""
    needed = min_scenarios(confidence)
    if planned < needed:
        return False
    speaking = sum(not _silent(r) for r in rows)
    return speaking + (planned - len(rows)) < needed


def _score(row: dict[str, Any], weighing: Weighing, margin: float) -> None:
    """A scenario's combined scores and winner under the run's weighing."""

    def combined(eval_score: float | None, judge_score: float) -> float:
        if eval_score is None or not weighing.decides:
            return judge_score  # shown; without rules or a reliable judge it decides nothing
        return weighing.evals * eval_score + weighing.judge * judge_score

    old_total = combined(row["oldEval"], row["oldJudge"])
    new_total = combined(row["newEval"], row["newJudge"])
    diff = new_total - old_total
    aa = row.get("aa")
    if aa is not None and aa.get("same"):
        aa["diff"] = 0.0
    elif aa is not None and "error" not in aa:
        # Scored as the A/B difference is; dropped as it is when the judge flipped.
        aa["diff"] = (
            round(
                combined(aa["eval"], aa["againJudge"]) - combined(row["oldEval"], aa["oldJudge"]), 3
            )
            if weighing.counts(aa)
            else None
        )
    row |= {
        "oldScore": round(old_total, 3),
        "newScore": round(new_total, 3),
        "winner": (
            "tie"
            if not weighing.counts(row) or not weighing.decides or abs(diff) <= margin
            else ("new" if diff > 0 else "old")
        ),
    }


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


def _judge_pair(
    ws: Workspace,
    judging: Provider,
    message: str,
    old: str,
    new: str,
    orders: Sequence[str],
    spent: list[Completion],
) -> dict[str, Any]:
    """The judge's view of one pair of answers: in each order, ``judge_repeats`` draws
    (the first at temperature 0, as a single judging always was; the others at
    ``judge_repeat_temperature``, so that they can differ), averaged. ``consistent``:
    both orders prefer the same side (on their averages); ``repeatAgreement``: the
    share of orders whose draws all prefer the same side."""
    settings = ws.settings
    judged: list[tuple[str, float, float, str]] = []
    agreeing = 0
    for order in orders:
        first, second = (old, new) if order == "old-first" else (new, old)
        draws = []
        for sample in range(settings.judge_repeats):
            a, b, reason, completion = _judge(
                judging,
                message,
                first,
                second,
                temperature=0 if sample == 0 else settings.judge_repeat_temperature,
                sample=sample,
            )
            spent.append(completion)
            draws.append(((a, b) if order == "old-first" else (b, a), reason))
        agreeing += len({_sign(n - o) for (o, n), _ in draws}) == 1
        judged.append(
            (
                order,
                statistics.fmean(o for (o, _), _ in draws),
                statistics.fmean(n for (_, n), _ in draws),
                draws[0][1],
            )
        )
    prefers = {_sign(n - o) for _, o, n, _ in judged}
    return {
        "orders": [j[0] for j in judged],
        "oldJudge": statistics.fmean(j[1] for j in judged),
        "newJudge": statistics.fmean(j[2] for j in judged),
        "reason": judged[0][3],
        "reasons": [j[3] for j in judged],
        "consistent": len(prefers) == 1,
        "repeatAgreement": round(agreeing / len(judged), 3),
    }


def _against_itself(
    ws: Workspace,
    message: str,
    proposal: Any,
    skill: Any,
    runner: CachedProvider,
    judging: Provider,
    old: Completion,
    orders: Sequence[str],
    spent: list[Completion],
) -> dict[str, Any]:
    """The A/A half of a scenario: the old version answers again (a second draw, not
    the cached first), and that answer is scored against the first exactly as the new
    version's is. What separates two draws of the same skill is noise; the run's noise
    floor is made of it."""
    again, report = _answer(ws, message, proposal, skill, runner, proposal.current_content, 1)
    spent.append(again)
    aa: dict[str, Any] = {"output": again.text, "eval": _eval_score(report)}
    if again.text == old.text and len(orders) == 2:
        # The same answer twice (a deterministic model): with both orders averaged a
        # judge's scores for it are equal by construction, so there is nothing to ask.
        # In one order they are not: the judge's position bias is noise that run has.
        return aa | {"oldJudge": None, "againJudge": None, "consistent": True, "same": True}
    try:
        judged = _judge_pair(ws, judging, message, old.text, again.text, orders, spent)
    except LLMError as exc:
        return aa | {"error": exc.message}
    return aa | {
        "oldJudge": judged["oldJudge"],
        "againJudge": judged["newJudge"],
        "consistent": judged["consistent"],
    }


def _answer(
    ws: Workspace,
    message: str,
    proposal: Any,
    skill: Any,
    runner: CachedProvider,
    content: str,
    sample: int = 0,
) -> tuple[Completion, EvalReport]:
    """The skill's answer to ``message`` at ``content`` (one version of the proposal),
    with its eval report; ``sample`` 1 is a second draw of the same answer."""
    return answer_with(
        ws,
        message,
        skill=skill.name,
        content=content,
        provider=runner,
        project=proposal.project,
        sample=sample,
    )


def _both(
    ws: Workspace, message: str, proposal: Any, skill: Any, runner: CachedProvider
) -> tuple[tuple[Completion, EvalReport], tuple[Completion, EvalReport]]:
    """The old and the new version's answers to ``message``, each with its eval report."""
    old = _answer(ws, message, proposal, skill, runner, proposal.current_content)
    return old, _answer(ws, message, proposal, skill, runner, proposal.proposed_content)


def _check_pinned(
    ws: Workspace, proposal: Any, skill: Any, runner: CachedProvider, spent: list[Completion]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Re-answer the skill's pinned cases with both versions, and find the rules the new
    version's answer newly fails: the rows, and the summary's ``pinned`` block.

    Both answers are checked against the skill's rules as they stand (a proposal
    cannot rewrite the rules it is checked by), and "newly" is against the old
    version's answer to the same message, in the same run, rather than against the
    answer pinned weeks ago: the model or the learnings may have moved since, and a
    rule the old version fails today is not the proposal's doing.
    """
    limit = ws.settings.bench_max_pinned_cases
    pinned = count_cases(ws, skill.name, proposal.project)
    block: dict[str, Any] = {"pinned": pinned, "limit": limit, "checked": 0, "regressed": 0}
    if not pinned or limit <= 0:
        return [], block
    if not skill.spec.evals:
        block["note"] = (
            f"{skill.name} has no eval rules: its {pinned} pinned case(s) have nothing to be "
            "checked against."
        )
        return [], block
    rows: list[dict[str, Any]] = []
    for case in list_cases(ws, project=proposal.project, skill=skill.name, limit=limit):
        (old_c, old_r), (new_c, new_r) = _both(ws, case.message, proposal, skill, runner)
        spent += [old_c, new_c]
        old_failed = {r.rule_id for r in old_r.failed}
        rows.append(
            {
                "caseId": case.id,
                "interactionId": case.interaction_id,
                "caseSource": case.source,
                "message": case.message,
                "correction": case.correction,
                "note": case.note,
                "oldOutput": old_c.text,
                "newOutput": new_c.text,
                "oldFailed": sorted(old_failed),
                "newFailed": sorted(r.rule_id for r in new_r.failed),
                "regressions": [
                    {"ruleId": r.rule_id, "name": r.name, "detail": r.detail}
                    for r in new_r.failed
                    if r.rule_id not in old_failed
                ],
            }
        )
    block |= {"checked": len(rows), "regressed": sum(bool(r["regressions"]) for r in rows)}
    return rows, block


def held_out_note(summary: dict[str, Any]) -> str | None:
    """Which real messages the run replayed, and which it left out as the proposal's
    own evidence; None for a run that replayed none and had nothing to leave out."""
    split = summary.get("heldOut") or {}
    if not split.get("replayed") and not split.get("leftOut"):
        return None
    drawn = (
        f"Replayed {split['replayed']} of {split.get('pool', split['replayed'])} logged "
        f"messages (seed {summary.get('seed')})"
    )
    if split.get("writtenFrom") is None:
        return drawn + ": which ones the proposal's author read is not recorded."
    return (
        f"{drawn} the proposal was not written from; {split.get('leftOut', 0)} left out "
        f"(it was written from {split['writtenFrom']} interactions)."
    )


def agreement_note(summary: dict[str, Any]) -> str | None:
    """The judge's agreement with people, in words; None when it was not measured."""
    found = summary.get("judgeAgreement")
    if not found:
        return None
    pairs, min_pairs = found["pairs"], found["minPairs"]
    counted = f"{pairs} pairs ({found['votes']} votes, {found['decisions']} decisions)"
    if pairs < min_pairs or found["kappa"] is None:
        why = "too few to trust" if pairs < min_pairs else "no variation to measure"
        return f"Judge agreement with people: {counted}, {why} (κ needs {min_pairs})."
    return f"Judge agreement with people: κ {found['kappa']:.2f} over {counted}."


def pinned_note(summary: dict[str, Any]) -> str | None:
    """Why a proposal is FAILED by its pinned cases, or None."""
    regressed = summary.get("pinnedCases", {}).get("regressed", 0)
    if not regressed:
        return None
    return (
        f"{regressed} pinned case(s) newly fail a rule of the skill under this proposal: "
        f"it cannot pass (the scenarios alone said {summary.get('scenarioVerdict')})."
    )


def judge_provider(ws: Workspace, base: Provider) -> Provider:
    """The judge: ``judge_model`` on the configured provider, else ``base`` itself."""
    settings = ws.settings
    if not settings.judge_model:
        return base
    return get_provider(_with_model(ws, settings.judge_model), purpose="Benchmarking")


def _with_model(ws: Workspace, model: str) -> Any:
    settings = ws.settings
    return settings.model_copy(update={"llm_model": model}) if model else settings


def run_benchmark(
    ws: Workspace,
    proposal_id: int,
    *,
    scenarios: str | int | None = None,
    swap: bool | None = None,
    seed: int | None = None,
    provider: Provider | None = None,
    judge: Provider | None = None,
    notify: bool = True,
) -> BenchmarkReport:
    """Benchmark a proposal's new content against the content it would replace; the
    notifiers hear the verdict (``benchmark.report``) unless ``notify`` is False
    (a caller that reports the run itself)."""
    settings = ws.settings
    proposal = get_proposal(ws, proposal_id)
    if proposal.scope == "new":
        raise InvalidInput(
            f"Proposal #{proposal_id} creates a new skill, so there is no old "
            "version to benchmark it against: review its content, then approve "
            "or reject it.",
            proposal_id=proposal_id,
        )
    plan = parse_scenarios_option(
        scenarios, ScenarioPlan(settings.bench_source, settings.bench_scenarios)
    )
    swap = settings.bench_swap if swap is None else swap
    seed = random.SystemRandom().randrange(2**31) if seed is None else seed
    base = provider or get_provider(settings, purpose="Benchmarking")
    judge_base = judge or judge_provider(ws, base)
    runner = CachedProvider(base, ws.engine)
    judging = CachedProvider(judge_base, ws.engine)
    skill = get_skill(ws.engine, proposal.skill, proposal.project)
    with db.transaction(ws.engine) as conn:
        result = conn.execute(
            benchmark_runs.insert().values(
                proposal_id=proposal_id, status="running", summary={}, created_at=utcnow()
            )
        )
        assert result.inserted_primary_key is not None
        run_id = int(result.inserted_primary_key[0])
    try:
        report = _run(ws, run_id, proposal, skill, plan, swap, seed, runner, judging)
    except AmelioError as exc:
        with db.transaction(ws.engine) as conn:
            conn.execute(
                benchmark_runs.update()
                .where(benchmark_runs.c.id == run_id)
                .values(status="error", error=exc.message, finished_at=utcnow())
            )
        raise
    if notify:
        notify_all(settings, benchmark_notification(ws, proposal, report))
    return report


def stopped_note(summary: dict[str, Any]) -> str:
    """Why a run has fewer scenarios than it planned."""
    return (
        f"Stopped after {summary['scenarioCount']} of {summary['plannedScenarios']} "
        "scenarios: too many showed no difference for the rest to reach "
        f"{summary['confidence']:.0%}."
    )


def benchmark_notification(ws: Workspace, proposal: Any, report: BenchmarkReport) -> Notification:
    """What the notifiers receive when a benchmark finishes: the verdict, and the
    proposal to review (a chat notifier shows its card with the new badge)."""
    gain = f" ({report.improvement_pct:+.1f} %)" if report.improvement_pct is not None else ""
    title = f"Benchmark of proposal #{proposal.id} ({proposal.skill}): {report.verdict}{gain}"
    summary = report.summary
    count = summary.get("plannedScenarios", summary.get("scenarioCount", 0))
    needed = summary.get("minScenarios", 0)
    regressed = pinned_note(summary)
    note = (
        f"\n\n{regressed}"
        if regressed
        else f"\n\nNot significant with {count} scenarios: run at least {needed}."
        if count < needed
        else f"\n\n{stopped_note(summary)}"
        if summary.get("stoppedEarly")
        else ""
    )
    return Notification(
        kind="benchmark.report",
        title=title,
        text=title + note,
        payload={
            "project": proposal.project,
            "skill": proposal.skill,
            **{k: v for k, v in report.to_dict().items() if k != "scenarios"},
        },
        actions=proposal_actions(ws, [{"id": proposal.id, "skill": proposal.skill}]),
    )


def _run(
    ws: Workspace,
    run_id: int,
    proposal: Any,
    skill: Any,
    plan: ScenarioPlan,
    swap: bool,
    seed: int,
    runner: CachedProvider,
    judging: CachedProvider,
) -> BenchmarkReport:
    rng = random.Random(seed)  # noqa: S311 (reproducible A/B order, not secrets)
    settings = ws.settings
    cases, split = _scenarios(ws, runner, plan, skill, proposal, seed)
    spent: list[Completion] = []
    rows: list[dict[str, Any]] = []
    judge_only = not skill.spec.evals
    for position, (source, message) in enumerate(cases):
        (old_c, old_r), (new_c, new_r) = _both(ws, message, proposal, skill, runner)
        spent += [old_c, new_c]
        row: dict[str, Any] = {
            "position": position,
            "source": source,
            "message": message,
            "oldOutput": old_c.text,
            "newOutput": new_c.text,
            "oldEval": _eval_score(old_r),
            "newEval": _eval_score(new_r),
        }
        orders = (
            ["old-first", "new-first"]
            if swap
            else ["old-first" if rng.random() < 0.5 else "new-first"]
        )
        try:
            row |= _judge_pair(ws, judging, message, old_c.text, new_c.text, orders, spent)
        except LLMError as exc:  # recorded as data: the other scenarios still count
            row |= {"error": exc.message, "winner": None}
        if settings.bench_noise_floor and _judged(row):
            row["aa"] = _against_itself(
                ws, message, proposal, skill, runner, judging, old_c, orders, spent
            )
        rows.append(row)
        if settings.bench_stop_early and _futile(rows, len(cases), settings.bench_confidence):
            break
    checked, pinned = _check_pinned(ws, proposal, skill, runner, spent)
    agreement = (
        judge_agreement(ws, judging, skill.name, proposal.project, spent)
        if settings.judge_calibration_cases
        else None
    )
    weighing = _weigh(ws, rows, swap, judge_only, agreement)
    for row in rows:
        if _judged(row):
            _score(row, weighing, settings.bench_tie_margin)
    summary = _summarize(
        settings,
        rows,
        len(cases),
        seed,
        swap,
        weighing,
        plan,
        spent,
        runner,
        judging,
        pinned,
        split,
        agreement,
    )
    with db.transaction(ws.engine) as conn:
        for row in rows:
            conn.execute(
                benchmark_scenarios.insert().values(
                    run_id=run_id,
                    position=row["position"],
                    source=row["source"],
                    message=row["message"],
                    old_output=row["oldOutput"],
                    new_output=row["newOutput"],
                    result=row,
                )
            )
        for position, row in enumerate(checked, start=len(rows)):
            conn.execute(
                benchmark_scenarios.insert().values(
                    run_id=run_id,
                    position=position,
                    source=PINNED,
                    message=row["message"],
                    old_output=row["oldOutput"],
                    new_output=row["newOutput"],
                    result=row,
                )
            )
        conn.execute(
            benchmark_runs.update()
            .where(benchmark_runs.c.id == run_id)
            .values(
                status="done",
                verdict=summary["verdict"],
                improvement_pct=summary["improvementPct"],
                summary=summary,
                finished_at=utcnow(),
            )
        )
    return BenchmarkReport(
        run_id, proposal.id, summary["verdict"], summary["improvementPct"], summary, rows, checked
    )


def _summarize(
    settings: Settings,
    rows: list[dict[str, Any]],
    planned: int,
    seed: int,
    swap: bool,
    weighing: Weighing,
    plan: ScenarioPlan,
    spent: list[Completion],
    runner: CachedProvider,
    judging: CachedProvider,
    pinned: dict[str, Any],
    split: dict[str, Any],
    agreement: Agreement | None,
) -> dict[str, Any]:
    confidence = settings.bench_confidence
    scored = [r for r in rows if _judged(r)]
    diffs = [r["newScore"] - r["oldScore"] for r in scored if weighing.counts(r)]
    old_avg = statistics.fmean(r["oldScore"] for r in scored) if scored else None
    new_avg = statistics.fmean(r["newScore"] for r in scored) if scored else None
    p_value = wilcoxon_signed_rank(diffs)
    _, low, high = bootstrap_mean(diffs, confidence=confidence, seed=seed)
    mean = statistics.fmean(diffs) if diffs else 0.0
    verdict = "TIE"
    if weighing.decides and diffs and p_value < 1 - confidence:
        verdict = "PASSED" if mean > 0 else "FAILED" if mean < 0 else "TIE"
    noise = _noise_floor(scored, confidence, seed)
    floor_note = None
    if verdict == "PASSED" and noise["floor"] is not None and low <= noise["floor"]:
        verdict = "TIE"
        floor_note = (
            f"Not above the noise floor: the improvement's interval starts at {low:+.2f}, "
            f"and the old version against itself reaches {noise['floor']:+.2f}."
        )
    # How much of the scenarios' differences came from the rules and how much from the
    # judge, under the run's weights: what a reviewer should know the verdict rests on.
    from_rules = sum(
        abs(weighing.evals * (r["newEval"] - r["oldEval"]))
        for r in scored
        if weighing.counts(r) and r["oldEval"] is not None
    )
    from_judge = sum(
        abs(weighing.judge * (r["newJudge"] - r["oldJudge"])) for r in scored if weighing.counts(r)
    )
    moved = from_rules + from_judge
    scenario_verdict = verdict
    if pinned["regressed"]:
        verdict = "FAILED"
    improvement = None
    if old_avg and new_avg is not None:
        improvement = round((new_avg - old_avg) / old_avg * 100, 2)
    return {
        "verdict": verdict,
        "scenarioVerdict": scenario_verdict,
        "improvementPct": improvement,
        "wins": sum(r["winner"] == "new" for r in scored),
        "losses": sum(r["winner"] == "old" for r in scored),
        "ties": sum(r["winner"] == "tie" for r in scored),
        "errors": len(rows) - len(scored),
        "oldAvg": None if old_avg is None else round(old_avg, 3),
        "newAvg": None if new_avg is None else round(new_avg, 3),
        "meanDiff": round(mean, 3),
        "pValue": round(p_value, 5),
        "ci": [round(low, 3), round(high, 3)],
        "confidence": confidence,
        "positionConsistency": weighing.consistency,
        "swap": swap,
        "seed": seed,
        "judgeOnly": weighing.evals == 0,  # the skill has no eval rules
        "judgeUsed": weighing.judge > 0,
        "judgeNote": weighing.note,
        "weights": {"evals": weighing.evals, "judge": weighing.judge},
        "scoreShare": (
            {"rules": round(from_rules / moved, 3), "judge": round(from_judge / moved, 3)}
            if moved
            else None
        ),
        "scenarioSource": plan.source,
        "scenarioCount": len(rows),
        "plannedScenarios": planned,
        "stoppedEarly": len(rows) < planned,
        # Below this many scenarios no result can be PASSED or FAILED: say so.
        "minScenarios": min_scenarios(confidence),
        "inputTokens": sum(c.input_tokens or 0 for c in spent if not c.raw.get("cached")),
        "outputTokens": sum(c.output_tokens or 0 for c in spent if not c.raw.get("cached")),
        "costUsd": round(sum(c.cost_usd or 0 for c in spent), 6),
        "cachedCalls": runner.hits + judging.hits,
        "llmCalls": runner.misses + judging.misses,
        "model": runner.model,
        "judgeModel": judging.model,
        "pinnedCases": pinned,
        "heldOut": split,
        "noiseFloor": noise["floor"],
        "noise": noise,
        "floorNote": floor_note,
        "judgeRepeats": settings.judge_repeats,
        "judgeAgreement": None
        if agreement is None
        else agreement.to_dict()
        | {"minPairs": settings.bench_min_judge_pairs, "minKappa": settings.bench_min_judge_kappa},
        "repeatAgreement": (
            round(statistics.fmean(r["repeatAgreement"] for r in scored), 3) if scored else None
        ),
    }


def _noise_floor(rows: Sequence[dict[str, Any]], confidence: float, seed: int) -> dict[str, Any]:
    """What the old version scores against itself (the A/A half of each scenario): the
    mean difference, its interval, and the floor a PASSED's interval must clear, the
    interval's upper end (at least 0). With no A/A, the floor is None."""
    diffs = [d for r in rows if (d := (r.get("aa") or {}).get("diff")) is not None]
    if not diffs:
        return {"floor": None, "scenarios": 0, "meanDiff": None, "ci": None}
    _, low, high = bootstrap_mean(diffs, confidence=confidence, seed=seed)
    return {
        "floor": round(max(0.0, high), 3),
        "scenarios": len(diffs),
        "meanDiff": round(statistics.fmean(diffs), 3),
        "ci": [round(low, 3), round(high, 3)],
    }


def list_benchmarks(ws: Workspace, proposal_id: int) -> list[dict[str, Any]]:
    """Every benchmark run of a proposal, newest first, with its scenarios."""
    get_proposal(ws, proposal_id)
    with ws.engine.connect() as conn:
        runs = conn.execute(
            sa.select(benchmark_runs)
            .where(benchmark_runs.c.proposal_id == proposal_id)
            .order_by(benchmark_runs.c.id.desc())
        ).all()
        out = []
        for run in runs:
            stored = conn.execute(
                sa.select(benchmark_scenarios.c.source, benchmark_scenarios.c.result)
                .where(benchmark_scenarios.c.run_id == run.id)
                .order_by(benchmark_scenarios.c.position)
            ).all()
            out.append(
                {
                    "runId": run.id,
                    "status": run.status,
                    "verdict": run.verdict,
                    "improvementPct": run.improvement_pct,
                    "error": run.error,
                    **dict(run.summary),
                    "scenarios": [r.result for r in stored if r.source != PINNED],
                    "pinned": [r.result for r in stored if r.source == PINNED],
                    "createdAt": run.created_at.isoformat(),
                }
            )
    return out


def latest_verdict(ws: Workspace, proposal_id: int) -> dict[str, Any] | None:
    """The newest finished run's badge: verdict and improvement."""
    with ws.engine.connect() as conn:
        row = conn.execute(
            sa.select(
                benchmark_runs.c.verdict, benchmark_runs.c.improvement_pct, benchmark_runs.c.summary
            )
            .where(benchmark_runs.c.proposal_id == proposal_id, benchmark_runs.c.status == "done")
            .order_by(benchmark_runs.c.id.desc())
            .limit(1)
        ).first()
    if row is None:
        return None
    pinned = dict(row.summary or {}).get("pinnedCases") or {}
    return {
        "verdict": row.verdict,
        "improvementPct": row.improvement_pct,
        "pinnedChecked": pinned.get("checked", 0),
        "pinnedRegressed": pinned.get("regressed", 0),
    }
