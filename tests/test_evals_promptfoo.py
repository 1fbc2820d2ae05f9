"""Importing promptfoo assertions as eval rules."""

from __future__ import annotations

import pytest

from amelio.errors import EvalRuleError
from amelio.evals.engine import evaluate, parse_rules
from amelio.evals.promptfoo import import_promptfoo

CONFIG = r"""
description: Support assistant
prompts:
  - file://prompts/support.txt
providers:
  - openai:gpt-4o-mini

defaultTest:
  assert:
    - type: not-contains
      value: As an AI language model
    - type: regex
      value: "ticket #\\d+"
      metric: Cites the ticket

tests:
  - vars:
      question: How do I reset my password?
    assert:
      - type: icontains
        value: password
      - type: llm-rubric
        value: Explains the reset steps politely
      - type: contains-any
        value: [Settings, Paramètres]
        metric: Points to settings
  - vars:
      question: Can I get a refund?
    assert:
      - type: is-json
        value:
          type: object
          required: [verdict]
          properties:
            verdict: {enum: [approve, reject]}
      - type: not-starts-with
        value: Sorry
      - type: icontains-all
        value: refund, 14 days
      - type: not-contains
        value: As an AI language model
        metric: Same check, other name
      - type: regex
        value: "(?<=Total: )\\d+"
      - type: contains
        value: "{{question}}"
      - type: javascript
        value: output.length < 500
      - type: equals
        value: 42
      - type: not-is-json
      - type: contains
        value: foo
        transform: output.toUpperCase()
      - type: not-regex
        value: "password=\\S+"
      - type: contains-all
        value: [disk, ram]
      - type: is-json
        value: file://schemas/verdict.json
  - file://more_tests.yaml
"""


def test_realistic_config_maps_rules_in_order() -> None:
    result = import_promptfoo(CONFIG, source="promptfooconfig.yaml")
    assert [r.to_dict() for r in result.rules] == [
        {
            "id": "pf-001",
            "name": "Does not contain 'As an AI language model'",
            "type": "string_not_contains",
            "value": "As an AI language model",
            "severity": "warning",
        },
        {
            "id": "pf-002",
            "name": "Cites the ticket",
            "type": "regex_match",
            "pattern": r"ticket #\d+",
            "severity": "warning",
        },
        {
            "id": "pf-003",
            "name": "Contains 'password' in any case",
            "type": "icontains",
            "value": "password",
            "severity": "warning",
        },
        {
            "id": "pf-004",
            "name": "Points to settings",
            "type": "contains_any",
            "values": ["Settings", "Paramètres"],
            "severity": "warning",
        },
        {
            "id": "pf-005",
            "name": "Is JSON matching the schema",
            "type": "json_schema",
            "schema": {
                "type": "object",
                "required": ["verdict"],
                "properties": {"verdict": {"enum": ["approve", "reject"]}},
            },
            "severity": "warning",
        },
        {
            "id": "pf-006",
            "name": "Does not start with 'Sorry'",
            "type": "starts_with",
            "value": "Sorry",
            "negate": True,
            "severity": "warning",
        },
        {
            "id": "pf-007",
            "name": "Contains all of 'refund', '14 days'",
            "type": "contains_all",
            "values": ["refund", "14 days"],
            "case_sensitive": False,
            "severity": "warning",
        },
        {
            "id": "pf-008",
            "name": "Equals '42'",
            "type": "equals",
            "value": "42",
            "severity": "warning",
        },
        {
            "id": "pf-009",
            "name": "Is not valid JSON",
            "type": "is_json",
            "negate": True,
            "severity": "warning",
        },
        {
            "id": "pf-010",
            "name": r"Does not match /password=\S+/",
            "type": "regex_not_match",
            "pattern": r"password=\S+",
            "severity": "warning",
        },
        {
            "id": "pf-011",
            "name": "Contains all of 'disk', 'ram'",
            "type": "contains_all",
            "values": ["disk", "ram"],
            "severity": "warning",
        },
    ]


def test_unmapped_assertions_are_listed_with_a_reason() -> None:
    result = import_promptfoo(CONFIG, source="promptfooconfig.yaml")
    lookbehind = result.unmapped[1]
    assert lookbehind.startswith(
        "tests[1].assert[4]: type 'regex' not imported, field 'pattern': RE2 cannot compile it"
    )
    assert "no lookaround" in lookbehind
    assert result.unmapped[:1] + result.unmapped[2:] == (
        "tests[0].assert[1]: type 'llm-rubric' has no deterministic equivalent",
        "tests[1].assert[5]: type 'contains' uses template variables, which differ per test",
        "tests[1].assert[6]: type 'javascript' has no equivalent Amelio rule type",
        "tests[1].assert[9]: type 'contains' uses transform, which Amelio rules cannot apply",
        "tests[1].assert[12]: type 'is-json' reads its value from 'file://schemas/verdict.json',"
        " which is not read; inline it",
        "tests[2]: loaded from 'file://more_tests.yaml', which is not read; inline the assertions",
    )


def test_imported_rules_evaluate_and_round_trip() -> None:
    rules = import_promptfoo(CONFIG, source="promptfooconfig.yaml").rules
    assert parse_rules([r.to_dict() for r in rules]) == rules
    good = '{"verdict": "approve", "note": "REFUND within 14 DAYS, ticket #12, password disk ram"}'
    report = evaluate(good, rules)
    by_id = {r.rule_id: r for r in report.results}
    assert by_id["pf-005"].passed
    assert not by_id["pf-009"].passed  # not-is-json fails on a JSON answer
    assert not by_id["pf-004"].passed  # neither Settings nor Paramètres
    assert by_id["pf-007"].passed
    assert not by_id["pf-008"].passed
    assert [r.rule_id for r in report.failed] == ["pf-004", "pf-008", "pf-009"]


def test_duplicates_are_removed_even_with_different_names() -> None:
    config = """
tests:
  - assert:
      - {type: contains, value: a}
      - {type: contains, value: a, metric: again}
      - {type: icontains, value: a}
  - assert:
      - {type: contains, value: a}
"""
    result = import_promptfoo(config, source="p.yaml")
    assert [(r.id, r.type) for r in result.rules] == [
        ("pf-001", "string_contains"),
        ("pf-002", "icontains"),
    ]
    assert result.unmapped == ()


def test_comma_separated_any_and_scenarios_note() -> None:
    config = """
defaultTest:
  assert:
    - type: not-icontains-any
      value: "lorem, ipsum ,dolor"
scenarios:
  - config: [{vars: {a: 1}}]
"""
    result = import_promptfoo(config, source="p.yaml")
    (rule,) = result.rules
    assert rule.to_dict() == {
        "id": "pf-001",
        "name": "Contains none of 'lorem', 'ipsum', 'dolor'",
        "type": "contains_any",
        "values": ["lorem", "ipsum", "dolor"],
        "case_sensitive": False,
        "negate": True,
        "severity": "warning",
    }
    assert not evaluate("LOREM", [rule]).success
    assert evaluate("fine", [rule]).success
    assert result.unmapped == ("scenarios: not imported; move their assertions into tests",)


def test_odd_shapes_are_reported_not_crashed_on() -> None:
    config = """
defaultTest: file://defaults.yaml
tests:
  - assert: {type: contains, value: x}
  - assert:
      - just a string
      - {value: no type}
      - {type: contains-any, value: {a: 1}}
      - {type: equals, value: {a: 1}}
"""
    result = import_promptfoo(config, source="p.yaml")
    assert result.rules == ()
    assert result.unmapped == (
        "defaultTest: loaded from 'file://defaults.yaml', which is not read; inline the assertions",
        "tests[0].assert: expected a list of assertions",
        "tests[1].assert[0]: not an assertion (expected a mapping with a type)",
        "tests[1].assert[1]: not an assertion (expected a mapping with a type)",
        "tests[1].assert[2]: type 'contains-any' needs a list of strings",
        "tests[1].assert[3]: type 'equals' needs a text value here, not dict",
    )


def test_invalid_yaml_names_file_and_line() -> None:
    with pytest.raises(EvalRuleError) as info:
        import_promptfoo("tests:\n  - assert: [\n", source="promptfooconfig.yaml")
    assert str(info.value).startswith("promptfooconfig.yaml: invalid YAML at line 3")
    with pytest.raises(EvalRuleError, match="must be a YAML mapping"):
        import_promptfoo("- a\n- b\n", source="promptfooconfig.yaml")
