"""`amelio eval --batch`: many outputs in one run, as a CI gate."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from amelio import skills
from amelio.cli import main
from amelio.errors import InvalidInput
from amelio.workspace.folder import Workspace

RULES = {
    "version": 1,
    "skill": "demo",
    "rules": [
        {
            "id": "d-1",
            "name": "Mentions rollback",
            "type": "icontains",
            "value": "rollback",
            "severity": "warning",
        },
        {"id": "d-2", "name": "Short", "type": "max_length", "value": 40, "severity": "info"},
    ],
}
OWN = [
    {
        "id": "o-1",
        "name": "Says hello",
        "type": "starts_with",
        "value": "Hello",
        "severity": "warning",
    }
]


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def write(path: Path, lines: list[object]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path


def test_a_batch_gates_on_failed_outputs_with_a_threshold(tmp_path: Path) -> None:
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps(RULES))
    batch = write(
        tmp_path / "outputs.jsonl",
        [
            {"id": "a", "text": "Deploy, then rollback if needed."},
            {"id": "b", "text": "Deploy on Friday."},  # fails d-1
            {"id": "c", "text": "Hello there", "rules": OWN},  # its own rules
            {"id": "d", "text": "Goodbye", "rules": OWN},  # fails o-1
        ],
    )
    code, out, _ = run("eval", "--batch", "--rules", str(rules), str(batch), "--format", "json")
    assert code == 1
    summary = json.loads(out)
    assert (summary["outputs"], summary["failedOutputs"], summary["checks"]) == (4, 2, 6)
    failed = {
        r["id"]: [f["ruleId"] for f in r["failures"]]
        for r in summary["results"]
        if not r["success"]
    }
    assert failed == {"b": ["d-1"], "d": ["o-1"]}
    assert run("eval", "--batch", "--rules", str(rules), str(batch), "--max-failures", "2")[0] == 0
    assert run("eval", "--batch", "--rules", str(rules), str(batch), "--max-failures", "1")[0] == 1

    code, out, _ = run("eval", "--batch", "--rules", str(rules), str(batch), "--format", "junit")
    root = ET.fromstring(out)
    assert [s.get("name") for s in root.iter("testsuite")] == ["a", "b", "c", "d"]
    assert sum(int(s.get("failures", 0)) for s in root.iter("testsuite")) == 2
    code, out, _ = run("eval", "--batch", "--rules", str(rules), str(batch), "--format", "markdown")
    assert "**2 of 4 outputs pass** (6 checks)." in out
    assert "| b | d-1: Mentions rollback |" in out and "| d | o-1: Says hello |" in out


def test_a_malformed_line_stops_the_batch_before_anything_is_reported(tmp_path: Path) -> None:
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps(RULES))
    batch = tmp_path / "outputs.jsonl"
    batch.write_text('{"id": "a", "text": "rollback"}\n{"id": "b", "txt": "x"}\n')
    code, out, err = run("eval", "--batch", "--rules", str(rules), str(batch))
    assert code == 2 and out == ""
    assert 'outputs.jsonl line 2: "text" (the output to check) must be a string.' in err
    batch.write_text('{"id": "a", "text": "rollback"}\nnot json\n')
    assert (
        "outputs.jsonl line 2: not valid JSON"
        in run("eval", "--batch", "--rules", str(rules), str(batch))[2]
    )
    write(batch, [{"id": "a", "text": "no rules anywhere"}])
    code, _, err = run("eval", "--batch", str(batch))
    assert code == 2 and "line 1: no rules for this output" in err
    batch.write_bytes(b'{"id": "a", "text": "caf\xe9"}\n')  # Latin-1, not UTF-8
    code, out, err = run("eval", "--batch", "--rules", str(rules), str(batch))
    assert code == 2 and out == ""
    assert "outputs.jsonl: not UTF-8 text (invalid continuation byte at byte 24)" in err


def test_promptfoo_output_json_is_read(tmp_path: Path) -> None:
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps(RULES))
    output = tmp_path / "promptfoo.json"
    output.write_text(
        json.dumps(
            {
                "evalId": "x",
                "results": {
                    "version": 3,
                    "results": [
                        {"testIdx": 0, "promptIdx": 0, "response": {"output": "Plan a rollback."}},
                        {"testIdx": 1, "promptIdx": 0, "response": {"output": "Ship it."}},
                    ],
                },
            },
            indent=2,
        )
    )
    code, out, _ = run("eval", "--batch", "--rules", str(rules), str(output), "--format", "json")
    assert code == 1
    summary = json.loads(out)
    assert [(r["id"], r["success"]) for r in summary["results"]] == [
        ("test-0-prompt-0", True),
        ("test-1-prompt-0", False),
    ]


def test_skills_from_the_workspace(
    sqlite_workspace: Workspace, examples: Path, tmp_path: Path
) -> None:
    skills.import_skills(sqlite_workspace.engine, examples)
    batch = write(
        tmp_path / "outputs.jsonl",
        [
            {"id": "ok", "text": "Use git push --force-with-lease.", "skill": "git-help"},
            {"id": "bad", "text": "Just git push --force.", "skill": "git-help"},
        ],
    )
    code, out, _ = run(
        "-w", str(sqlite_workspace.root), "eval", "--batch", str(batch), "--format", "json"
    )
    assert code == 1
    assert [r["id"] for r in json.loads(out)["results"] if not r["success"]] == ["bad"]
    write(batch, [{"id": "x", "text": "t", "skill": "no-such-skill"}])
    code, _, err = run("-w", str(sqlite_workspace.root), "eval", "--batch", str(batch))
    assert code == 2 and "no-such-skill" in err


def test_lines_repeating_rules_share_them_and_type_differences_count(tmp_path: Path) -> None:
    """One compiled rule set serves every line that carries the same list; a list
    that differs only by a value's JSON type (1 vs true) is parsed on its own."""
    from amelio.evals import batch as eval_batch

    same = {"id": "x", "type": "max_length", "value": 1}
    lines = [json.dumps({"id": f"o{i}", "text": "ab", "rules": [same]}) for i in range(3)]
    lines.append(json.dumps({"id": "bad", "text": "ab", "rules": [{**same, "value": True}]}))
    with pytest.raises(InvalidInput, match="line 4"):
        eval_batch.parse_batch("\n".join(lines), "f.jsonl", max_chars=1000)
    items = eval_batch.parse_batch("\n".join(lines[:3]), "f.jsonl", max_chars=1000)
    assert items[0].rules is items[2].rules


def test_the_same_rules_however_written_are_compiled_once() -> None:
    """Lines carrying the same rule list (other spacing, another key order in the
    line) share one compiled rule set; a line naming a skill and rules is refused."""
    from amelio.evals import batch as eval_batch

    rules = [
        {"id": "r", "type": "icontains", "value": "ok"},
        {"id": "n", "type": "max_length", "value": 50},
    ]
    lines = [
        json.dumps({"id": "a", "text": "ok one", "rules": rules}),
        json.dumps({"rules": rules, "id": "b", "text": "ok two"}),
        '{"id":"c","text":"ok three","rules":' + json.dumps(rules, separators=(",", ":")) + "}",
    ]
    items = eval_batch.parse_batch("\n".join(lines), "f.jsonl", max_chars=1000)
    assert [(i.id, i.text) for i in items] == [("a", "ok one"), ("b", "ok two"), ("c", "ok three")]
    assert items[1].rules is items[0].rules and items[2].rules is items[0].rules
    assert [r.id for r in items[0].rules or ()] == ["r", "n"]
    both = json.dumps({"id": "d", "text": "ok", "skill": "demo", "rules": rules})
    with pytest.raises(InvalidInput, match='line 2: give "skill" or "rules", not both'):
        eval_batch.parse_batch("\n".join([lines[0], both]), "f.jsonl", max_chars=1000)
