"""A study suite: starting skills, tasks and the oracle, read and checked whole.

A suite is a folder::

    skills/        the starting skills, as ``amelio skills import`` reads them
    tasks.jsonl    {"id", "message", "skill", "split": "train" | "test"}, one a line
    oracle.json    {"SKILL": [rule, …]}: what the skill's users want

Everything is checked before any arm starts, so a malformed suite costs no LLM
call and writes nothing: every error names the file, and the line or the rule.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from amelio import evals
from amelio.errors import AmelioError, InvalidInput
from amelio.skills import files

__all__ = ["MAX_TASKS", "Suite", "Task", "load_suite"]

#: The most tasks one suite may hold: each is one or more LLM calls per round.
MAX_TASKS = 5_000
_SPLITS = ("train", "test")


@dataclass(frozen=True)
class Task:
    id: str
    message: str
    skill: str
    split: Literal["train", "test"]


@dataclass(frozen=True)
class Suite:
    """A checked suite. ``oracle`` holds each skill's compiled rules; their names
    are what a simulated user says in a Fix-It, and never reach the assistant
    otherwise (except in the ``told`` arm, which is told them on purpose)."""

    path: Path
    skills_dir: Path
    skills: tuple[str, ...]
    tasks: tuple[Task, ...]
    oracle: Mapping[str, tuple[evals.EvalRule, ...]]

    @property
    def name(self) -> str:
        return self.path.name

    def split(self, split: str) -> tuple[Task, ...]:
        return tuple(t for t in self.tasks if t.split == split)


def _fail(message: str, path: Path, **details: Any) -> InvalidInput:
    return InvalidInput(f"{path}: {message}", file=str(path), **details)


def _read_tasks(path: Path, skills: tuple[str, ...]) -> tuple[Task, ...]:
    if not path.is_file():
        raise _fail("missing: a suite lists its tasks in tasks.jsonl", path)
    tasks: list[Task] = []
    seen: set[str] = set()
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                raise _fail(f"line {number} is not JSON ({exc.msg})", path, line=number) from exc
            if not isinstance(data, dict):
                raise _fail(f"line {number} is not a JSON object", path, line=number)
            for key in ("id", "message", "skill", "split"):
                if not isinstance(data.get(key), str) or not data[key].strip():
                    raise _fail(
                        f"line {number}: {key!r} must be a non-empty string", path, line=number
                    )
            task_id, skill, split = data["id"], data["skill"], data["split"]
            if task_id in seen:
                raise _fail(f"line {number}: task id {task_id!r} is used twice", path, line=number)
            if split not in _SPLITS:
                raise _fail(
                    f"line {number}: split is 'train' or 'test', not {split!r}", path, line=number
                )
            if skill not in skills:
                raise _fail(
                    f"line {number}: task {task_id!r} names skill {skill!r}, which is not in "
                    f"skills/ ({', '.join(skills)})",
                    path,
                    line=number,
                )
            seen.add(task_id)
            tasks.append(Task(task_id, data["message"], skill, split))
            if len(tasks) > MAX_TASKS:
                raise _fail(f"more than {MAX_TASKS:,} tasks", path)
    if not any(t.split == "test" for t in tasks):
        raise _fail("no test tasks: the study measures on held-out ('test') tasks only", path)
    return tuple(tasks)


def _read_oracle(
    path: Path, skills: tuple[str, ...], tasks: tuple[Task, ...]
) -> dict[str, tuple[evals.EvalRule, ...]]:
    if not path.is_file():
        raise _fail(
            "missing: a suite says what its users want in oracle.json "
            '({"SKILL": [rule, ...]}, in the eval rule format)',
            path,
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _fail(f"not JSON ({exc})", path) from exc
    if not isinstance(data, dict):
        raise _fail('must be an object {"SKILL": [rule, ...]}', path)
    oracle: dict[str, tuple[evals.EvalRule, ...]] = {}
    for skill, rules in data.items():
        if skill not in skills:
            raise _fail(f"skill {skill!r} is not in skills/ ({', '.join(skills)})", path)
        try:
            compiled = evals.parse_rules(rules, source=f"{path} ({skill})")
        except AmelioError as exc:
            raise _fail(f"skill {skill!r}: {exc.message}", path, skill=skill) from exc
        for raw, rule in zip(rules, compiled, strict=True):
            if not isinstance(raw.get("name"), str) or not raw["name"].strip():
                raise _fail(
                    f"skill {skill!r}, rule {rule.id!r}: an oracle rule needs a 'name' in plain "
                    "words (it is what a simulated user says in a Fix-It)",
                    path,
                    skill=skill,
                )
        oracle[skill] = compiled
    for task in tasks:
        if not oracle.get(task.skill):
            raise _fail(
                f"task {task.id!r}: skill {task.skill!r} has no oracle rules, so its answers "
                "cannot be judged",
                path,
            )
    return oracle


def load_suite(path: str | Path) -> Suite:
    """Read and check the suite at ``path``; :class:`InvalidInput` names what is wrong."""
    root = Path(path)
    if not root.is_dir():
        raise InvalidInput(f"{root}: not a folder (a suite is a folder)", file=str(root))
    skills_dir = root / "skills"
    if not skills_dir.is_dir():
        raise _fail("missing: a suite holds its starting skills in skills/", skills_dir)
    names = tuple(sorted(spec.name for spec in files.read_skills(skills_dir)))
    if not names:
        raise _fail("no skills", skills_dir)
    tasks = _read_tasks(root / "tasks.jsonl", names)
    oracle = _read_oracle(root / "oracle.json", names, tasks)
    return Suite(root.resolve(), skills_dir.resolve(), names, tasks, oracle)
