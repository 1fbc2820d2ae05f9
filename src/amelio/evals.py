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
"""

from __future__ import annotations

import copy
import json
import logging
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

import jsonschema  # type: ignore[import-untyped]
import re2  # type: ignore[import-untyped]

from amelio.errors import EvalRuleError, InputTooLarge
from amelio.hookspecs import hookimpl
from amelio.plugins import get_plugin_manager

__all__ = [
    "DEFAULT_SEVERITY", "SEVERITIES", "EvalReport", "EvalResult", "EvalRule", "EvalSpec",
    "RuleParamError", "RuleType", "Verdict", "append_footnotes", "evaluate", "parse_eval_file",
    "parse_rules", "render_footnotes", "rule_types",
]

log = logging.getLogger(__name__)

SEVERITIES = ("warning", "info")
#: A rule without ``severity`` is a warning: a rule someone bothered to write usually matters.
DEFAULT_SEVERITY = "warning"
SUPPORTED_VERSION = 1
#: RE2's memory budget per pattern; a pattern that needs more fails at load time.
REGEX_MAX_MEM = 8 << 20
REGEX_MAX_PATTERN_CHARS = 10_000
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


def evaluate(text: str, rules: Sequence[EvalRule], *, max_chars: int = 1_000_000) -> EvalReport:
    """Run every rule on ``text``. A check that raises is recorded as an errored,
    failed result rather than raised: one broken plugin rule must not lose the
    verdicts of all the others."""
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
    for rule in rules:
        try:
            passed, detail = rule.check(text)
        except Exception as exc:
            log.warning("eval rule %r could not be checked: %r", rule.id, exc)
            append(EvalResult(rule.id, rule.name, rule.type, rule.severity, True,
                              f"could not be checked: {type(exc).__name__}: {exc}", True))
            continue
        passed = bool(passed)
        append(EvalResult(rule.id, rule.name, rule.type, rule.severity, passed,
                          "" if passed else str(detail), False))
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
    this = sys.modules[__name__]
    impls = [
        impl
        for impl in get_plugin_manager().hook.register_rule_types.get_hookimpls()
        if not (impl.hookwrapper or impl.wrapper)
    ]
    impls.sort(key=lambda impl: impl.plugin is not this)  # stable: built-ins first
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
        raise EvalRuleError(f"rules must be an array of rule objects, not {_kind(data)}",
                            file=source, field="rules")
    types = rule_types()
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


def parse_eval_file(text: str, *, source: str) -> EvalSpec:
    """Read a whole eval file in the seed's format (``{"version": 1, "skill", "rules"}``)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise EvalRuleError(
            f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}",
            file=source, line=exc.lineno, column=exc.colno,
        ) from None
    if not isinstance(data, dict):
        raise EvalRuleError(
            f'an eval file must be a JSON object like {{"version": 1, "rules": [...]}}, '
            f"not {_kind(data)}", file=source,
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
        raise EvalRuleError(f"must be the skill's name as a string, not {_kind(skill)}",
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
                            f"not {_kind(raw)}", file=source)
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
        raise fail("negate", f"must be true or false, not {_kind(negate)}")
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


# --------------------------------------------------------------------------- parameters


def _kind(value: Any) -> str:
    """A JSON-flavoured name for a value's type, for error messages users can act on."""
    kinds = ((bool, "a boolean"), (int | float, "a number"), (str, "a string"),
             (Mapping, "an object"), (list | tuple, "an array"))
    if value is None:
        return "null"
    return next((name for cls, name in kinds if isinstance(value, cls)), type(value).__name__)


def _clip(value: str, limit: int = 60) -> str:
    return value if len(value) <= limit else value[: limit - 1] + "…"


def _show(value: str) -> str:
    return repr(_clip(value))


def _show_all(values: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(_show(v) for v in values[:limit])
    return shown + (f" and {len(values) - limit} more" if len(values) > limit else "")


def _text(params: Mapping[str, Any], name: str, *, allow_empty: bool = False) -> str:
    value = params[name]
    if not isinstance(value, str):
        raise RuleParamError(name, f"must be a string, not {_kind(value)}")
    if not value and not allow_empty:
        raise RuleParamError(name, "must not be empty (an empty string is in every answer)")
    return value


def _texts(params: Mapping[str, Any], name: str) -> tuple[str, ...]:
    values = params[name]
    if not isinstance(values, list | tuple) or not values:
        raise RuleParamError(name, f"must be a non-empty array of strings, not {_kind(values)}")
    for i, value in enumerate(values):
        if not isinstance(value, str) or not value:
            raise RuleParamError(name, f"item {i} must be a non-empty string, not {_kind(value)}")
    return tuple(values)


def _count(params: Mapping[str, Any], name: str) -> int:
    value = params[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise RuleParamError(name, f"must be a whole number like 2000, not {_kind(value)}")
    if value < 0:
        raise RuleParamError(name, f"must be 0 or more, not {value}")
    return value


def _flag(params: Mapping[str, Any], name: str, default: bool) -> bool:
    value = params.get(name, default)
    if not isinstance(value, bool):
        raise RuleParamError(name, f"must be true or false, not {_kind(value)}")
    return value


# --------------------------------------------------------------------------- built-in types


def _contains(params: Mapping[str, Any]) -> Check:
    value = _text(params, "value")
    yes = Verdict(True, f"answer contains {_show(value)}")
    no = Verdict(False, f"answer does not contain {_show(value)}")
    return lambda text: yes if value in text else no


def _not_contains(params: Mapping[str, Any]) -> Check:
    value = _text(params, "value")
    ok = Verdict(True, f"answer does not contain {_show(value)}")

    def check(text: str) -> Verdict:
        at = text.find(value)
        return ok if at < 0 else Verdict(False, f"answer contains {_show(value)} "
                                                f"at character {at + 1:,}")
    return check


def _icontains(params: Mapping[str, Any]) -> Check:
    value = _text(params, "value")
    needle = value.casefold()
    yes = Verdict(True, f"answer contains {_show(value)} (ignoring case)")
    no = Verdict(False, f"answer does not contain {_show(value)}, even ignoring case")
    return lambda text: yes if needle in text.casefold() else no


def _contains_any(params: Mapping[str, Any]) -> Check:
    values = _texts(params, "values")
    exact = _flag(params, "case_sensitive", True)
    pairs = [(v if exact else v.casefold(), Verdict(True, f"answer contains {_show(v)}"))
             for v in values]
    no = Verdict(False, f"answer contains none of {_show_all(values)}")

    def check(text: str) -> Verdict:
        haystack = text if exact else text.casefold()
        for needle, yes in pairs:
            if needle in haystack:
                return yes
        return no
    return check


def _contains_all(params: Mapping[str, Any]) -> Check:
    values = _texts(params, "values")
    exact = _flag(params, "case_sensitive", True)
    needles = [(v if exact else v.casefold(), v) for v in values]
    yes = Verdict(True, f"answer contains all of {_show_all(values)}")

    def check(text: str) -> Verdict:
        haystack = text if exact else text.casefold()
        missing = [shown for needle, shown in needles if needle not in haystack]
        return Verdict(False, f"answer is missing {_show_all(missing)}") if missing else yes
    return check


def _starts_with(params: Mapping[str, Any]) -> Check:
    value = _text(params, "value")
    yes = Verdict(True, f"answer starts with {_show(value)}")

    def check(text: str) -> Verdict:
        body = text.lstrip()
        if body.startswith(value):
            return yes
        return Verdict(False, f"answer starts with {_show(body[:len(value)])}, "
                              f"not {_show(value)}")
    return check


def _equals(params: Mapping[str, Any]) -> Check:
    expected = _text(params, "value", allow_empty=True).strip()
    yes = Verdict(True, "answer equals the expected text")

    def check(text: str) -> Verdict:
        actual = text.strip()
        if actual == expected:
            return yes
        same = next((i for i, (a, b) in enumerate(zip(actual, expected, strict=False)) if a != b),
                    min(len(actual), len(expected)))
        return Verdict(False, f"answer ({len(actual):,} chars) differs from the expected text "
                              f"({len(expected):,} chars) from character {same + 1:,}")
    return check


def _length(longest: bool) -> Callable[[Mapping[str, Any]], Check]:
    """max_length and min_length: length in characters (code points), as people count."""
    over, bound = ("over", "maximum") if longest else ("under", "minimum")

    def compile_length(params: Mapping[str, Any]) -> Check:
        limit = _count(params, "value")

        def check(text: str) -> Verdict:
            size = len(text)
            ok = size <= limit if longest else size >= limit
            return Verdict(ok, f"answer is {size:,} chars, {'within' if ok else over} "
                               f"the {bound} of {limit:,}")
        return check
    return compile_length


def _word_count(params: Mapping[str, Any]) -> Check:
    low = _count(params, "min") if "min" in params else None
    high = _count(params, "max") if "max" in params else None
    if low is None and high is None:
        raise RuleParamError("min", "a word_count rule needs min, max or both")
    if low is not None and high is not None and low > high:
        raise RuleParamError("max", f"must be at least min ({low}), not {high}")

    def check(text: str) -> Verdict:
        words = len(text.split())
        if low is not None and words < low:
            return Verdict(False, f"answer has {words:,} words, under the minimum of {low:,}")
        if high is not None and words > high:
            return Verdict(False, f"answer has {words:,} words, over the maximum of {high:,}")
        return Verdict(True, f"answer has {words:,} words, within bounds")
    return check


def _not_empty(params: Mapping[str, Any]) -> Check:
    yes = Verdict(True, "answer is not empty")
    no = Verdict(False, "answer is empty or only whitespace")
    return lambda text: no if not text or text.isspace() else yes


# -- regex


def _compile_pattern(params: Mapping[str, Any]) -> tuple[Any, str]:
    pattern = _text(params, "pattern")
    flags = params.get("flags", "")
    if not isinstance(flags, str) or set(flags) - set("ims") or len(set(flags)) != len(flags):
        raise RuleParamError("flags", f"must be letters among i, m, s (each once), not {flags!r}")
    if len(pattern) > REGEX_MAX_PATTERN_CHARS:
        raise RuleParamError("pattern", f"is {len(pattern):,} chars, over the limit of "
                                        f"{REGEX_MAX_PATTERN_CHARS:,}")
    try:
        return _re2(f"(?{flags}){pattern}" if flags else pattern), pattern
    except ValueError as exc:
        raise RuleParamError("pattern", str(exc)) from None


def _re2(pattern: str) -> Any:
    """Compile for RE2 under a memory cap. Patterns are compiled as UTF-8 bytes and
    answers encoded once per check: that keeps RE2's UTF-8 semantics (``.`` is one
    character) without the wrapper's per-match offset bookkeeping."""
    options = re2.Options()
    options.max_mem = REGEX_MAX_MEM
    options.log_errors = False
    try:
        return re2.compile(pattern.encode("utf-8"), options)
    except UnicodeEncodeError:
        raise ValueError("is not valid Unicode text") from None
    except re2.error as exc:
        reason = exc.args[0] if exc.args else ""
        reason = reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
        if "too large" in reason:
            raise ValueError(f"is too large for the regex engine's {REGEX_MAX_MEM >> 20} MiB "
                             "budget; simplify it") from None
        raise ValueError(f"RE2 cannot compile it ({reason}); patterns use RE2 syntax: no "
                         "backreferences like \\1 and no lookaround like (?=…) or (?<!…)") from None


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _regex_match(params: Mapping[str, Any]) -> Check:
    regex, pattern = _compile_pattern(params)
    yes = Verdict(True, f"answer matches /{_clip(pattern)}/")
    no = Verdict(False, f"answer does not match /{_clip(pattern)}/")
    return lambda text: no if regex.search(_encode(text)) is None else yes


def _regex_not_match(params: Mapping[str, Any]) -> Check:
    regex, pattern = _compile_pattern(params)
    ok = Verdict(True, f"answer does not match /{_clip(pattern)}/")

    def check(text: str) -> Verdict:
        data = _encode(text)
        found = regex.search(data)
        if found is None:
            return ok
        # The matched text is not echoed: these rules often guard against leaked secrets.
        at = len(data[: found.start()].decode("utf-8", "surrogatepass"))
        return Verdict(False, f"answer matches /{_clip(pattern)}/ at character {at + 1:,}")
    return check


# -- JSON


def _json_payload(text: str) -> str:
    """The answer, or the inside of the single fenced block it consists of: models
    asked for JSON often wrap it in ```json … ```, and that is still a JSON answer."""
    body = text.strip()
    if len(body) >= 6 and body.startswith("```") and body.endswith("```"):
        newline = body.find("\n")
        if newline > 0 and body[3:newline].strip().lower() in ("", "json"):
            return body[newline + 1 : -3]
    return body


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _load_json(text: str) -> tuple[Any, str | None]:
    try:
        return json.loads(_json_payload(text), parse_constant=_reject_constant), None
    except json.JSONDecodeError as exc:
        return None, f"answer is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
    except (ValueError, RecursionError) as exc:
        return None, f"answer is not valid JSON: {exc}"


def _is_json(params: Mapping[str, Any]) -> Check:
    yes = Verdict(True, "answer is valid JSON")

    def check(text: str) -> Verdict:
        problem = _load_json(text)[1]
        return yes if problem is None else Verdict(False, problem)
    return check


def _re2_pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    """JSON Schema's ``pattern`` keyword on RE2 instead of Python's backtracking ``re``."""
    if validator.is_type(instance, "string") and _re2(pattern).search(_encode(instance)) is None:
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


_RE2_VALIDATORS: dict[Any, Any] = {}


def _schema_patterns(node: Any, path: str = "schema") -> Iterator[tuple[str, str]]:
    """Every ``pattern`` in a schema, so RE2 can reject bad ones at load time. Refuses
    ``patternProperties``: jsonschema would match it with Python's ``re``, which a
    hostile answer could make backtrack for hours."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            if key in ("const", "enum", "examples", "default"):
                continue
            if key == "patternProperties":
                raise RuleParamError("schema", f"{path}.patternProperties is not supported "
                                               "(it would run on a backtracking regex engine)")
            if key == "pattern" and isinstance(value, str):
                yield f"{path}.pattern", value
            else:
                yield from _schema_patterns(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from _schema_patterns(item, f"{path}[{i}]")


def _json_schema(params: Mapping[str, Any]) -> Check:
    schema = params["schema"]
    if not isinstance(schema, Mapping):
        raise RuleParamError("schema", f"must be a JSON Schema object, not {_kind(schema)}")
    latest = jsonschema.Draft202012Validator
    if "$schema" in schema and jsonschema.validators.validator_for(schema, default=None) is None:
        raise RuleParamError("schema", f"unknown $schema {schema['$schema']!r}; use a JSON "
                                       "Schema draft jsonschema knows, or leave $schema out")
    base = jsonschema.validators.validator_for(schema, default=latest)
    try:
        base.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        raise RuleParamError("schema", f"is not a valid JSON Schema at '{where}': "
                                       f"{exc.message}") from None
    for where, pattern in _schema_patterns(schema):
        try:
            _re2(pattern)
        except ValueError as exc:
            raise RuleParamError("schema", f"{where} {exc}") from None
    if base not in _RE2_VALIDATORS:
        _RE2_VALIDATORS[base] = jsonschema.validators.extend(base, {"pattern": _re2_pattern})
    validator = _RE2_VALIDATORS[base](dict(schema))
    yes = Verdict(True, "answer JSON matches the schema")

    def check(text: str) -> Verdict:
        data, problem = _load_json(text)
        if problem is not None:
            return Verdict(False, problem)
        error = jsonschema.exceptions.best_match(validator.iter_errors(data))
        if error is None:
            return yes
        return Verdict(False, f"answer JSON does not match the schema at {error.json_path}: "
                              f"{error.message[:200]}")
    return check


_BUILTIN_TYPES = (
    RuleType("string_contains", _contains, ("value",), description="contains a literal string"),
    RuleType("string_not_contains", _not_contains, ("value",),
             description="does not contain a literal string"),
    RuleType("icontains", _icontains, ("value",), description="contains a string, any case"),
    RuleType("contains_any", _contains_any, ("values",), ("case_sensitive",),
             description="contains at least one of the strings"),
    RuleType("contains_all", _contains_all, ("values",), ("case_sensitive",),
             description="contains every one of the strings"),
    RuleType("starts_with", _starts_with, ("value",),
             description="starts with a string, leading whitespace ignored"),
    RuleType("equals", _equals, ("value",),
             description="equals a string, surrounding whitespace ignored"),
    RuleType("regex_match", _regex_match, ("pattern",), ("flags",),
             description="matches an RE2 regex somewhere"),
    RuleType("regex_not_match", _regex_not_match, ("pattern",), ("flags",),
             description="matches an RE2 regex nowhere"),
    RuleType("max_length", _length(longest=True), ("value",),
             description="at most N characters (code points, not bytes)"),
    RuleType("min_length", _length(longest=False), ("value",),
             description="at least N characters (code points, not bytes)"),
    RuleType("word_count", _word_count, (), ("min", "max"),
             description="whitespace-separated word count within min and/or max"),
    RuleType("not_empty", _not_empty, description="has something besides whitespace"),
    RuleType("is_json", _is_json, description="is JSON, or a single ```json fenced block of it"),
    RuleType("json_schema", _json_schema, ("schema",),
             description="its JSON satisfies a JSON Schema"),
)


@hookimpl
def register_rule_types(register: Callable[..., Any]) -> None:
    """The built-ins go through the same hook as any plugin, so plugins are first-class."""
    for rule_type in _BUILTIN_TYPES:
        register(rule_type)
