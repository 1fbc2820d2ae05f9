"""Run a study: the same tasks through each arm, round after round.

Each arm is a fresh workspace of its own under the output folder, opened with the
caller's settings but its own SQLite database, so nothing touches the caller's
workspace. A round of an arm that learns is one cycle over the ``train`` tasks —
each answered as a user would be (:func:`~amelio.assistant.respond.respond`,
recorded) and judged by a simulated user — then, in ``loop``, the nightly job,
Sage, a benchmark of every proposal and the approval policy; then every ``test``
task is answered with nothing recorded and scored by the oracle. Round 0 is the
test before any feedback.

Simulated users draw their coins from the seed, the arm-independent task and the
round, so two arms meet the same users: where their answers are the same, so is
the feedback.
"""

from __future__ import annotations

import functools
import random
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from pydantic import SecretStr

from amelio import evals
from amelio.assistant import learnings
from amelio.assistant.quality import give_answer_feedback
from amelio.assistant.respond import answer_unrecorded, respond
from amelio.db.schema import interactions
from amelio.errors import AmelioError, InvalidInput
from amelio.improve import proposals as props
from amelio.improve.bench import run_benchmark
from amelio.improve.drafts import WRITTEN_FROM
from amelio.improve.nightly import run_improve
from amelio.skills.store import get_skill, import_skills
from amelio.study.llm import StudyLLM, StudyStopped
from amelio.study.planting import PLANT_KINDS, harmful_content
from amelio.study.suite import Suite, Task
from amelio.workspace.config import Settings
from amelio.workspace.folder import Workspace, init_workspace
from amelio.workspace.projects import DEFAULT_PROJECT

__all__ = [
    "APPROVALS",
    "ARMS",
    "Decision",
    "JudgedPair",
    "RoundResult",
    "StudyOptions",
    "StudyResult",
    "run_study",
]

#: The arms, in the order they run and are reported.
ARMS = ("bare", "skills", "told", "learnings", "loop")
#: Arms that learn from feedback, and so have rounds after round 0.
LEARNING_ARMS = ("learnings", "loop")
APPROVALS = ("gated", "all", "none")
#: Who the simulated users are, to Amelio (one person: their feedback merges).
STUDY_USER = "study-user"
#: Who approves and rejects proposals in a study.
STUDY_ACTOR = "study"

Progress = Callable[[int, str], None]
#: Called with the result so far after each arm-round is measured (to write it out).
Recorded = Callable[["StudyResult"], object]


@dataclass(frozen=True)
class StudyOptions:
    rounds: int = 3
    arms: tuple[str, ...] = ARMS
    approve: str = "gated"
    sage: bool = True
    fixit_rate: float = 0.5
    up_rate: float = 0.3
    seed: int = 0
    plant_harmful: float = 0.0
    #: The learnings block's order in every arm (None: the caller's setting).
    learnings_ordering: str | None = None

    def __post_init__(self) -> None:
        """Checked when made, so neither the CLI nor a library caller can start a
        study (and load a model) on options it would refuse."""
        if not 1 <= self.rounds <= 20:
            raise InvalidInput(f"--rounds is between 1 and 20, not {self.rounds}.", field="rounds")
        unknown = [a for a in self.arms if a not in ARMS]
        if unknown or not self.arms:
            raise InvalidInput(
                f"Unknown arm(s) {', '.join(unknown) or '(none given)'}: use {', '.join(ARMS)}.",
                field="arms",
            )
        if self.learnings_ordering not in (None, "relevant", "newest", "helpful"):
            raise InvalidInput(
                "--learnings-ordering is relevant, newest or helpful, "
                f"not {self.learnings_ordering!r}.",
                field="learnings_ordering",
            )
        if self.approve not in APPROVALS:
            raise InvalidInput(
                f"--approve is one of {', '.join(APPROVALS)}, not {self.approve!r}.",
                field="approve",
            )
        for name, rate in (
            ("fixit-rate", self.fixit_rate),
            ("up-rate", self.up_rate),
            ("plant-harmful", self.plant_harmful),
        ):
            if not 0.0 <= rate <= 1.0:
                raise InvalidInput(f"--{name} is between 0 and 1, not {rate}.", field=name)

    def rounds_of(self, arm: str) -> int:
        return self.rounds if arm in LEARNING_ARMS else 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "rounds": self.rounds,
            "arms": list(self.arms),
            "approve": self.approve,
            "sage": self.sage,
            "fixitRate": self.fixit_rate,
            "upRate": self.up_rate,
            "seed": self.seed,
            "plantHarmful": self.plant_harmful,
            "learningsOrdering": self.learnings_ordering,
        }


@dataclass
class RoundResult:
    """One arm's test at one round: each test task's share of oracle rules passed."""

    arm: str
    round: int
    scores: dict[str, float]
    answers: dict[str, str]
    filed: int = 0
    approved: int = 0
    learnings: int = 0
    llm_calls: int = 0
    seconds: float = 0.0
    #: Where this round's seconds went: "train", "improve", "sage", "bench", "test".
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def all_pass(self) -> dict[str, float]:
        return {t: float(s == 1.0) for t, s in self.scores.items()}


@dataclass(frozen=True)
class JudgedPair:
    """One benchmark scenario: which side the oracle and the judge preferred."""

    arm: str
    round: int
    proposal_id: int
    oracle: int  # +1: the new version passes more oracle rules, -1: fewer, 0: as many
    judge: int  # +1: the judge scored the new version higher, -1: lower, 0: a tie
    consistent: bool | None  # the same preference in both orders (None: one order)


@dataclass(frozen=True)
class Decision:
    """What became of one proposal in the loop arm: filed or stopped at filing, its
    verdict and the policy's decision. ``planted``: the kind of harm it was made with
    (None for the loop's own proposals); ``oracle``: over its benchmark's scenarios,
    +1 when the new version passed more oracle rules than the old one on balance,
    -1 fewer, 0 as many (or not benchmarked)."""

    arm: str
    round: int
    skill: str
    proposal_id: int | None
    planted: str | None
    outcome: str  # "approved", "rejected" or "blocked" (not filed)
    verdict: str | None
    oracle: int
    reason: str = ""
    #: Pinned cases its benchmark found it to break (a regression cannot be PASSED).
    regressed: int = 0


@dataclass
class StudyResult:
    suite: str
    options: StudyOptions
    model: str
    rounds: list[RoundResult] = field(default_factory=list)
    pairs: list[JudgedPair] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    error: str | None = None
    llm_calls: int = 0
    reused: int = 0
    #: Of ``reused``, answers an earlier study left in the answer store.
    stored: int = 0
    llm_seconds: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0

    def round_of(self, arm: str, number: int) -> RoundResult | None:
        return next((r for r in self.rounds if r.arm == arm and r.round == number), None)

    def last(self, arm: str) -> RoundResult | None:
        mine = [r for r in self.rounds if r.arm == arm]
        return max(mine, key=lambda r: r.round) if mine else None


def total_steps(suite: Suite, options: StudyOptions) -> int:
    """Answers the study will ask for (the progress bar's length)."""
    train, test = len(suite.split("train")), len(suite.split("test"))
    return sum(test + options.rounds_of(arm) * (train + test) for arm in options.arms)


def _oracle_score(suite: Suite, task: Task, answer: str) -> tuple[float, list[evals.EvalResult]]:
    report = evals.evaluate(answer, suite.oracle[task.skill])
    failed = list(report.failed)
    rules = len(report.results)
    return (rules - len(failed)) / rules, failed


def _user_rng(seed: int, task: Task, number: int) -> random.Random:
    # A string seed is hashed with SHA-512: the same coins in every process and arm.
    return random.Random(f"{seed}:{task.id}:{number}")  # noqa: S311 (simulation)


class _Arm:
    """One arm's workspace and its rounds."""

    def __init__(
        self,
        name: str,
        suite: Suite,
        options: StudyOptions,
        llm: StudyLLM,
        result: StudyResult,
        progress: Progress,
        ws: Workspace,
        recorded: Recorded,
    ) -> None:
        self.name = name
        self.suite = suite
        self.options = options
        self.llm = llm
        self.result = result
        self.progress = progress
        self.ws = ws
        self.recorded = recorded

    def prepare(self) -> None:
        if self.name == "bare":
            return
        import_skills(self.ws.engine, self.suite.skills_dir, author="study")
        if self.name == "told":
            for skill, rules in self.suite.oracle.items():
                for rule in rules:
                    learnings.add_learning(self.ws, rule.name, source="manual", skill=skill)

    def run(self) -> None:
        self.prepare()
        self._record(self._test(0, RoundResult(self.name, 0, {}, {})))
        for number in range(1, self.options.rounds_of(self.name) + 1):
            current = RoundResult(self.name, number, {}, {})
            self._timed(current, "train", functools.partial(self._train, number))
            if self.name == "loop":
                self._improve(number, current)
            self._record(self._test(number, current))

    def _record(self, current: RoundResult) -> None:
        current.learnings = len(learnings.list_learnings(self.ws, project=DEFAULT_PROJECT))
        self.result.rounds.append(current)
        self.recorded(self.result)

    def _timed(self, current: RoundResult, phase: str, work: Callable[[], Any]) -> Any:
        calls, started = self.llm.calls, time.perf_counter()
        try:
            return work()
        finally:
            spent = time.perf_counter() - started
            current.phases[phase] = round(current.phases.get(phase, 0.0) + spent, 2)
            current.seconds = round(current.seconds + spent, 2)
            current.llm_calls += self.llm.calls - calls

    def _train(self, number: int) -> None:
        for task in self.suite.split("train"):
            self.llm.step = f"arm {self.name}, round {number}: answering train task {task.id}"
            reply = respond(self.ws, task.message, user=STUDY_USER, provider=self.llm)
            _, failed = _oracle_score(self.suite, task, reply.answer)
            coins = _user_rng(self.options.seed, task, number)
            fixit, up = coins.random(), coins.random()
            if failed:
                give_answer_feedback(self.ws, reply.interaction_id, "down", user=STUDY_USER)
                if fixit < self.options.fixit_rate:
                    give_answer_feedback(
                        self.ws,
                        reply.interaction_id,
                        "fixit",
                        comment=failed[0].name,
                        user=STUDY_USER,
                    )
            elif up < self.options.up_rate:
                give_answer_feedback(self.ws, reply.interaction_id, "up", user=STUDY_USER)
            self.progress(1, f"{self.name} r{number} train")

    def _test(self, number: int, current: RoundResult) -> RoundResult:
        def work() -> None:
            for task in self.suite.split("test"):
                self.llm.step = f"arm {self.name}, round {number}: answering test task {task.id}"
                completion, _ = answer_unrecorded(self.ws, task.message, provider=self.llm)
                current.scores[task.id], _ = _oracle_score(self.suite, task, completion.text)
                current.answers[task.id] = completion.text
                self.progress(1, f"{self.name} r{number} test")

        self._timed(current, "test", work)
        return current

    # -- the loop's own steps ------------------------------------------------------------

    def _improve(self, number: int, current: RoundResult) -> None:
        self.llm.step = f"arm loop, round {number}: amelio improve"
        self._timed(current, "improve", lambda: run_improve(self.ws, notify=False))
        self._decide(number, current)
        if self.options.sage:
            from amelio.improve.sage import analyze

            self.llm.step = f"arm loop, round {number}: Sage"
            self._timed(
                current, "sage", lambda: analyze(self.ws, provider=self.llm, benchmark=False)
            )
            self._decide(number, current)
        if self.options.plant_harmful:
            self._plant(number, current)

    def _plant(self, number: int, current: RoundResult) -> None:
        """File the round's harmful proposals (:mod:`amelio.study.planting`), then
        decide them as any other."""
        rng = random.Random(f"plant:{self.options.seed}:{number}")  # noqa: S311
        planted: dict[int, str] = {}
        for index, skill in enumerate(sorted(self.suite.oracle)):
            if rng.random() >= self.options.plant_harmful:
                continue
            kind = PLANT_KINDS[(number + index) % len(PLANT_KINDS)]
            current_skill = get_skill(self.ws.engine, skill, DEFAULT_PROJECT)
            evidence = _recent_exchanges(self.ws, skill)
            content = harmful_content(
                kind, current_skill.spec.content, [(m, a) for _, m, a in evidence], rng
            )
            if content is None:
                continue
            try:
                made = props.create_proposal(
                    self.ws,
                    skill,
                    proposed_content=content,
                    rationale=f"planted by the study: {kind}",
                    author="study-planted",
                    evidence={"planted": kind, WRITTEN_FROM: [i for i, _, _ in evidence]},
                )
            except AmelioError as exc:  # stopped at filing: caught before any benchmark
                self.result.decisions.append(
                    Decision(self.name, number, skill, None, kind, "blocked", None, 0, exc.message)
                )
                continue
            planted[made.id] = kind
        self._decide(number, current, planted)

    def _decide(
        self, number: int, current: RoundResult, planted: dict[int, str] | None = None
    ) -> None:
        """Benchmark every pending proposal, then approve or reject it by the policy
        (``planted``: the harmful ones the study filed, by id, with their kind)."""
        for proposal in props.list_proposals(self.ws, status="pending"):
            current.filed += 1
            verdict, oracle, regressed = self._benchmark(number, current, proposal)
            # Gated: a PASSED verdict, and not a large change (a PASSED alone does not
            # clear one; the study has no person to read its diff).
            approve = self.options.approve == "all" or (
                self.options.approve == "gated" and verdict == "PASSED" and not proposal.large
            )
            if approve:
                props.approve_proposal(
                    self.ws, proposal.id, actor=STUDY_ACTOR, reason=f"study: {verdict}"
                )
                current.approved += 1
            else:
                props.reject_proposal(
                    self.ws,
                    proposal.id,
                    actor=STUDY_ACTOR,
                    reason=f"study: policy {self.options.approve}, benchmark {verdict}",
                )
            self.result.decisions.append(
                Decision(
                    self.name,
                    number,
                    proposal.skill,
                    proposal.id,
                    (planted or {}).get(proposal.id),
                    "approved" if approve else "rejected",
                    verdict,
                    oracle,
                    regressed=regressed,
                )
            )

    def _benchmark(
        self, number: int, current: RoundResult, proposal: props.Proposal
    ) -> tuple[str, int, int]:
        """The verdict, which side the oracle prefers on balance (+1 the new), and the
        pinned cases the proposal breaks."""
        if proposal.scope == "new" or proposal.skill not in self.suite.oracle:
            return "NOT BENCHMARKED", 0, 0
        self.llm.step = f"arm loop, round {number}: benchmark of proposal #{proposal.id}"
        report = self._timed(
            current,
            "bench",
            lambda: run_benchmark(
                self.ws,
                proposal.id,
                provider=self.llm,
                judge=self.llm,
                seed=self.options.seed,
                notify=False,
            ),
        )
        rules = self.suite.oracle[proposal.skill]
        balance = 0
        for row in report.scenarios:
            if row.get("winner") is None:
                continue
            old = evals.evaluate(row["oldOutput"], rules)
            new = evals.evaluate(row["newOutput"], rules)
            old_passed = sum(r.passed for r in old.results)
            new_passed = sum(r.passed for r in new.results)
            balance += new_passed - old_passed
            judged = row["newJudge"] - row["oldJudge"]
            self.result.pairs.append(
                JudgedPair(
                    self.name,
                    number,
                    proposal.id,
                    (new_passed > old_passed) - (new_passed < old_passed),
                    (judged > 0) - (judged < 0),
                    row["consistent"] if len(row.get("orders", ())) > 1 else None,
                )
            )
        regressed = int(report.summary.get("pinnedCases", {}).get("regressed", 0))
        return str(report.verdict), (balance > 0) - (balance < 0), regressed


def _recent_exchanges(ws: Workspace, skill: str, limit: int = 2) -> list[tuple[int, str, str]]:
    """The newest recorded (interaction id, message, answer) of ``skill``."""
    with ws.engine.connect() as conn:
        rows = conn.execute(
            sa.select(interactions.c.id, interactions.c.message, interactions.c.answer)
            .where(interactions.c.applied_skill == skill)
            .order_by(interactions.c.id.desc())
            .limit(limit)
        ).all()
    return [(r.id, r.message, r.answer) for r in rows]


def _arm_settings(base: Settings, root: Path, options: StudyOptions) -> Settings:
    """The caller's settings (the LLM, Sage, the benchmark, the router) on a
    database and secret of the arm's own, with the study's learnings ordering."""
    update: dict[str, Any] = {"workspace": root, "database_url": "", "secret_key": SecretStr("")}
    if options.learnings_ordering is not None:
        update["learnings_ordering"] = options.learnings_ordering
    return base.model_copy(update=update)


def prepare_out(out: Path, arms: Sequence[str]) -> None:
    """Make ``out`` ready: a new or empty folder, or one a previous study wrote
    (its arm folders are replaced). Anything else is refused: the study deletes
    what it replaces, and must never delete what it did not write."""
    if out.exists() and not out.is_dir():
        raise InvalidInput(f"--out {out} exists and is not a folder.", field="out")
    if out.is_dir() and any(out.iterdir()) and not (out / "study.json").is_file():
        raise InvalidInput(
            f"--out {out} is not empty and holds no study.json: give a new folder.", field="out"
        )
    out.mkdir(parents=True, exist_ok=True)
    for arm in arms:
        if (out / arm).exists():
            shutil.rmtree(out / arm)


def run_study(
    suite: Suite,
    options: StudyOptions,
    *,
    settings: Settings,
    llm: StudyLLM,
    out: Path,
    progress: Progress | None = None,
    recorded: Recorded | None = None,
) -> StudyResult:
    """Run every arm of ``options`` on ``suite``; arm workspaces go under ``out``.

    An LLM failure stops the study with :attr:`StudyResult.error` naming the call;
    the rounds done so far are kept in the result. ``recorded`` hears the result
    after every arm-round, so that a study of an hour that is stopped halfway
    (a machine going away, a person pressing Ctrl-C) leaves what it measured."""
    prepare_out(out, options.arms)
    result = StudyResult(suite.name, options, llm.model)
    tick = progress or (lambda n, label: None)
    started = time.perf_counter()

    def tally() -> None:
        result.llm_calls, result.reused, result.stored = llm.calls, llm.reused, llm.stored
        result.llm_seconds = round(llm.seconds, 2)
        result.input_tokens, result.output_tokens = llm.input_tokens, llm.output_tokens
        result.seconds = round(time.perf_counter() - started, 2)

    def measured(so_far: StudyResult) -> None:
        if recorded is not None:
            tally()
            recorded(so_far)

    try:
        for name in options.arms:
            root = out / name
            ws, _ = init_workspace(root, settings=_arm_settings(settings, root.resolve(), options))
            try:
                _Arm(name, suite, options, llm, result, tick, ws, measured).run()
            finally:
                ws.dispose()
    except StudyStopped as exc:
        result.error = exc.message
    except AmelioError as exc:
        result.error = f"{llm.step}: {exc.message}"
    tally()
    return result
