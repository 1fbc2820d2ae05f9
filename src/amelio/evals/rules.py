"""The vocabulary of eval rules: verdicts, rule types, rules, results, the limits
every rule lives within, and the work budget costly checks charge.

Kept apart from the engine (:mod:`amelio.evals.engine`) so that rule types, the
built-in ones (:mod:`amelio.evals.builtin`) and plugins' alike, depend on this
module alone; the engine depends on both.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple

__all__ = [
    "COMMON_FIELDS",
    "DEFAULT_SEVERITY",
    "MAX_RULES",
    "MAX_TEXT_CHARS",
    "SEVERITIES",
    "STRUCTURAL_MAX_CHARS",
    "SUPPORTED_VERSION",
    "WORK_BUDGET",
    "Check",
    "EvalReport",
    "EvalResult",
    "EvalRule",
    "EvalSpec",
    "RuleParamError",
    "RuleType",
    "Verdict",
    "WorkBudget",
    "WorkBudgetExceeded",
    "charge",
    "json_kind",
    "running_budget",
]

#: What a failed rule means: a ``warning`` fails the answer, an ``info`` only notes it.
SEVERITIES = ("warning", "info")
#: A rule without ``severity`` is a warning: a rule someone bothered to write usually matters.
DEFAULT_SEVERITY = "warning"
SUPPORTED_VERSION = 1
#: RE2's memory budget per pattern; a pattern that needs more fails at load time.
REGEX_MAX_MEM = 8 << 20
REGEX_MAX_PATTERN_CHARS = 10_000
#: RE2 is linear in the text, but its cost also grows with the compiled program:
#: a pattern over this size is refused at load, and a check whose program size ×
#: text bytes passes REGEX_MAX_WORK is an error result instead of a slow scan
#: (measured worst case about 1 ns per unit: 0.1 s).
REGEX_MAX_PROGRAM = 2_000
REGEX_MAX_WORK = 100_000_000
#: The longest text :func:`evaluate` takes unless told otherwise, in characters: the
#: default of the ``max_text_chars`` setting.
MAX_TEXT_CHARS = 1_000_000
#: Most rules one list may hold: bounds the work a single check can ask for.
MAX_RULES = 200
#: Work one :func:`evaluate` call may spend across its rules, in units of about a
#: microsecond of worst-case CPU (measured: a ``json_schema`` keyword applied to one
#: JSON value costs 2-5 µs and is charged 5; a regex costs program size × bytes ns).
#: 500,000 units is about half a second: far above any real answer's checks (a
#: 1,000-value JSON answer under a 10-keyword schema costs about 50,000), far
#: below the 50 s that five schemas over a 1 MB array used to cost.
WORK_BUDGET = 500_000
#: Largest answer, in characters, that ``is_json`` and ``json_schema`` parse.
STRUCTURAL_MAX_CHARS = 200_000
#: Fields any rule may carry, whatever its type; ``negate`` inverts the verdict.
COMMON_FIELDS = ("id", "name", "type", "severity", "negate")


class Verdict(NamedTuple):
    """What a check saw. ``detail`` explains the outcome either way, because a negated
    rule fails exactly when its check passes and must still say why; the engine
    shows ``detail`` only for failed rules."""

    passed: bool
    detail: str = ""


#: What a rule type compiles a rule into: the answer's text to a :class:`Verdict`.
Check = Callable[[str], Verdict]


class RuleParamError(ValueError):
    """Raised by a rule type's ``compile`` so the load error can name the field."""

    def __init__(self, field: str | None, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class RuleType:
    """A kind of rule. ``compile`` gets the rule's own parameters (already checked
    against ``required``/``optional``, so it only judges their values) and returns
    the check; it raises :class:`RuleParamError` for a bad value."""

    name: str
    compile: Callable[[Mapping[str, Any]], Check]
    required: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    description: str = ""


@dataclass(frozen=True)
class EvalRule:
    """One validated, compiled rule; equality ignores the compiled check."""

    id: str
    name: str
    type: str
    severity: str
    params: Mapping[str, Any] = field(hash=False)
    check: Check = field(compare=False, repr=False, hash=False)

    @cached_property
    def passed(self) -> EvalResult:
        """This rule's result for an answer that passes it, built once and shared (it
        says nothing about the answer, and it is immutable): a batch of 1,000 outputs ×
        10 rules builds a result only for the failures. Two threads racing on a new
        rule may each build one; they are equal."""
        return EvalResult(self.id, self.name, self.type, self.severity, True, "", False)

    def to_dict(self) -> dict[str, Any]:
        """The seed's JSON shape; parsing it again gives an equal rule."""
        return {
            "id": self.id,
            "name": self.name,
            "type": self.type,
            **copy.deepcopy(dict(self.params)),
            "severity": self.severity,
        }


@dataclass(frozen=True)
class EvalSpec:
    """A whole ``<skill>.evals.json`` file."""

    version: int
    skill: str | None
    rules: tuple[EvalRule, ...]

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"version": self.version}
        if self.skill is not None:
            data["skill"] = self.skill
        data["rules"] = [rule.to_dict() for rule in self.rules]
        return data


@dataclass(frozen=True, slots=True)
class EvalResult:
    """The outcome of one rule. ``error`` marks a rule that could not be checked at
    all (its check raised); it counts as failed so a broken rule is never silent."""

    rule_id: str
    name: str
    type: str
    severity: str
    passed: bool
    detail: str = ""
    error: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "ruleId": self.rule_id,
            "name": self.name,
            "type": self.type,
            "severity": self.severity,
            "passed": self.passed,
            "detail": self.detail,
            "error": self.error,
        }


@dataclass(frozen=True)
class EvalReport:
    """Every rule's result for one answer, in rule order."""

    results: tuple[EvalResult, ...]

    @property
    def success(self) -> bool:
        """The seed's definition: an interaction succeeds when no warning rule fails."""
        return not any(not r.passed and r.severity == "warning" for r in self.results)

    @property
    def failed(self) -> tuple[EvalResult, ...]:
        return tuple(r for r in self.results if not r.passed)

    @property
    def passed_count(self) -> int:
        return sum(1 for r in self.results if r.passed)

    @property
    def passed_share(self) -> float | None:
        """The share of the rules the answer passes; None with no rule to pass."""
        return self.passed_count / len(self.results) if self.results else None

    def to_dict(self) -> dict[str, Any]:
        return {"success": self.success, "results": [r.to_dict() for r in self.results]}


class WorkBudgetExceeded(Exception):
    """A check charged past its evaluation's work budget; recorded as an errored result."""


class WorkBudget:
    """The work one :func:`evaluate` call may still spend (see :data:`WORK_BUDGET`)."""

    __slots__ = ("limit", "spent")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.spent = 0

    def charge(self, units: int) -> None:
        self.spent += units
        if self.spent > self.limit:
            raise WorkBudgetExceeded(
                f"the rules of this check used up their work budget ({self.limit:,} units); "
                "shorten the answer or simplify the rules"
            )


#: The budget of the :func:`~amelio.evals.engine.evaluate` call running in this context.
running_budget: ContextVar[WorkBudget | None] = ContextVar("amelio_eval_budget", default=None)


def charge(units: int) -> None:
    """Charge ``units`` of work to the running :func:`evaluate` call, if any.

    Costly checks (built-in or plugin) call this before or while they work; past
    the budget it raises :class:`WorkBudgetExceeded`, which stops that check."""
    budget = running_budget.get()
    if budget is not None:
        budget.charge(units)


def json_kind(value: Any) -> str:
    """A JSON-flavoured name for a value's type ("a string", "an array", "null"), for
    error messages users can act on. Public so that rule types (the built-ins in
    :mod:`amelio.evals.builtin`, and plugins') word their parameter errors the same way."""
    kinds = (
        (bool, "a boolean"),
        (int | float, "a number"),
        (str, "a string"),
        (Mapping, "an object"),
        (list | tuple, "an array"),
    )
    if value is None:
        return "null"
    return next((name for cls, name in kinds if isinstance(value, cls)), type(value).__name__)
