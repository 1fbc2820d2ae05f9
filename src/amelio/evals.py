"""Binary eval rules: declarative pass/fail checks on an answer, with no AI in the loop.

Seed pillar 1. A skill declares rules in ``<name>.evals.json``; after the model
answers, :func:`evaluate` runs every rule and failures become footnotes under the
answer (``⚠️`` for ``warning``, ``ℹ️`` for ``info``). An interaction succeeds when no
``warning`` rule fails.

The core abstraction is small on purpose: a rule is a function from text to a
:class:`Verdict`. A :class:`RuleType` turns a rule's parameters into that function
once, at load time, so a bad rule fails when the file is read (naming file, rule id
and field) and :func:`evaluate` is a tight loop over precompiled checks. The
built-in types register through the ``register_rule_types`` hook like any
third-party package would.

Regexes run on RE2 (linear time, bounded memory), so no pattern, however hostile,
can hang the process; that includes ``pattern`` inside a ``json_schema`` rule.
Linear is not free, so one :func:`evaluate` call also has a work budget
(:data:`WORK_BUDGET`) that every costly check charges: regex scans by program size ×
text bytes, structural rules by JSON size and by each schema keyword they apply.
The rule that runs the budget out, and any costly rule after it, becomes an errored
result naming the budget; the cheap rules still run. Structural rules
(``is_json``, ``json_schema``) also refuse answers over :data:`STRUCTURAL_MAX_CHARS`.

Every rule has ``id``, ``name`` (defaults to the id), ``type``, ``severity``
(defaults to ``warning``), an optional ``negate: true`` that inverts any type, and
its type's own parameters; anything else is an error. Lengths count characters,
not bytes; ``equals`` and ``starts_with`` ignore the whitespace around an answer;
``is_json``/``json_schema`` accept an answer that is one ```json fenced block.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any, NamedTuple

from amelio.errors import EvalRuleError, InputTooLarge
from amelio.plugins import get_plugin_manager, is_builtin

__all__ = [
    "DEFAULT_SEVERITY", "MAX_TEXT_CHARS", "SEVERITIES", "EvalReport", "EvalResult", "EvalRule",
    "EvalSpec", "RuleParamError", "RuleType", "Verdict", "WorkBudget", "WorkBudgetExceeded",
    "append_footnotes", "charge", "evaluate", "json_kind", "parse_eval_file", "parse_rules",
    "render_footnotes", "rule_types",
]

log = logging.getLogger(__name__)

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
_FOOTNOTE_MARKS = {"warning": "⚠️", "info": "ℹ️"}


class Verdict(NamedTuple):
    """What a check saw. ``detail`` explains the outcome either way, because a negated
    rule fails exactly when its check passes and must still say why; the engine
    shows ``detail`` only for failed rules."""

    passed: bool
    detail: str = ""


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

    def to_dict(self) -> dict[str, Any]:
        return {"success": self.success, "results": [r.to_dict() for r in self.results]}


# --------------------------------------------------------------------------- engine


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
                "shorten the answer or simplify the rules")


_budget: ContextVar[WorkBudget | None] = ContextVar("amelio_eval_budget", default=None)


def charge(units: int) -> None:
    """Charge ``units`` of work to the running :func:`evaluate` call, if any.

    Costly checks (built-in or plugin) call this before or while they work; past
    the budget it raises :class:`WorkBudgetExceeded`, which stops that check."""
    budget = _budget.get()
    if budget is not None:
        budget.charge(units)


def evaluate(text: str, rules: Sequence[EvalRule], *, max_chars: int = MAX_TEXT_CHARS,
             work_budget: int = WORK_BUDGET) -> EvalReport:
    """Run every rule on ``text``. A check that raises is recorded as an errored,
    failed result rather than raised: one broken plugin rule must not lose the
    verdicts of all the others, and one costly rule must not starve them either
    (``work_budget``: see :data:`WORK_BUDGET`)."""
    size = len(text)
    if size > max_chars:
        raise InputTooLarge(
            f"answer is {size:,} chars, over the eval limit of {max_chars:,}; "
            "shorten it or raise max_chars",
            size=size,
            limit=max_chars,
        )
    results: list[EvalResult] = []
    append = results.append
    token = _budget.set(WorkBudget(work_budget))
    try:
        for rule in rules:
            try:
                passed, detail = rule.check(text)
            except WorkBudgetExceeded as exc:
                append(EvalResult(rule.id, rule.name, rule.type, rule.severity, False,
                                  f"not checked: {exc}", True))
                continue
            except Exception as exc:
                log.warning("eval rule %r could not be checked: %r", rule.id, exc)
                append(EvalResult(rule.id, rule.name, rule.type, rule.severity, False,
                                  f"could not be checked: {type(exc).__name__}: {exc}", True))
                continue
            if passed:
                append(rule.passed)
            else:
                append(EvalResult(rule.id, rule.name, rule.type, rule.severity, False,
                                  str(detail), False))
    finally:
        _budget.reset(token)
    return EvalReport(tuple(results))


def render_footnotes(report: EvalReport) -> list[str]:
    """One line per failed rule, warnings before infos (rule order within each), so
    the notes that decide success are read first."""
    failed = report.failed
    return [
        f"{_FOOTNOTE_MARKS[severity]} {r.name}"
        for severity in SEVERITIES
        for r in failed
        if r.severity == severity
    ]


def append_footnotes(answer: str, report: EvalReport) -> str:
    """The answer with its footnotes under a blank line; unchanged when nothing failed."""
    notes = render_footnotes(report)
    if not notes:
        return answer
    body = answer.rstrip()
    block = "\n".join(notes)
    return f"{body}\n\n{block}" if body else block


# --------------------------------------------------------------------------- loading


def rule_types() -> dict[str, RuleType]:
    """Every registered rule type by name. Built-ins claim their names first; a
    plugin that reuses a name, registers something else or raises is logged and
    skipped, because a broken third-party package must not disable evals."""
    impls = [
        impl
        for impl in get_plugin_manager().hook.register_rule_types.get_hookimpls()
        if not (impl.hookwrapper or impl.wrapper)
    ]
    impls.sort(key=lambda impl: not is_builtin(impl.plugin_name))  # stable: built-ins first
    found: dict[str, RuleType] = {}
    for impl in impls:

        def register(rule_type: Any, _plugin: str = impl.plugin_name) -> None:
            if not isinstance(rule_type, RuleType):
                log.warning("plugin %s registered %r, not a RuleType; skipped", _plugin, rule_type)
            elif rule_type.name in found:
                log.warning("plugin %s registered rule type %r again; the first one is kept",
                            _plugin, rule_type.name)
            else:
                found[rule_type.name] = rule_type

        try:
            impl.function(**dict.fromkeys(impl.argnames, register))
        except Exception:
            log.exception("plugin %s failed in register_rule_types", impl.plugin_name)
    return found


def parse_rules(data: Any, *, source: str | None = None) -> tuple[EvalRule, ...]:
    """Validate and compile a list of rule objects once, so evaluation never has to."""
    if not isinstance(data, list | tuple):
        raise EvalRuleError(f"rules must be an array of rule objects, not {json_kind(data)}",
                            file=source, field="rules")
    if len(data) > MAX_RULES:
        raise EvalRuleError(f"{len(data)} rules, over the limit of {MAX_RULES}",
                            file=source, field="rules")
    # Rules of built-in types only (most files) skip plugin discovery: reading every
    # installed package's entry points costs a CLI run more than checking 10,000 rules.
    from amelio.eval_types import BUILTIN_RULE_TYPES

    builtin = all(isinstance(raw, Mapping) and raw.get("type") in BUILTIN_RULE_TYPES
                  for raw in data)
    types = BUILTIN_RULE_TYPES if builtin else rule_types()
    first_index: dict[str, int] = {}
    rules: list[EvalRule] = []
    for index, raw in enumerate(data):
        rule = _parse_rule(raw, index, types, source)
        if rule.id in first_index:
            raise EvalRuleError(
                f"duplicate id: rules[{first_index[rule.id]}] and rules[{index}] both use it; "
                "ids must be unique within a file",
                file=source, rule_id=rule.id, field="id",
            )
        first_index[rule.id] = index
        rules.append(rule)
    return tuple(rules)


class _DuplicateKey(ValueError):
    pass


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise _DuplicateKey(key)
        data[key] = value
    return data


def parse_eval_file(text: str, *, source: str) -> EvalSpec:
    """Read a whole eval file in the seed's format (``{"version": 1, "skill", "rules"}``)."""
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except _DuplicateKey as exc:
        raise EvalRuleError(f"duplicate key {exc.args[0]!r} in one object (the last would "
                            "silently win)", file=source, field=exc.args[0]) from None
    except json.JSONDecodeError as exc:
        raise EvalRuleError(
            f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}",
            file=source, line=exc.lineno, column=exc.colno,
        ) from None
    if not isinstance(data, dict):
        raise EvalRuleError(
            f'an eval file must be a JSON object like {{"version": 1, "rules": [...]}}, '
            f"not {json_kind(data)}", file=source,
        )
    for key in data:
        if key not in ("version", "skill", "rules"):
            raise EvalRuleError("unknown field; an eval file has version, skill and rules",
                                file=source, field=key)
    version = data.get("version")
    if type(version) is not int or version != SUPPORTED_VERSION:
        raise EvalRuleError(
            f"unsupported version {version!r}; this Amelio reads version {SUPPORTED_VERSION} "
            f'(add "version": {SUPPORTED_VERSION})', file=source, field="version",
        )
    skill = data.get("skill")
    if skill is not None and not isinstance(skill, str):
        raise EvalRuleError(f"must be the skill's name as a string, not {json_kind(skill)}",
                            file=source, field="skill")
    if "rules" not in data:
        raise EvalRuleError("missing; an eval file needs a rules array (it may be empty)",
                            file=source, field="rules")
    return EvalSpec(version, skill, parse_rules(data["rules"], source=source))


def _parse_rule(
    raw: Any, index: int, types: Mapping[str, RuleType], source: str | None
) -> EvalRule:
    where = f"rules[{index}]"
    if not isinstance(raw, Mapping):
        raise EvalRuleError(f"{where} must be an object with id, type and severity, "
                            f"not {json_kind(raw)}", file=source)
    rule_id = raw.get("id")
    if not isinstance(rule_id, str) or not rule_id.strip():
        raise EvalRuleError(f"{where} needs an id, a non-empty string unique in the file",
                            file=source, field="id")

    def fail(field: str | None, message: str) -> EvalRuleError:
        return EvalRuleError(message, file=source, rule_id=rule_id, field=field)

    type_name = raw.get("type")
    known = ", ".join(sorted(types))
    if not isinstance(type_name, str):
        raise fail("type", f"missing or not a string; one of: {known}")
    rule_type = types.get(type_name)
    if rule_type is None:
        raise fail("type", f"unknown rule type {type_name!r}; known types: {known}")
    allowed = (*COMMON_FIELDS, *rule_type.required, *rule_type.optional)
    for key in raw:
        if key not in allowed:
            raise fail(str(key), f"unknown field for a {type_name} rule; "
                                 f"allowed: {', '.join(allowed)}")
    for key in rule_type.required:
        if key not in raw:
            raise fail(key, f"missing; a {type_name} rule needs {', '.join(rule_type.required)}")
    name = raw.get("name", rule_id)
    if not isinstance(name, str) or not name.strip():
        raise fail("name", "must be a non-empty string (it is shown in the footnote)")
    severity = raw.get("severity", DEFAULT_SEVERITY)
    if severity not in SEVERITIES:
        raise fail("severity", f"must be 'warning' or 'info', not {severity!r}")
    negate = raw.get("negate", False)
    if not isinstance(negate, bool):
        raise fail("negate", f"must be true or false, not {json_kind(negate)}")
    params = {k: copy.deepcopy(v) for k, v in raw.items() if k not in ("id", "name", "type",
                                                                        "severity")}
    own = MappingProxyType({k: v for k, v in params.items() if k != "negate"})
    try:
        check = rule_type.compile(own)
    except RuleParamError as exc:
        raise fail(exc.field, exc.message) from None
    except Exception as exc:
        raise fail(None, f"rule type {type_name!r} rejected the rule: {exc}") from exc
    if not callable(check):
        raise fail(None, f"rule type {type_name!r} did not return a check function")
    if negate:
        check = _negated(check, type_name)
    return EvalRule(rule_id, name, type_name, severity, MappingProxyType(params), check)


def _negated(check: Check, type_name: str) -> Check:
    def negated(text: str) -> Verdict:
        passed, detail = check(text)
        outcome = "held" if passed else "failed"
        return Verdict(not passed, detail or f"the {type_name} check {outcome}; rule is negated")
    return negated


def json_kind(value: Any) -> str:
    """A JSON-flavoured name for a value's type ("a string", "an array", "null"), for
    error messages users can act on. Public so that rule types (the built-ins in
    :mod:`amelio.eval_types`, and plugins') word their parameter errors the same way."""
    kinds = ((bool, "a boolean"), (int | float, "a number"), (str, "a string"),
             (Mapping, "an object"), (list | tuple, "an array"))
    if value is None:
        return "null"
    return next((name for cls, name in kinds if isinstance(value, cls)), type(value).__name__)
