"""Binary eval rules: declarative pass/fail checks on an answer, with no AI in the loop.

A skill declares rules in ``<name>.evals.json``; after the model
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
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from amelio.errors import EvalRuleError, InputTooLarge
from amelio.evals.builtin import BUILTIN_RULE_TYPES
from amelio.evals.rules import (
    COMMON_FIELDS,
    DEFAULT_SEVERITY,
    MAX_RULES,
    MAX_TEXT_CHARS,
    SEVERITIES,
    SUPPORTED_VERSION,
    WORK_BUDGET,
    Check,
    EvalReport,
    EvalResult,
    EvalRule,
    EvalSpec,
    RuleParamError,
    RuleType,
    Verdict,
    WorkBudget,
    WorkBudgetExceeded,
    json_kind,
    running_budget,
)
from amelio.plugins import collect

__all__ = [
    "append_footnotes",
    "evaluate",
    "parse_eval_file",
    "parse_rules",
    "render_footnotes",
    "rule_types",
]

log = logging.getLogger(__name__)

_FOOTNOTE_MARKS = {"warning": "⚠️", "info": "ℹ️"}


def evaluate(
    text: str,
    rules: Sequence[EvalRule],
    *,
    max_chars: int = MAX_TEXT_CHARS,
    work_budget: int = WORK_BUDGET,
) -> EvalReport:
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
    token = running_budget.set(WorkBudget(work_budget))
    try:
        for rule in rules:
            try:
                passed, detail = rule.check(text)
            except WorkBudgetExceeded as exc:
                append(
                    EvalResult(
                        rule.id,
                        rule.name,
                        rule.type,
                        rule.severity,
                        False,
                        f"not checked: {exc}",
                        True,
                    )
                )
                continue
            except Exception as exc:
                log.warning("eval rule %r could not be checked: %r", rule.id, exc)
                append(
                    EvalResult(
                        rule.id,
                        rule.name,
                        rule.type,
                        rule.severity,
                        False,
                        f"could not be checked: {type(exc).__name__}: {exc}",
                        True,
                    )
                )
                continue
            if passed:
                append(rule.passed)
            else:
                append(
                    EvalResult(
                        rule.id, rule.name, rule.type, rule.severity, False, str(detail), False
                    )
                )
    finally:
        running_budget.reset(token)
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
    """Every registered rule type by name, built-ins first: a broken third-party
    package is skipped (:func:`amelio.plugins.collect`) and never disables evals."""
    return collect("register_rule_types", RuleType)


def parse_rules(data: Any, *, source: str | None = None) -> tuple[EvalRule, ...]:
    """Validate and compile a list of rule objects once, so evaluation never has to."""
    if not isinstance(data, list | tuple):
        raise EvalRuleError(
            f"rules must be an array of rule objects, not {json_kind(data)}",
            file=source,
            field="rules",
        )
    if len(data) > MAX_RULES:
        raise EvalRuleError(
            f"{len(data)} rules, over the limit of {MAX_RULES}", file=source, field="rules"
        )
    # Rules of built-in types only (most files) skip plugin discovery: reading every
    # installed package's entry points costs a CLI run more than checking 10,000 rules.
    builtin = all(
        isinstance(raw, Mapping) and raw.get("type") in BUILTIN_RULE_TYPES for raw in data
    )
    types = BUILTIN_RULE_TYPES if builtin else rule_types()
    first_index: dict[str, int] = {}
    rules: list[EvalRule] = []
    for index, raw in enumerate(data):
        rule = _parse_rule(raw, index, types, source)
        if rule.id in first_index:
            raise EvalRuleError(
                f"duplicate id: rules[{first_index[rule.id]}] and rules[{index}] both use it; "
                "ids must be unique within a file",
                file=source,
                rule_id=rule.id,
                field="id",
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
        raise EvalRuleError(
            f"duplicate key {exc.args[0]!r} in one object (the last would silently win)",
            file=source,
            field=exc.args[0],
        ) from None
    except json.JSONDecodeError as exc:
        raise EvalRuleError(
            f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}",
            file=source,
            line=exc.lineno,
            column=exc.colno,
        ) from None
    if not isinstance(data, dict):
        raise EvalRuleError(
            f'an eval file must be a JSON object like {{"version": 1, "rules": [...]}}, '
            f"not {json_kind(data)}",
            file=source,
        )
    for key in data:
        if key not in ("version", "skill", "rules"):
            raise EvalRuleError(
                "unknown field; an eval file has version, skill and rules", file=source, field=key
            )
    version = data.get("version")
    if type(version) is not int or version != SUPPORTED_VERSION:
        raise EvalRuleError(
            f"unsupported version {version!r}; this Amelio reads version {SUPPORTED_VERSION} "
            f'(add "version": {SUPPORTED_VERSION})',
            file=source,
            field="version",
        )
    skill = data.get("skill")
    if skill is not None and not isinstance(skill, str):
        raise EvalRuleError(
            f"must be the skill's name as a string, not {json_kind(skill)}",
            file=source,
            field="skill",
        )
    if "rules" not in data:
        raise EvalRuleError(
            "missing; an eval file needs a rules array (it may be empty)",
            file=source,
            field="rules",
        )
    return EvalSpec(version, skill, parse_rules(data["rules"], source=source))


def _parse_rule(
    raw: Any, index: int, types: Mapping[str, RuleType], source: str | None
) -> EvalRule:
    where = f"rules[{index}]"
    if not isinstance(raw, Mapping):
        raise EvalRuleError(
            f"{where} must be an object with id, type and severity, not {json_kind(raw)}",
            file=source,
        )
    rule_id = raw.get("id")
    if not isinstance(rule_id, str) or not rule_id.strip():
        raise EvalRuleError(
            f"{where} needs an id, a non-empty string unique in the file", file=source, field="id"
        )

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
            raise fail(
                str(key), f"unknown field for a {type_name} rule; allowed: {', '.join(allowed)}"
            )
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
    params = {
        k: copy.deepcopy(v) for k, v in raw.items() if k not in ("id", "name", "type", "severity")
    }
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
