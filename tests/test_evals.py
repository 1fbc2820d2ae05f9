"""The binary eval engine: rule types at their boundaries, load errors, plugins, footnotes."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amelio.errors import EvalRuleError, InputTooLarge, InvalidInput
from amelio.evals.engine import (
    append_footnotes,
    evaluate,
    parse_eval_file,
    parse_rules,
    render_footnotes,
    rule_types,
)
from amelio.evals.rules import EvalReport, EvalResult, EvalRule, RuleParamError, RuleType, Verdict
from amelio.hookspecs import hookimpl
from amelio.plugins import get_plugin_manager

SEED_FILE = """{
  "version": 1,
  "skill": "code-review",
  "rules": [
    { "id": "cr-001", "name": "Must return JSON verdict", "type": "string_contains",
      "value": "\\"verdict\\"", "severity": "warning" },
    { "id": "cr-002", "name": "No console.log debug", "type": "regex_not_match",
      "pattern": "console\\\\.log\\\\(", "severity": "warning" }
  ]
}"""

BUILTIN_TYPES = {
    "string_contains",
    "string_not_contains",
    "regex_match",
    "regex_not_match",
    "max_length",
    "min_length",
    "icontains",
    "contains_any",
    "contains_all",
    "starts_with",
    "equals",
    "is_json",
    "json_schema",
    "word_count",
    "not_empty",
}

ONE_OF_EACH: list[dict[str, Any]] = [
    {"id": "a", "name": "A", "type": "string_contains", "value": "x", "severity": "warning"},
    {"id": "b", "name": "B", "type": "string_not_contains", "value": "x", "severity": "info"},
    {
        "id": "c",
        "name": "C",
        "type": "regex_match",
        "pattern": "^a",
        "flags": "im",
        "severity": "warning",
    },
    {"id": "d", "name": "D", "type": "regex_not_match", "pattern": "b", "severity": "warning"},
    {"id": "e", "name": "E", "type": "max_length", "value": 10, "severity": "warning"},
    {"id": "f", "name": "F", "type": "min_length", "value": 0, "severity": "info"},
    {"id": "g", "name": "G", "type": "icontains", "value": "É", "severity": "warning"},
    {
        "id": "h",
        "name": "H",
        "type": "contains_any",
        "values": ["x", "y"],
        "case_sensitive": False,
        "severity": "warning",
    },
    {"id": "i", "name": "I", "type": "contains_all", "values": ["x"], "severity": "warning"},
    {
        "id": "j",
        "name": "J",
        "type": "starts_with",
        "value": "Hi",
        "negate": True,
        "severity": "warning",
    },
    {"id": "k", "name": "K", "type": "equals", "value": "", "severity": "warning"},
    {"id": "l", "name": "L", "type": "is_json", "severity": "warning"},
    {
        "id": "m",
        "name": "M",
        "type": "json_schema",
        "schema": {"type": "object"},
        "severity": "warning",
    },
    {"id": "n", "name": "N", "type": "word_count", "min": 1, "max": 3, "severity": "warning"},
    {"id": "o", "name": "O", "type": "not_empty", "severity": "info"},
]


def one(**fields: Any) -> EvalRule:
    return parse_rules([{"id": "r1", **fields}], source="t.evals.json")[0]


def run(text: str, **fields: Any) -> EvalResult:
    return evaluate(text, [one(**fields)]).results[0]


def passes(text: str, **fields: Any) -> bool:
    return run(text, **fields).passed


def load_error(**fields: Any) -> EvalRuleError:
    with pytest.raises(EvalRuleError) as info:
        one(**fields)
    return info.value


# --------------------------------------------------------------------------- file format


def test_seed_file_parses_and_round_trips_exactly() -> None:
    spec = parse_eval_file(SEED_FILE, source="code-review.evals.json")
    assert spec.version == 1
    assert spec.skill == "code-review"
    assert [r.id for r in spec.rules] == ["cr-001", "cr-002"]
    assert spec.rules[0].params == {"value": '"verdict"'}
    assert spec.to_dict() == json.loads(SEED_FILE)
    report = evaluate('{"verdict": "ok"}\nconsole.log(x)', spec.rules)
    assert [r.passed for r in report.results] == [True, False]


def test_every_complete_rule_round_trips_through_to_dict() -> None:
    rules = parse_rules(ONE_OF_EACH)
    assert [r.to_dict() for r in rules] == ONE_OF_EACH
    assert parse_rules([r.to_dict() for r in rules]) == rules
    assert {r.type for r in rules} == BUILTIN_TYPES


def test_name_defaults_to_id_and_severity_to_warning() -> None:
    rule = parse_rules([{"id": "x-1", "type": "not_empty"}])[0]
    assert (rule.name, rule.severity) == ("x-1", "warning")
    assert rule.to_dict() == {
        "id": "x-1",
        "name": "x-1",
        "type": "not_empty",
        "severity": "warning",
    }


def test_rules_are_immutable_and_independent_of_their_input() -> None:
    raw: dict[str, Any] = {"id": "r", "type": "contains_all", "values": ["a", "b"]}
    rule = parse_rules([raw])[0]
    raw["values"].append("c")
    assert rule.params["values"] == ["a", "b"]
    with pytest.raises(TypeError):
        rule.params["values"] = []  # type: ignore[index]
    assert hash(rule) == hash(parse_rules([{**raw, "values": ["a", "b"]}])[0])


def test_empty_rule_list_is_valid() -> None:
    spec = parse_eval_file('{"version": 1, "rules": []}', source="f.json")
    assert spec.rules == ()
    assert spec.skill is None
    assert spec.to_dict() == {"version": 1, "rules": []}
    assert evaluate("anything", spec.rules).success


def test_builtin_rule_types_are_registered_through_the_hook() -> None:
    types = rule_types()
    assert set(types) >= BUILTIN_TYPES
    assert all(isinstance(t, RuleType) and t.name == name for name, t in types.items())


# --------------------------------------------------------------------------- boundaries


def test_max_length_boundary_and_detail() -> None:
    assert passes("a" * 2000, type="max_length", value=2000)
    result = run("a" * 2431, type="max_length", value=2000)
    assert not result.passed
    assert result.detail == "answer is 2,431 chars, over the maximum of 2,000"
    assert passes("", type="max_length", value=0)
    assert not passes("a", type="max_length", value=0)


def test_min_length_boundary_and_detail() -> None:
    assert passes("a" * 200, type="min_length", value=200)
    result = run("a" * 199, type="min_length", value=200)
    assert not result.passed
    assert result.detail == "answer is 199 chars, under the minimum of 200"


def test_length_counts_characters_not_bytes() -> None:
    text = "é😀中a"  # 4 characters, 10 bytes in UTF-8
    assert len(text.encode()) == 10
    assert passes(text, type="max_length", value=4)
    assert not passes(text, type="max_length", value=3)
    assert passes(text, type="min_length", value=4)
    assert not passes(text, type="min_length", value=5)


def test_string_contains_and_not_contains() -> None:
    assert passes('{"verdict": 1}', type="string_contains", value='"verdict"')
    failed = run("Verdict", type="string_contains", value="verdict")
    assert not failed.passed
    assert failed.detail == "answer does not contain 'verdict'"
    assert passes("git push", type="string_not_contains", value="--force")
    failed = run("git push --force", type="string_not_contains", value="--force")
    assert not failed.passed
    assert failed.detail == "answer contains '--force' at character 10"


def test_icontains_uses_casefold() -> None:
    assert passes("Die STRASSE ist lang", type="icontains", value="straße")
    assert passes("ÉCOLE", type="icontains", value="école")
    assert not passes("ecole", type="icontains", value="école")


def test_contains_any() -> None:
    assert passes("we ship Friday", type="contains_any", values=["Monday", "Friday"])
    failed = run("we ship friday", type="contains_any", values=["Monday", "Friday"])
    assert not failed.passed
    assert failed.detail == "answer contains none of 'Monday', 'Friday'"
    assert passes(
        "we ship friday", type="contains_any", values=["Monday", "Friday"], case_sensitive=False
    )


def test_contains_all_names_what_is_missing() -> None:
    assert passes("disk ram cpu", type="contains_all", values=["disk", "ram", "cpu"])
    failed = run("disk only", type="contains_all", values=["disk", "ram", "cpu"])
    assert not failed.passed
    assert failed.detail == "answer is missing 'ram', 'cpu'"
    assert passes("DISK RAM", type="contains_all", values=["disk", "ram"], case_sensitive=False)
    assert not passes("DISK RAM", type="contains_all", values=["disk", "ram"])


def test_starts_with_ignores_leading_whitespace_only() -> None:
    assert passes("\n  Bonjour, voici", type="starts_with", value="Bonjour")
    failed = run("Hello Bonjour", type="starts_with", value="Bonjour")
    assert not failed.passed
    assert failed.detail == "answer starts with 'Hello B', not 'Bonjour'"
    assert not passes("bonjour", type="starts_with", value="Bonjour")


def test_equals_ignores_surrounding_whitespace_on_both_sides() -> None:
    assert passes("  OK\n", type="equals", value="OK ")
    failed = run("OK then", type="equals", value="OK")
    assert not failed.passed
    assert failed.detail == (
        "answer (7 chars) differs from the expected text (2 chars) from character 3"
    )
    assert not passes("ok", type="equals", value="OK")
    assert passes(" \n", type="equals", value="")


@pytest.mark.parametrize(
    ("text", "bounds", "passed"),
    [
        ("one two three", {"min": 3}, True),
        ("one two", {"min": 3}, False),
        ("one two three", {"max": 3}, True),
        ("one two three four", {"max": 3}, False),
        ("  one\ttwo\n\nthree  ", {"min": 3, "max": 3}, True),
        ("", {"max": 0}, True),
        ("", {"min": 1}, False),
    ],
)
def test_word_count_bounds(text: str, bounds: dict[str, int], passed: bool) -> None:
    assert passes(text, type="word_count", **bounds) is passed


def test_word_count_detail() -> None:
    assert run("a b", type="word_count", min=3).detail == (
        "answer has 2 words, under the minimum of 3"
    )
    assert run("a b c d", type="word_count", max=3).detail == (
        "answer has 4 words, over the maximum of 3"
    )


@pytest.mark.parametrize(
    ("text", "passed"), [("x", True), (" . ", True), ("", False), (" \n\t ", False)]
)
def test_not_empty(text: str, passed: bool) -> None:
    assert passes(text, type="not_empty") is passed


@pytest.mark.parametrize(
    ("text", "passed"),
    [
        ('{"a": 1}', True),
        ("  [1, 2]\n", True),
        ('```json\n{"a": 1}\n```', True),
        ('```\n{"a": 1}\n```', True),
        ('Here you go:\n```json\n{"a": 1}\n```', False),
        ('```python\n{"a": 1}\n```', False),
        ('```json\n{"a": 1}\n```\n```json\n{"b": 2}\n```', False),
        ("{'a': 1}", False),
        ('{"a": NaN}', False),
        ("[" * 100_000, False),
        ("", False),
    ],
)
def test_is_json(text: str, passed: bool) -> None:
    result = run(text, type="is_json")
    assert result.passed is passed
    assert not result.error
    if not passed:
        assert result.detail.startswith("answer is not valid JSON")


def test_regex_match_and_flags() -> None:
    assert passes("Disk: 40%", type="regex_match", pattern=r"(?:disk|ram|cpu):\s*\d+%", flags="i")
    assert not passes("Disk: 40%", type="regex_match", pattern=r"disk:")
    assert passes("intro\nTotal: 3", type="regex_match", pattern="^Total", flags="m")
    assert not passes("intro\nTotal: 3", type="regex_match", pattern="^Total")
    assert passes("a\nb", type="regex_match", pattern="a.b", flags="s")
    assert not passes("a\nb", type="regex_match", pattern="a.b")
    assert passes("ÉTÉ", type="regex_match", pattern="^été$", flags="i")
    assert passes("é", type="regex_match", pattern="^.$")  # one character, two bytes


def test_regex_not_match_reports_position_but_not_the_secret() -> None:
    result = run("clé: é password=hunter2", type="regex_not_match", pattern=r"password=\S+")
    assert not result.passed
    assert "hunter2" not in result.detail
    assert result.detail == r"answer matches /password=\S+/ at character 8"
    assert passes("no secrets here", type="regex_not_match", pattern=r"password=\S+")


def test_hostile_regex_cannot_hang() -> None:
    # On a backtracking engine these take longer than the universe's age, so a
    # regression hangs the suite (CI's time limit fails it) instead of passing.
    text = "a" * 50 + "b"
    matched = run(text, type="regex_match", pattern="(a+)+$")
    not_matched = run("a" * 100_000 + "b", type="regex_not_match", pattern="(a|aa)+$")
    assert not matched.passed
    assert not_matched.passed


def test_json_schema() -> None:
    schema = {
        "type": "object",
        "required": ["verdict"],
        "properties": {"verdict": {"enum": ["approve", "reject"]}, "score": {"type": "integer"}},
    }
    assert passes('{"verdict": "approve", "score": 3}', type="json_schema", schema=schema)
    assert passes('```json\n{"verdict": "reject"}\n```', type="json_schema", schema=schema)
    failed = run('{"verdict": "maybe"}', type="json_schema", schema=schema)
    assert not failed.passed
    assert failed.detail.startswith("answer JSON does not match the schema at $.verdict:")
    failed = run("not json", type="json_schema", schema=schema)
    assert failed.detail.startswith("answer is not valid JSON")


def test_json_schema_pattern_runs_on_re2() -> None:
    schema = {"type": "string", "pattern": "^(a+)+$"}
    # 40 characters: Python's re would need days here, so a regression hangs the suite.
    result = run(json.dumps("a" * 40 + "!"), type="json_schema", schema=schema)
    assert not result.passed
    assert passes('"aaaa"', type="json_schema", schema=schema)


def test_json_schema_honours_declared_draft() -> None:
    draft4 = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "type": "number",
        "maximum": 5,
        "exclusiveMaximum": True,
    }
    assert not passes("5", type="json_schema", schema=draft4)
    assert passes("4.5", type="json_schema", schema=draft4)


# --------------------------------------------------------------------------- negation


def test_negate_inverts_and_still_explains() -> None:
    failed = run("Sorry, I cannot", type="starts_with", value="Sorry", negate=True)
    assert not failed.passed
    assert failed.detail == "answer starts with 'Sorry'"
    assert passes("Sure", type="starts_with", value="Sorry", negate=True)
    assert not passes("{}", type="is_json", negate=True)
    assert one(type="is_json", negate=True).to_dict()["negate"] is True


# --------------------------------------------------------------------------- properties

texts = st.text(max_size=200)
needles = st.text(min_size=1, max_size=5)


@settings(max_examples=200, deadline=None, database=None)
@given(text=texts, value=needles)
def test_contains_property(text: str, value: str) -> None:
    rules = parse_rules(
        [
            {"id": "in", "type": "string_contains", "value": value},
            {"id": "out", "type": "string_not_contains", "value": value},
            {"id": "i", "type": "icontains", "value": value},
        ]
    )
    inside, outside, folded = evaluate(text, rules).results
    assert inside.passed is (value in text)
    assert outside.passed is (value not in text)
    assert folded.passed is (value.casefold() in text.casefold())


@settings(max_examples=200, deadline=None, database=None)
@given(text=texts, limit=st.integers(min_value=0, max_value=250))
def test_length_property(text: str, limit: int) -> None:
    rules = parse_rules(
        [
            {"id": "max", "type": "max_length", "value": limit},
            {"id": "min", "type": "min_length", "value": limit},
        ]
    )
    longest, shortest = evaluate(text, rules).results
    assert longest.passed is (len(text) <= limit)
    assert shortest.passed is (len(text) >= limit)
    assert (longest.detail == "") is longest.passed


@settings(max_examples=200, deadline=None, database=None)
@given(
    words=st.lists(st.text(alphabet="abcé😀", min_size=1), max_size=30),
    sep=st.sampled_from([" ", "\n", "\t ", "  "]),
    low=st.integers(0, 30),
    span=st.integers(0, 10),
)
def test_word_count_property(words: list[str], sep: str, low: int, span: int) -> None:
    text = sep.join(words)
    rule = one(type="word_count", min=low, max=low + span)
    assert evaluate(text, [rule]).results[0].passed is (low <= len(text.split()) <= low + span)


@settings(max_examples=100, deadline=None, database=None)
@given(text=texts, values=st.lists(needles, min_size=1, max_size=4))
def test_contains_any_all_property(text: str, values: list[str]) -> None:
    rules = parse_rules(
        [
            {"id": "any", "type": "contains_any", "values": values},
            {"id": "all", "type": "contains_all", "values": values},
        ]
    )
    anyone, every = evaluate(text, rules).results
    assert anyone.passed is any(v in text for v in values)
    assert every.passed is all(v in text for v in values)


@settings(max_examples=100, deadline=None, database=None)
@given(value=st.text(max_size=30), pad=st.text(alphabet=" \n\t", max_size=3))
def test_equals_property(value: str, pad: str) -> None:
    assert passes(pad + value + pad, type="equals", value=value)
    assert passes(value + "x", type="equals", value=value) is (
        (value + "x").strip() == value.strip()
    )


# --------------------------------------------------------------------------- load errors


@pytest.mark.parametrize(
    ("fields", "field", "fragment"),
    [
        ({"type": "string_containz", "value": "x"}, "type", "unknown rule type"),
        ({"value": "x"}, "type", "missing"),
        ({"type": "string_contains"}, "value", "missing"),
        ({"type": "regex_match"}, "pattern", "missing"),
        ({"type": "string_contains", "value": 3}, "value", "must be a string"),
        ({"type": "string_contains", "value": ""}, "value", "must not be empty"),
        ({"type": "max_length", "value": "2000"}, "value", "whole number"),
        ({"type": "max_length", "value": 20.5}, "value", "whole number"),
        ({"type": "max_length", "value": True}, "value", "whole number"),
        ({"type": "min_length", "value": -1}, "value", "0 or more"),
        ({"type": "regex_match", "pattern": "(unclosed"}, "pattern", "RE2"),
        ({"type": "regex_match", "pattern": "a", "flags": "x"}, "flags", "i, m, s"),
        ({"type": "regex_match", "pattern": "a", "flags": "ii"}, "flags", "each once"),
        ({"type": "string_contains", "valeu": "x", "value": "x"}, "valeu", "unknown field"),
        ({"type": "not_empty", "value": "x"}, "value", "unknown field"),
        ({"type": "not_empty", "severity": "error"}, "severity", "'warning' or 'info'"),
        ({"type": "not_empty", "name": 7}, "name", "non-empty string"),
        ({"type": "not_empty", "negate": "yes"}, "negate", "true or false"),
        ({"type": "word_count"}, "min", "min, max or both"),
        ({"type": "word_count", "min": 5, "max": 2}, "max", "at least min"),
        ({"type": "contains_any", "values": []}, "values", "non-empty array"),
        ({"type": "contains_any", "values": "a,b"}, "values", "non-empty array"),
        ({"type": "contains_all", "values": ["a", 2]}, "values", "item 1"),
        (
            {"type": "contains_all", "values": ["a"], "case_sensitive": "no"},
            "case_sensitive",
            "true or false",
        ),
        ({"type": "json_schema", "schema": "object"}, "schema", "JSON Schema object"),
        ({"type": "json_schema", "schema": {"type": "nope"}}, "schema", "not a valid JSON Schema"),
        (
            {"type": "json_schema", "schema": {"$schema": "https://example.com/mine"}},
            "schema",
            "unknown $schema",
        ),
        (
            {"type": "json_schema", "schema": {"patternProperties": {"^a": {}}}},
            "schema",
            "patternProperties is not supported",
        ),
        (
            {"type": "json_schema", "schema": {"properties": {"a": {"pattern": "(?=x)"}}}},
            "schema",
            "RE2",
        ),
    ],
)
def test_bad_rule_names_file_rule_and_field(
    fields: dict[str, Any], field: str, fragment: str
) -> None:
    error = load_error(**fields)
    assert isinstance(error, InvalidInput)
    assert (error.file, error.rule_id, error.field) == ("t.evals.json", "r1", field)
    message = str(error)
    assert message.startswith(f"t.evals.json, rule 'r1', field '{field}': ")
    assert fragment in message
    assert error.to_dict()["details"] == {"file": "t.evals.json", "rule_id": "r1", "field": field}


@pytest.mark.parametrize(
    "pattern",
    [r"(a)\1", r"foo(?=bar)", r"foo(?!bar)", r"(?<=x)y", r"(?<!x)y"],
)
def test_backtracking_only_regex_fails_at_load(pattern: str) -> None:
    error = load_error(type="regex_not_match", pattern=pattern)
    assert error.field == "pattern"
    assert "RE2 syntax" in str(error)
    assert "backreferences" in str(error)


def test_huge_regex_is_refused_not_compiled_into_memory() -> None:
    error = load_error(type="regex_match", pattern=r"[\p{L}]{1000}")
    assert error.field == "pattern"
    assert "too large" in str(error)
    error = load_error(type="regex_match", pattern="a" * 10_001)
    assert "over the limit of 10,000" in str(error)


def test_missing_id_and_non_object_rules_name_their_position() -> None:
    with pytest.raises(EvalRuleError) as info:
        parse_rules([{"id": "ok", "type": "not_empty"}, {"type": "not_empty"}], source="f.json")
    assert info.value.field == "id"
    assert "rules[1]" in str(info.value)
    with pytest.raises(EvalRuleError, match=r"rules\[0\] must be an object"):
        parse_rules(["string_contains"], source="f.json")
    with pytest.raises(EvalRuleError, match="must be an array") as info:
        parse_rules({"id": "x"}, source="f.json")
    assert info.value.field == "rules"


def test_duplicate_ids_are_refused() -> None:
    with pytest.raises(EvalRuleError) as info:
        parse_rules(
            [
                {"id": "a", "type": "not_empty"},
                {"id": "b", "type": "not_empty"},
                {"id": "a", "type": "is_json"},
            ],
            source="f.json",
        )
    assert (info.value.rule_id, info.value.field) == ("a", "id")
    assert "rules[0] and rules[2]" in str(info.value)


def test_invalid_json_file_names_line_and_column() -> None:
    with pytest.raises(EvalRuleError) as info:
        parse_eval_file('{\n  "version": 1,\n  "rules": [,]\n}', source="skills/x/x.evals.json")
    assert str(info.value).startswith("skills/x/x.evals.json: invalid JSON at line 3, column 13")
    assert info.value.details["line"] == 3


@pytest.mark.parametrize(
    ("text", "field", "fragment"),
    [
        ('{"version": 2, "rules": []}', "version", "unsupported version 2"),
        ('{"version": "1", "rules": []}', "version", "unsupported version '1'"),
        ('{"version": true, "rules": []}', "version", "unsupported version True"),
        ('{"rules": []}', "version", 'add "version": 1'),
        ('{"version": 1}', "rules", "needs a rules array"),
        ('{"version": 1, "rules": {}}', "rules", "must be an array"),
        ('{"version": 1, "rules": [], "skil": "x"}', "skil", "unknown field"),
        ('{"version": 1, "rules": [], "skill": 3}', "skill", "as a string"),
        ('[{"id": "x"}]', None, "must be a JSON object"),
    ],
)
def test_bad_eval_files(text: str, field: str | None, fragment: str) -> None:
    with pytest.raises(EvalRuleError) as info:
        parse_eval_file(text, source="e.json")
    assert info.value.file == "e.json"
    assert info.value.field == field
    assert fragment in str(info.value)


def test_rule_errors_inside_a_file_name_the_file() -> None:
    text = '{"version": 1, "rules": [{"id": "len", "type": "max_length", "value": -5}]}'
    with pytest.raises(EvalRuleError) as info:
        parse_eval_file(text, source="skills/a/a.evals.json")
    assert str(info.value) == (
        "skills/a/a.evals.json, rule 'len', field 'value': must be 0 or more, not -5"
    )


# --------------------------------------------------------------------------- engine


def test_input_too_large() -> None:
    rules = parse_rules([{"id": "r", "type": "not_empty"}])
    assert evaluate("a" * 100, rules, max_chars=100).success
    with pytest.raises(InputTooLarge) as info:
        evaluate("a" * 101, rules, max_chars=100)
    assert "101 chars" in str(info.value)
    assert "limit of 100" in str(info.value)
    assert info.value.http_status == 413
    with pytest.raises(InputTooLarge, match="1,000,001"):
        evaluate("a" * 1_000_001, rules)


def test_report_success_failed_and_dict() -> None:
    rules = parse_rules(
        [
            {"id": "w", "name": "Has verdict", "type": "string_contains", "value": "verdict"},
            {"id": "i", "name": "Short", "type": "max_length", "value": 5, "severity": "info"},
            {"id": "p", "type": "not_empty"},
        ]
    )
    info_only = evaluate("verdict: yes", rules)
    assert info_only.success
    assert [r.rule_id for r in info_only.failed] == ["i"]
    assert info_only.passed_count == 2
    warned = evaluate("nothing to see", rules)
    assert not warned.success
    assert warned.passed_count == 1
    data = warned.to_dict()
    assert data["success"] is False
    assert data["results"][0] == {
        "ruleId": "w",
        "name": "Has verdict",
        "type": "string_contains",
        "severity": "warning",
        "passed": False,
        "detail": "answer does not contain 'verdict'",
        "error": False,
    }
    assert data["results"][2]["detail"] == ""


def test_footnotes_render_warnings_then_infos() -> None:
    rules = parse_rules(
        [
            {"id": "1", "name": "Concise", "type": "max_length", "value": 3, "severity": "info"},
            {
                "id": "2",
                "name": "Must return JSON verdict",
                "type": "string_contains",
                "value": "verdict",
            },
            {"id": "3", "name": "Non-empty", "type": "not_empty"},
        ]
    )
    report = evaluate("hello", rules)
    assert render_footnotes(report) == ["⚠️ Must return JSON verdict", "ℹ️ Concise"]
    assert append_footnotes("hello\n", report) == ("hello\n\n⚠️ Must return JSON verdict\nℹ️ Concise")


def test_footnotes_leave_a_clean_answer_alone() -> None:
    report = evaluate("fine\n", parse_rules([{"id": "1", "type": "not_empty"}]))
    assert render_footnotes(report) == []
    assert append_footnotes("fine\n", report) == "fine\n"
    assert append_footnotes("x", EvalReport(())) == "x"


# --------------------------------------------------------------------------- plugins


def _ends_with(params: Mapping[str, Any]) -> Callable[[str], Verdict]:
    suffix = params["suffix"]
    if not isinstance(suffix, str):
        raise RuleParamError("suffix", "must be a string")

    def check(text: str) -> Verdict:
        if text == "boom":
            raise RuntimeError("kaboom")
        ok = text.rstrip().endswith(suffix)
        return Verdict(ok, f"answer {'ends' if ok else 'does not end'} with {suffix!r}")

    return check


class EndsWithPlugin:
    """A third-party package's plugin object, registered the way an entry point would be."""

    @hookimpl
    def register_rule_types(self, register: Callable[..., Any]) -> None:
        register(RuleType("ends_with", _ends_with, ("suffix",)))
        register(RuleType("string_contains", _ends_with, ("suffix",)))  # cannot hijack
        register("not a rule type")


class BrokenPlugin:
    @hookimpl
    def register_rule_types(self, register: Callable[..., Any]) -> None:
        raise RuntimeError("plugin bug")


@pytest.fixture
def plugins() -> Iterator[None]:
    pm = get_plugin_manager()
    added = [EndsWithPlugin(), BrokenPlugin()]
    for plugin in added:
        pm.register(plugin)
    try:
        yield
    finally:
        for plugin in added:
            pm.unregister(plugin)


@pytest.mark.usefixtures("plugins")
def test_custom_rule_type_from_a_plugin() -> None:
    assert "ends_with" in rule_types()
    rules = parse_rules(
        [
            {"id": "sig", "name": "Signed", "type": "ends_with", "suffix": "— Amelio"},
            {"id": "neg", "type": "ends_with", "suffix": "!", "negate": True, "severity": "info"},
            {"id": "lit", "type": "string_contains", "value": "Merci"},
        ]
    )
    report = evaluate("Merci.\n— Amelio\n", rules)
    assert [r.passed for r in report.results] == [True, True, True]
    report = evaluate("Merci!", rules)
    assert [r.detail for r in report.failed] == [
        "answer does not end with '— Amelio'",
        "answer ends with '!'",
    ]
    error = load_error(type="ends_with", suffix=3)
    assert (error.rule_id, error.field) == ("r1", "suffix")
    error = load_error(type="ends_with")
    assert error.field == "suffix"


@pytest.mark.usefixtures("plugins")
def test_a_check_that_raises_is_an_errored_failure() -> None:
    rules = parse_rules(
        [
            {"id": "sig", "type": "ends_with", "suffix": "x", "severity": "info"},
            {"id": "ne", "type": "not_empty"},
        ]
    )
    report = evaluate("boom", rules)
    broken, fine = report.results
    assert (broken.passed, broken.error) == (False, True)
    assert "kaboom" in broken.detail
    assert (fine.passed, fine.error) == (True, False)
    assert report.success  # an info rule, even errored, does not fail the interaction


def test_plugin_types_disappear_with_the_plugin() -> None:
    with pytest.raises(EvalRuleError, match="unknown rule type 'ends_with'"):
        parse_rules([{"id": "x", "type": "ends_with", "suffix": "."}])
