"""Import a promptfoo config's deterministic assertions as Amelio eval rules.

Teams arriving from promptfoo already wrote their checks in ``promptfooconfig.yaml``.
Every assertion with a deterministic Amelio equivalent becomes a rule; everything
else (``llm-rubric``, ``javascript``, templated values, …) is listed in
``unmapped`` with the reason, so nothing is dropped silently.

promptfoo assertions belong to one test input, while an Amelio rule applies to
every answer of a skill: review the imported rules before attaching them.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from amelio.errors import EvalRuleError
from amelio.evals.engine import parse_rules
from amelio.evals.rules import EvalRule

__all__ = ["PromptfooImport", "import_promptfoo"]

#: promptfoo type → (Amelio type, parameter that takes the assertion's value).
_STRING_TYPES = {
    "contains": ("string_contains", "value"),
    "icontains": ("icontains", "value"),
    "starts-with": ("starts_with", "value"),
    "equals": ("equals", "value"),
    "regex": ("regex_match", "pattern"),
}
#: promptfoo type → (Amelio type, case sensitive).
_LIST_TYPES = {
    "contains-any": ("contains_any", True),
    "icontains-any": ("contains_any", False),
    "contains-all": ("contains_all", True),
    "icontains-all": ("contains_all", False),
}
#: The seed's own negative types read better than ``negate: true``.
_NEGATIVE_TYPES = {"string_contains": "string_not_contains", "regex_match": "regex_not_match"}
_MODEL_GRADED = frozenset(
    {
        "llm-rubric",
        "model-graded-closedqa",
        "model-graded-factuality",
        "factuality",
        "similar",
        "answer-relevance",
        "context-faithfulness",
        "context-recall",
        "context-relevance",
        "g-eval",
        "select-best",
        "classifier",
        "moderation",
        "search-rubric",
        "conversation-relevance",
        "pi",
    }
)
#: Rule names: (positive, negated), ``{v}`` is the value shown.
_NAMES = {
    "string_contains": ("Contains {v}", "Does not contain {v}"),
    "icontains": ("Contains {v} in any case", "Does not contain {v} in any case"),
    "contains_any": ("Contains any of {v}", "Contains none of {v}"),
    "contains_all": ("Contains all of {v}", "Does not contain all of {v}"),
    "starts_with": ("Starts with {v}", "Does not start with {v}"),
    "equals": ("Equals {v}", "Does not equal {v}"),
    "regex_match": ("Matches /{v}/", "Does not match /{v}/"),
    "is_json": ("Is valid JSON", "Is not valid JSON"),
    "json_schema": ("Is JSON matching the schema", "Is not JSON matching the schema"),
}


@dataclass(frozen=True)
class PromptfooImport:
    """The rules that came over (ids ``pf-001``…) and one line per assertion that did not."""

    rules: tuple[EvalRule, ...]
    unmapped: tuple[str, ...]


def import_promptfoo(text: str, *, source: str) -> PromptfooImport:
    """Read a promptfooconfig.yaml: ``defaultTest.assert`` then each ``tests[*].assert``."""
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise EvalRuleError(f"invalid YAML{where}: {problem}", file=source) from None
    if not isinstance(config, Mapping):
        raise EvalRuleError(
            "a promptfoo config must be a YAML mapping with tests or defaultTest", file=source
        )
    unmapped: list[str] = []
    seen: set[str] = set()
    rules: list[EvalRule] = []
    for where, assertion in _assertions(config, unmapped):
        rule = _to_rule(assertion)
        if isinstance(rule, str):
            unmapped.append(f"{where}: {rule}")
            continue
        unnamed = {k: v for k, v in rule.items() if k != "name"}
        key = json.dumps(unnamed, sort_keys=True, default=str)
        if key in seen:
            continue
        try:
            (parsed,) = parse_rules([{"id": where, **rule}], source=None)
        except EvalRuleError as exc:
            reason = exc.message.removeprefix(f"rule '{where}', ")
            unmapped.append(f"{where}: type {assertion['type']!r} not imported, {reason}")
            continue
        seen.add(key)
        rules.append(dataclasses.replace(parsed, id=f"pf-{len(rules) + 1:03d}"))
    return PromptfooImport(tuple(rules), tuple(unmapped))


def _assertions(config: Mapping[str, Any], unmapped: list[str]) -> Iterator[tuple[str, Any]]:
    """Every assertion with its location, in file order; parts of the config that are
    not read are noted in ``unmapped`` where they occur."""
    blocks: list[tuple[str, Any]] = []
    if config.get("defaultTest") is not None:
        blocks.append(("defaultTest", config["defaultTest"]))
    tests = config.get("tests")
    if isinstance(tests, list):
        blocks.extend((f"tests[{i}]", test) for i, test in enumerate(tests))
    elif tests is not None:
        blocks.append(("tests", tests))
    for where, block in blocks:
        if not isinstance(block, Mapping):
            unmapped.append(f"{where}: {_external(block)}")
            continue
        asserts = block.get("assert")
        if asserts is not None and not isinstance(asserts, list):
            unmapped.append(f"{where}.assert: expected a list of assertions")
            continue
        for j, assertion in enumerate(asserts or ()):
            yield f"{where}.assert[{j}]", assertion
    if config.get("scenarios"):
        unmapped.append("scenarios: not imported; move their assertions into tests")


def _external(value: Any) -> str:
    if isinstance(value, str):
        return f"loaded from {value!r}, which is not read; inline the assertions"
    return "not a mapping of test fields"


def _to_rule(assertion: Any) -> dict[str, Any] | str:
    """The rule dict for one assertion, or the reason there is none."""
    if not isinstance(assertion, Mapping) or not isinstance(assertion.get("type"), str):
        return "not an assertion (expected a mapping with a type)"
    kind: str = assertion["type"]
    negated = kind.startswith("not-")
    base = kind.removeprefix("not-")
    value = assertion.get("value")
    if base in _MODEL_GRADED:
        return f"type {kind!r} has no deterministic equivalent"
    for key in ("transform", "contextTransform"):
        if key in assertion:
            return f"type {kind!r} uses {key}, which Amelio rules cannot apply"
    if isinstance(value, str) and value.startswith(("file://", "package:")):
        return f"type {kind!r} reads its value from {value!r}, which is not read; inline it"
    rule: dict[str, Any]
    if base in _STRING_TYPES:
        rule_type, param = _STRING_TYPES[base]
        if isinstance(value, int | float) and not isinstance(value, bool):
            value = str(value)  # YAML reads `value: 2024` as a number; promptfoo compares text
        if not isinstance(value, str):
            return f"type {kind!r} needs a text value here, not {type(value).__name__}"
        rule = {"type": rule_type, param: value}
    elif base in _LIST_TYPES:
        rule_type, exact = _LIST_TYPES[base]
        # promptfoo accepts a list or one comma-separated string.
        values = [v.strip() for v in value.split(",")] if isinstance(value, str) else value
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            return f"type {kind!r} needs a list of strings"
        rule = {"type": rule_type, "values": values}
        if not exact:
            rule["case_sensitive"] = False
    elif base == "is-json":
        if isinstance(value, Mapping):
            rule = {"type": "json_schema", "schema": value}
        elif value is None:
            rule = {"type": "is_json"}
        else:
            return f"type {kind!r} has a schema Amelio cannot read inline; give it as a mapping"
    else:
        return f"type {kind!r} has no equivalent Amelio rule type"
    if _templated(value):
        return f"type {kind!r} uses template variables, which differ per test"
    metric = assertion.get("metric")
    rule["name"] = metric if isinstance(metric, str) and metric.strip() else _name(rule, negated)
    if negated and rule["type"] in _NEGATIVE_TYPES:
        rule["type"] = _NEGATIVE_TYPES[rule["type"]]
    elif negated:
        rule["negate"] = True
    rule["severity"] = "warning"
    return rule


def _templated(value: Any) -> bool:
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, list):
        return any(_templated(v) for v in value)
    return False


def _name(rule: Mapping[str, Any], negated: bool) -> str:
    def clip(text: str) -> str:
        return text if len(text) <= 50 else text[:49] + "…"

    if "values" in rule:
        shown = ", ".join(repr(clip(v)) for v in rule["values"][:3])
        shown += " …" if len(rule["values"]) > 3 else ""
    elif "pattern" in rule:
        shown = clip(rule["pattern"])
    else:
        shown = repr(clip(rule.get("value", "")))
    return _NAMES[rule["type"]][negated].format(v=shown)
