"""The development suite of `amelio study` (benchmarks/data/study/): its tasks, its
starting skills and its oracle rules are well formed, read by Amelio's own parsers,
and the oracle can be met by a good answer and is failed by a bad one."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from amelio import skills
from amelio.evals import evaluate, parse_rules
from amelio.workspace.folder import Workspace

SUITE = Path(__file__).resolve().parent.parent / "benchmarks" / "data" / "study"
SKILLS = SUITE / "skills"
TASK_KEYS = {"id", "message", "skill", "split"}
#: Rule types that ask for something to be present: the starting skill must not
#: already show it, or the gap the loop has to learn would not be there.
PRESENCE_TYPES = {"regex_match", "string_contains", "icontains", "contains_any", "contains_all"}


def _tasks() -> list[dict[str, Any]]:
    lines = (SUITE / "tasks.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _oracle() -> dict[str, list[dict[str, Any]]]:
    data = json.loads((SUITE / "oracle.json").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _skill_folders() -> set[str]:
    return {p.name for p in SKILLS.iterdir() if (p / "SKILL.md").is_file()}


def _failed(skill: str, answer: str) -> set[str]:
    report = evaluate(answer, parse_rules(_oracle()[skill], source=f"oracle.json:{skill}"))
    assert not any(r.error for r in report.results), report.to_dict()
    return {r.rule_id for r in report.failed}


# One good answer per skill, each to one of the skill's tasks, and one plainly bad one.
FENCE = "```"
IDEAL = {
    "git-assist": (
        "You want to drop the commit but keep its changes staged.\n\n"
        f"{FENCE}bash\n"
        "git reset --soft HEAD~1   # move the branch back one commit, keep the changes\n"
        "git status                # check: the changes are staged, the commit is gone\n"
        f"{FENCE}\n\n"
        "If the commit was already on your own remote branch, update it with "
        "`git push --force-with-lease`.\n\n"
        "To undo: `git reset --soft ORIG_HEAD` brings the commit back."
    ),
    "python-style": (
        f"{FENCE}python\n"
        "def average(values: list[float]) -> float:\n"
        '    """Return the arithmetic mean of a non-empty list of numbers."""\n'
        "    return sum(values) / len(values)\n"
        f"{FENCE}\n\n"
        "- `sum()` replaces the hand-written loop.\n"
        "- `values` says what the argument holds; `l` is easy to misread as `1`."
    ),
    "sql-check": (
        "**Verdict: NEEDS CHANGES**\n\n"
        "- HIGH: `YEAR(created_at)` wraps the column in a function, so no index on "
        "`created_at` can be used.\n"
        "- MEDIUM: `SELECT *` reads every column; list the ones you need.\n\n"
        f"{FENCE}sql\n"
        "SELECT id, customer_id, total\n"
        "FROM orders\n"
        "WHERE created_at >= '2024-01-01' AND created_at < '2025-01-01';\n"
        f"{FENCE}\n\n"
        "Run `EXPLAIN ANALYZE` on both versions to check that the new one uses the index."
    ),
    "shell-oneliner": (
        f"{FENCE}bash\n"
        "find /var -type f -name '*.log' -size +100M\n"
        f"{FENCE}\n\n"
        "- `-type f`: regular files only\n"
        "- `-name '*.log'`: names ending in .log\n"
        "- `-size +100M`: larger than 100 MB"
    ),
    "json-extract": (
        '{"invoice_number": "INV-2291", "customer_name": "Acme Corp", '
        '"total_amount": 1240.50, "due_date": "2025-03-15"}'
    ),
    "changelog": (
        "## [2.4.0] - 2025-06-03\n\n"
        "### Added\n"
        "- Reports can be exported as CSV (#412).\n\n"
        "### Changed\n"
        "- The default request timeout is now 30 seconds (#419).\n\n"
        "### Fixed\n"
        "- Invoices with a zero total no longer crash (#415).\n"
    ),
}
BAD = {
    "git-assist": "Run `git reset --hard HEAD~1` and then `git push --force`.",
    "python-style": "Use sum: def avg(l): return sum(l)/len(l)",
    "sql-check": "This query is fine, but you could add an index on created_at.",
    "shell-oneliner": "You can do this with the find command and some options. " * 15,
    "json-extract": 'Here is the JSON:\n{"InvoiceNumber": "INV-2291", "dueDate": "March 15, 2025"}',
    "changelog": (
        "Release notes:\n- add CSV export to reports #412\n- bump requests from 2.31 to 2.32 #418"
    ),
}


def test_tasks_are_well_formed() -> None:
    tasks = _tasks()
    for task in tasks:
        assert set(task) == TASK_KEYS, task
        assert all(isinstance(task[k], str) and task[k].strip() for k in TASK_KEYS), task
        assert task["split"] in ("train", "test"), task
        assert len(task["message"]) <= 500, task["id"]
    ids = Counter(t["id"] for t in tasks)
    assert [i for i, n in ids.items() if n > 1] == []
    messages = Counter(t["message"].strip().casefold() for t in tasks)
    assert [m for m, n in messages.items() if n > 1] == []


def test_suite_size_and_splits() -> None:
    tasks = _tasks()
    per_skill = Counter((t["skill"], t["split"]) for t in tasks)
    names = {t["skill"] for t in tasks}
    assert len(names) >= 6
    assert len(tasks) >= 120
    assert sum(t["split"] == "test" for t in tasks) * 2 == len(tasks)
    for name in names:
        assert per_skill[name, "train"] >= 5, name
        assert per_skill[name, "train"] == per_skill[name, "test"], name


def test_every_task_skill_has_a_folder_and_an_oracle() -> None:
    used = {t["skill"] for t in _tasks()}
    assert used == _skill_folders() == set(_oracle())


def test_oracle_rules_parse_and_are_named() -> None:
    for name, raw in _oracle().items():
        assert 2 <= len(raw) <= 4, name
        for rule in raw:
            assert isinstance(rule.get("name"), str) and rule["name"].strip(), (name, rule)
        parsed = parse_rules(raw, source=f"oracle.json:{name}")
        assert [r.name for r in parsed] == [r["name"] for r in raw]


def test_starting_skills_do_not_already_hold_the_oracle() -> None:
    specs = {spec.name: spec for spec in skills.read_skills(SKILLS)}
    for name, raw in _oracle().items():
        spec = specs[name]
        assert spec.description.strip() and spec.content.strip(), name
        assert 0 <= len(spec.evals or ()) <= 2, name
        own = {r["id"] for r in spec.evals or ()}
        for rule in raw:
            assert rule["name"] not in spec.content, (name, rule["name"])
            assert rule["id"] not in own, (name, rule["id"])
        present = [r for r in raw if r["type"] in PRESENCE_TYPES]
        shown = _failed(name, spec.content)
        assert {r["id"] for r in present} <= shown, f"{name}'s SKILL.md already shows {present}"


def test_skills_import_with_amelio_importer(sqlite_workspace: Workspace) -> None:
    report = skills.import_skills(sqlite_workspace.engine, SKILLS)
    assert sorted(report.created) == sorted(_skill_folders())
    stored = {s.name: s for s in skills.list_skills(sqlite_workspace.engine)}
    assert set(stored) == _skill_folders()
    for name, skill in stored.items():
        on_disk = json.loads((SKILLS / name / f"{name}.evals.json").read_text(encoding="utf-8"))
        assert [r["id"] for r in skill.spec.evals or ()] == [r["id"] for r in on_disk["rules"]]


@pytest.mark.parametrize("name", sorted(IDEAL))
def test_ideal_answer_passes_every_oracle_rule(name: str) -> None:
    assert _failed(name, IDEAL[name]) == set()


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_answer_fails_every_oracle_rule(name: str) -> None:
    """Each rule can fail: none of them is vacuous."""
    assert _failed(name, BAD[name]) == {r["id"] for r in _oracle()[name]}


def test_examples_cover_every_skill() -> None:
    assert set(IDEAL) == set(BAD) == set(_oracle())
