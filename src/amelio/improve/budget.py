"""What an improvement run may spend on LLM calls: an estimate before it starts, and
a bound while it runs.

Sage rewrites and their benchmarks are the expensive part of the loop: a benchmark
asks for the old and new answers, the old one again (the noise floor), the judge
``judge_repeats`` times in each order, and the pinned cases. ``amelio improve
--sage`` and ``amelio sage analyze`` print an estimate (:func:`sage_estimate`)
before the first call, and ``improve_budget_tokens`` stops them once the tokens of
the calls actually made (a cached answer costs nothing) reach it: the call that
would go over is not made (:class:`BudgetExceeded`), and the report says what was
spent and what was left undone.

An estimate is an upper bound: each answer is counted at ``llm_max_tokens``, and
neither the cache nor a benchmark's early stop is foreseen. Tokens are counted the
usual way for English text when a provider does not report them, four characters
a token.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from amelio.assistant.cases import count_cases
from amelio.errors import AmelioError
from amelio.llm import Completion, LLMRequest, Provider, StreamEvent
from amelio.llm.base import whole_stream
from amelio.workspace.folder import Workspace

__all__ = [
    "Budget",
    "BudgetExceeded",
    "Estimate",
    "benchmark_estimate",
    "describe_spending",
    "estimate_tokens",
    "sage_estimate",
]


class BudgetExceeded(AmelioError):
    """The next LLM call would go over ``improve_budget_tokens``: it is not made."""

    code = "budget_exceeded"
    http_status = 429


def estimate_tokens(text: str) -> int:
    """Tokens in ``text`` at four characters a token (English prose and Markdown)."""
    return len(text) // 4 + 1


@dataclass(frozen=True)
class Estimate:
    """At most this many calls and tokens."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Estimate) -> Estimate:
        return Estimate(
            self.calls + other.calls,
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
        )

    def times(self, n: int) -> Estimate:
        return Estimate(self.calls * n, self.input_tokens * n, self.output_tokens * n)

    def announce(self, limit: int) -> str:
        """The line a command prints before its first call."""
        bound = f"; budget {limit:,} tokens (improve_budget_tokens)" if limit else ""
        return f"Estimate: {self.describe()}{bound}."

    def describe(self) -> str:
        if not self.calls:
            return "no LLM calls"
        return (
            f"at most {self.calls:,} LLM calls, about {self.input_tokens:,} input and "
            f"{self.output_tokens:,} output tokens"
        )


def benchmark_estimate(ws: Workspace, skill: str, project: str, content: str) -> Estimate:
    """One benchmark of a proposal for ``skill`` whose content is about ``content``."""
    s = ws.settings
    prompt = estimate_tokens(s.system_prompt + content) + s.learnings_max_chars // 4 + 50
    answer = Estimate(1, prompt + 50, s.llm_max_tokens)
    judged = Estimate(1, 2 * s.llm_max_tokens + 200, 300)
    orders = 2 if s.bench_swap else 1
    aa = 1 if s.bench_noise_floor else 0
    per_scenario = answer.times(2 + aa) + judged.times(orders * s.judge_repeats * (1 + aa))
    pinned = min(count_cases(ws, skill, project), s.bench_max_pinned_cases)
    calibration = Estimate(1, s.llm_max_tokens + 100, 200).times(s.judge_calibration_cases)
    return (
        Estimate(1, 200, 1500)  # the scenario writer
        + per_scenario.times(s.bench_scenarios)
        + answer.times(2 * pinned)
        + calibration
    )


def sage_estimate(
    ws: Workspace, targets: Sequence[tuple[str, str, str, str]], *, benchmark: bool = True
) -> Estimate:
    """Sage on ``targets`` (skill, project, Sage's prompt, the skill's content): one
    rewrite each (its answer counted at Sage's 4,000-token limit), and its benchmark
    with ``benchmark``."""
    total = Estimate()
    for skill, project, prompt, content in targets:
        total += Estimate(1, estimate_tokens(prompt) + 200, 4000)
        if benchmark:
            total += benchmark_estimate(ws, skill, project, content)
    return total


@dataclass
class Budget:
    """Tokens a run may spend (``limit``; 0: no bound), and what it has spent."""

    limit: int = 0
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    undone: list[str] = field(default_factory=list)

    @property
    def spent(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def exhausted(self) -> bool:
        return bool(self.limit) and self.spent >= self.limit

    def wrap(self, provider: Provider) -> Provider:
        """``provider``, with every call it makes counted against this budget."""
        return _Budgeted(provider, self)

    def charge(self, request: LLMRequest, completion: Completion) -> None:
        self.calls += 1
        self.input_tokens += completion.input_tokens or estimate_tokens(
            request.system + "".join(m.content for m in request.messages)
        )
        self.output_tokens += completion.output_tokens or estimate_tokens(completion.text)

    def to_dict(self) -> dict[str, Any]:
        return {
            "limit": self.limit or None,
            "calls": self.calls,
            "inputTokens": self.input_tokens,
            "outputTokens": self.output_tokens,
            "exhausted": self.exhausted,
            "undone": list(self.undone),
        }

    def describe(self) -> str:
        return describe_spending(self.to_dict())


def describe_spending(spent: dict[str, Any]) -> str:
    """What a run spent and left undone, in words, from :meth:`Budget.to_dict` (as a
    report keeps it)."""
    bound = f" of a budget of {spent['limit']:,}" if spent["limit"] else ""
    tokens = spent["inputTokens"] + spent["outputTokens"]
    text = f"Spent {tokens:,} tokens{bound} in {spent['calls']:,} LLM calls"
    if spent["undone"]:
        text += f"; left undone at the budget: {'; '.join(spent['undone'])}"
    return text + "."


class _Budgeted:
    def __init__(self, inner: Provider, budget: Budget) -> None:
        self.inner = inner
        self.budget = budget
        self.name = inner.name
        self.model = inner.model

    def complete(self, request: LLMRequest) -> Completion:
        if self.budget.exhausted:
            raise BudgetExceeded(
                f"The run reached improve_budget_tokens ({self.budget.limit:,}) after "
                f"{self.budget.spent:,} tokens: this call was not made.",
                limit=self.budget.limit,
                spent=self.budget.spent,
            )
        completion = self.inner.complete(request)
        self.budget.charge(request, completion)
        return completion

    def stream(self, request: LLMRequest) -> Iterator[StreamEvent]:
        yield from whole_stream(self.complete(request))
