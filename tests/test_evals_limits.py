"""The eval engine's resource limits: costly regexes, quadratic schemas, dangling refs."""

from __future__ import annotations

import json

import pytest

from amelio.errors import EvalRuleError
from amelio.evals.engine import evaluate, parse_rules
from amelio.evals.rules import MAX_RULES, REGEX_MAX_PROGRAM


def rule(**fields: object) -> dict[str, object]:
    return {"id": "r1", "name": "r", "severity": "warning", **fields}


def test_regex_over_the_program_limit_is_refused_at_load() -> None:
    with pytest.raises(EvalRuleError, match="too complex") as info:
        parse_rules([rule(type="regex_match", pattern=r"[\pL\pN]{200}x")])
    assert info.value.field == "pattern" and info.value.rule_id == "r1"
    assert REGEX_MAX_PROGRAM < 268_405


def test_costly_regex_on_a_long_text_is_an_error_result_not_a_hang() -> None:
    [check] = parse_rules([rule(type="regex_match", pattern=r"[^\n]{240}x")])
    report = evaluate("é" * 300_000, [check])
    [result] = report.results
    assert result.error and not result.passed
    assert "too complex for a text of" in result.detail
    assert evaluate("é" * 100 + "x", [check]).results[0].error is False


def test_unique_items_is_linear() -> None:
    [check] = parse_rules([rule(type="json_schema", schema={"type": "array", "uniqueItems": True})])
    items = [{"n": i, "tags": ["a", "b"]} for i in range(5_000)]
    text = json.dumps(items)
    # A budget that a linear walk fits in (one unit per item, plus parsing) and a
    # pairwise comparison (12.5 million pairs) would pass a hundred times over.
    budget = len(items) + len(text) // 100 + 100
    assert evaluate(text, [check], work_budget=budget).success
    assert not evaluate(json.dumps([*items, {"tags": ["a", "b"], "n": 7}]), [check]).success
    assert not evaluate("[1, 1.0]", [check]).success
    assert evaluate("[1, true]", [check]).success


def test_refs_must_resolve_at_load() -> None:
    good = {
        "$defs": {"v": {"enum": ["approve", "reject"]}},
        "type": "object",
        "properties": {"verdict": {"$ref": "#/$defs/v"}},
    }
    [check] = parse_rules([rule(type="json_schema", schema=good)])
    assert evaluate('{"verdict": "approve"}', [check]).success
    assert not evaluate('{"verdict": "maybe"}', [check]).success
    for ref in ("#/$defs/missing", "https://example.com/schema.json"):
        with pytest.raises(EvalRuleError, match="does not resolve") as info:
            parse_rules([rule(type="json_schema", schema={"$ref": ref})])
        assert info.value.field == "schema"


def test_too_many_rules() -> None:
    many = [rule(id=f"r{i}", type="not_empty") for i in range(MAX_RULES + 1)]
    with pytest.raises(EvalRuleError, match=f"over the limit of {MAX_RULES}"):
        parse_rules(many)


def test_duplicate_json_keys_are_refused() -> None:
    from amelio.evals.engine import parse_eval_file

    text = '{"version": 1, "rules": [{"id": "a", "type": "max_length", "value": 5, "value": 500}]}'
    with pytest.raises(EvalRuleError, match="duplicate key 'value'") as info:
        parse_eval_file(text, source="x.evals.json")
    assert info.value.field == "value"
