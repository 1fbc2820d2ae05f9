"""Skill files and the skill store, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa

from amelio import skills
from amelio.db.schema import skill_versions
from amelio.db.schema import skills as skills_table
from amelio.errors import Conflict, EvalRuleError, InvalidInput, SkillFileError, SkillNotFound
from amelio.workspace.folder import Workspace

GOOD = """---
name: {name}
description: Helps with {name}.
triggers:
  - {name}
keywords:
  - alpha
  - beta
---

# {name}

1. Be precise.
"""


def write_skill(
    root: Path, name: str, text: str | None = None, evals: object | None = None
) -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text(
        text if text is not None else GOOD.format(name=name), encoding="utf-8"
    )
    if evals is not None:
        body = evals if isinstance(evals, str) else json.dumps(evals)
        (folder / f"{name}.evals.json").write_text(body, encoding="utf-8")
    return folder


def counts(ws: Workspace) -> tuple[int, int]:
    with ws.engine.connect() as conn:
        return (
            conn.scalar(sa.select(sa.func.count()).select_from(skills_table)) or 0,
            conn.scalar(sa.select(sa.func.count()).select_from(skill_versions)) or 0,
        )


def test_examples_import_with_evals_and_history(workspace: Workspace, examples: Path) -> None:
    report = skills.import_skills(workspace.engine, examples)
    assert len(report.created) >= 10
    listed = skills.list_skills(workspace.engine, "default")
    assert [s.name for s in listed] == sorted(report.created)
    review = skills.get_skill(workspace.engine, "code-review")
    assert review.version == 1
    assert review.scope == "global"
    assert review.spec.triggers
    assert review.spec.keywords
    assert review.spec.content.startswith("#")
    assert review.spec.evals
    assert all(r["severity"] in ("warning", "info") for r in review.spec.evals)
    history = skills.list_versions(workspace.engine, "code-review")
    assert [(v.version, v.author) for v in history] == [(1, "import")]
    assert str(examples.resolve()) in history[0].reason


def test_reimport_is_a_noop_and_a_change_is_a_new_version(
    workspace: Workspace, tmp_path: Path
) -> None:
    src = tmp_path / "src"
    write_skill(src, "alpha")
    write_skill(src, "beta")
    skills.import_skills(workspace.engine, src)
    again = skills.import_skills(workspace.engine, src)
    assert again.created == ()
    assert again.updated == ()
    assert sorted(again.unchanged) == ["alpha", "beta"]
    assert counts(workspace) == (2, 2)

    (src / "alpha" / "SKILL.md").write_text(GOOD.format(name="alpha") + "2. Be kind.\n")
    third = skills.import_skills(workspace.engine, src)
    assert third.updated == ("alpha",)
    assert third.details["alpha"] == 2
    history = skills.list_versions(workspace.engine, "alpha")
    assert [v.version for v in history] == [1, 2]
    assert "Be kind" not in history[0].spec.content
    assert "Be kind" in history[1].spec.content


def test_round_trip_import_export_import_changes_nothing(
    workspace: Workspace, examples: Path, tmp_path: Path
) -> None:
    skills.import_skills(workspace.engine, examples)
    before = {s.name: s.spec for s in skills.list_skills(workspace.engine)}
    out = tmp_path / "exported"
    written = skills.export_skills(workspace.engine, out)
    assert (out / "code-review" / "SKILL.md") in written
    assert (out / "code-review" / "code-review.evals.json") in written
    report = skills.import_skills(workspace.engine, out)
    assert report.created == ()
    assert report.updated == ()
    assert {s.name: s.spec for s in skills.list_skills(workspace.engine)} == before
    # And the exported files read back equal to what was stored.
    assert {s.name: s for s in skills.read_skills(out)} == before


def test_extra_front_matter_survives_round_trip(tmp_path: Path) -> None:
    text = GOOD.format(name="gamma").replace(
        "keywords:", "license: MIT\nallowed-tools: [Read, Grep]\nkeywords:"
    )
    write_skill(tmp_path / "src", "gamma", text)
    spec = skills.read_skills(tmp_path / "src")[0]
    assert spec.extra == {"license": "MIT", "allowed-tools": ["Read", "Grep"]}
    skills.write_skills([spec], tmp_path / "out")
    assert skills.read_skills(tmp_path / "out")[0] == spec


@pytest.mark.parametrize(
    ("text", "evals", "needle", "field"),
    [
        (
            "---\nname: bad\ndescription: [unclosed\n---\nbody\n",
            None,
            "invalid YAML at line 3",
            "front matter",
        ),
        ("---\ndescription: no name here\n---\nbody\n", None, "missing", "name"),
        ("# no front matter at all\n", None, "missing front matter", "name"),
        ("---\nname: other\n---\nbody\n", None, "does not match its folder", "name"),
        ("---\nname: bad\ntriggers: review\n---\nbody\n", None, "list of strings", "triggers"),
        ("---\nname: bad\nx: &a [1, 2]\ny: [*a, *a]\n---\n", None, "aliases", "front matter"),
        ("---\nname: bad\nname: bad\n---\n", None, "duplicate key", "front matter"),
        ("---\nname: bad\ntags: !!set {a, b}\n---\n", None, "not supported", "tags"),
        ("---\nname: bad\n---\nnul \x00 byte\n", None, "NUL", None),
        ("---\nname: bad\n---\n", "{not json", "invalid JSON", None),
        (
            "---\nname: bad\n---\n",
            {
                "version": 1,
                "skill": "bad",
                "rules": [
                    {
                        "id": "b-1",
                        "name": "x",
                        "type": "telepathy",
                        "value": "y",
                        "severity": "warning",
                    }
                ],
            },
            "telepathy",
            "type",
        ),
        (
            "---\nname: bad\n---\n",
            {
                "version": 1,
                "skill": "bad",
                "rules": [
                    {
                        "id": "b-2",
                        "name": "x",
                        "type": "max_length",
                        "value": "long",
                        "severity": "warning",
                    }
                ],
            },
            "b-2",
            "value",
        ),
    ],
)
def test_bad_skill_files_fail_whole_import_naming_file_and_field(
    workspace: Workspace,
    tmp_path: Path,
    text: str,
    evals: object,
    needle: str,
    field: str | None,
) -> None:
    src = tmp_path / "src"
    write_skill(src, "aaa-good")  # sorts first: would be stored if import were not atomic
    write_skill(src, "bad", text, evals)
    with pytest.raises((SkillFileError, EvalRuleError)) as info:
        skills.import_skills(workspace.engine, src)
    message = str(info.value)
    assert needle in message
    assert "bad" in message  # names the file
    if field is not None:
        assert info.value.field == field
    assert counts(workspace) == (0, 0)


def test_eval_error_names_rule_id(tmp_path: Path) -> None:
    write_skill(
        tmp_path,
        "bad",
        "---\nname: bad\n---\n",
        {
            "version": 1,
            "skill": "bad",
            "rules": [
                {
                    "id": "bad-007",
                    "name": "n",
                    "type": "regex_match",
                    "pattern": "(unclosed",
                    "severity": "warning",
                }
            ],
        },
    )
    with pytest.raises(EvalRuleError) as info:
        skills.read_skills(tmp_path)
    assert info.value.rule_id == "bad-007"
    assert info.value.field == "pattern"
    assert "bad.evals.json" in str(info.value)


def test_name_must_match_folder_so_names_are_unique(tmp_path: Path) -> None:
    write_skill(tmp_path, "one")
    write_skill(tmp_path, "two", GOOD.format(name="one"))
    with pytest.raises(SkillFileError, match="does not match its folder"):
        skills.read_skills(tmp_path)


def test_legacy_registry_supplies_triggers_and_keywords(
    workspace: Workspace, tmp_path: Path
) -> None:
    src = tmp_path / "legacy"
    write_skill(src, "deploy", "# Deploy\n\nUse blue/green.\n")  # no front matter
    write_skill(src, "review", "---\nname: review\ndescription: Reviews.\n---\nBody\n")
    (src / "_registry.json").write_text(
        json.dumps(
            {
                "skills": {
                    "deploy": {
                        "triggers": ["deploy", "ship it"],
                        "keywords": ["docker"],
                        "description": "Deploys.",
                    },
                    "review": {"triggers": ["review"], "keywords": ["owasp"]},
                }
            }
        )
    )
    skills.import_skills(workspace.engine, src)
    deploy = skills.get_skill(workspace.engine, "deploy")
    assert deploy.spec.triggers == ("deploy", "ship it")
    assert deploy.spec.description == "Deploys."
    assert skills.get_skill(workspace.engine, "review").spec.keywords == ("owasp",)


def test_registry_entry_without_skill_folder_fails(tmp_path: Path) -> None:
    write_skill(tmp_path, "real")
    (tmp_path / "_registry.json").write_text(json.dumps({"ghost": {"triggers": ["boo"]}}))
    with pytest.raises(SkillFileError, match="ghost") as info:
        skills.read_skills(tmp_path)
    assert "_registry.json" in str(info.value)


def test_project_fork_wins_over_global(workspace: Workspace, tmp_path: Path) -> None:
    write_skill(tmp_path / "global", "alpha")
    write_skill(tmp_path / "global", "beta")
    skills.import_skills(workspace.engine, tmp_path / "global")
    forked = GOOD.format(name="alpha").replace("Be precise", "Answer in French")
    write_skill(tmp_path / "acme", "alpha", forked)
    skills.import_skills(workspace.engine, tmp_path / "acme", project="acme")

    acme = {s.name: s for s in skills.list_skills(workspace.engine, "acme")}
    assert acme["alpha"].scope == "project"
    assert "French" in acme["alpha"].spec.content
    assert acme["beta"].scope == "global"
    assert "French" not in skills.get_skill(workspace.engine, "alpha", "default").spec.content
    assert "French" in skills.get_skill(workspace.engine, "alpha", "acme").spec.content

    fork = skills.fork_skill(workspace.engine, "beta", "acme", author="t")
    assert fork.project == "acme"
    assert fork.version == 1
    with pytest.raises(Conflict):
        skills.fork_skill(workspace.engine, "beta", "acme", author="t")


def test_update_project_skill_forks_the_global_one_first(
    workspace: Workspace, tmp_path: Path
) -> None:
    write_skill(tmp_path, "alpha")
    skills.import_skills(workspace.engine, tmp_path)
    with pytest.raises(Conflict, match="version 1, not 3"):  # stale: nothing forked
        skills.update_project_skill(
            workspace.engine,
            "alpha",
            "acme",
            content="Stale",
            author="t",
            reason="r",
            expected_version=3,
        )
    assert skills.get_skill(workspace.engine, "alpha", "acme").scope == "global"
    changed = skills.update_project_skill(
        workspace.engine,
        "alpha",
        "acme",
        content="Mine",
        author="t",
        reason="r",
        expected_version=1,
    )
    assert (changed.project, changed.version, changed.spec.content) == ("acme", 2, "Mine\n")
    assert [e.kind for e in skills.skill_log(workspace.engine, "alpha", "acme")] == ["fork", "edit"]
    assert "Be precise" in skills.get_skill(workspace.engine, "alpha").spec.content
    again = skills.update_project_skill(
        workspace.engine,
        "alpha",
        "acme",
        content="Again",
        author="t",
        reason="r",
        expected_version=2,
    )
    assert (again.project, again.version) == ("acme", 3)
    top = skills.update_project_skill(
        workspace.engine, "alpha", None, content="Global", author="t", reason="r"
    )
    assert (top.project, top.version) == (None, 2)


def test_update_rollback_and_optimistic_lock(workspace: Workspace, tmp_path: Path) -> None:
    write_skill(tmp_path, "alpha")
    skills.import_skills(workspace.engine, tmp_path)
    v2 = skills.update_skill(
        workspace.engine,
        "alpha",
        content="New body",
        author="ana",
        reason="clearer",
        expected_version=1,
    )
    assert v2.version == 2
    assert v2.spec.content == "New body\n"
    with pytest.raises(Conflict, match="version 2, not 1"):
        skills.update_skill(
            workspace.engine,
            "alpha",
            content="Lost update",
            author="bob",
            reason="stale",
            expected_version=1,
        )
    v3 = skills.rollback_skill(workspace.engine, "alpha", 1, author="ana")
    assert v3.version == 3
    assert "Be precise" in v3.spec.content
    assert [(v.version, v.reason) for v in skills.list_versions(workspace.engine, "alpha")] == [
        (1, f"imported from {tmp_path.resolve()}"),
        (2, "clearer"),
        (3, "rollback to v1"),
    ]
    with pytest.raises(SkillNotFound):
        skills.rollback_skill(workspace.engine, "alpha", 9, author="ana")


def test_update_with_invalid_rules_changes_nothing(workspace: Workspace, tmp_path: Path) -> None:
    write_skill(tmp_path, "alpha")
    skills.import_skills(workspace.engine, tmp_path)
    with pytest.raises(EvalRuleError):
        skills.update_skill(
            workspace.engine,
            "alpha",
            author="a",
            reason="r",
            rules=[{"id": "x", "name": "x", "type": "nope", "severity": "info"}],
        )
    assert skills.get_skill(workspace.engine, "alpha").version == 1
    assert counts(workspace) == (1, 1)


def test_concurrent_updates_never_fork_history(workspace: Workspace, tmp_path: Path) -> None:
    write_skill(tmp_path, "alpha")
    skills.import_skills(workspace.engine, tmp_path)
    outcomes: list[str] = []

    def writer(i: int) -> None:
        try:
            skills.update_skill(
                workspace.engine,
                "alpha",
                content=f"body {i}",
                author=f"w{i}",
                reason="race",
                expected_version=1,
            )
            outcomes.append("won")
        except Conflict:
            outcomes.append("lost")

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count("won") == 1
    versions = [v.version for v in skills.list_versions(workspace.engine, "alpha")]
    assert versions == [1, 2]


def test_unknown_skill_and_project(workspace: Workspace) -> None:
    with pytest.raises(SkillNotFound, match="amelio skills list"):
        skills.get_skill(workspace.engine, "nope")
    from amelio.errors import ProjectNotFound

    with pytest.raises(ProjectNotFound):
        skills.list_skills(workspace.engine, "no-such-project")


def test_single_skill_folder_and_file_import(
    workspace: Workspace, examples: Path, tmp_path: Path
) -> None:
    shutil.copytree(examples / "git-help", tmp_path / "git-help")
    assert [s.name for s in skills.read_skills(tmp_path / "git-help")] == ["git-help"]
    assert [s.name for s in skills.read_skills(tmp_path / "git-help" / "SKILL.md")] == ["git-help"]
    with pytest.raises(SkillFileError, match="no such file"):
        skills.read_skills(tmp_path / "missing")


def test_concurrent_imports_into_a_new_project(workspace: Workspace, examples: Path) -> None:
    errors: list[BaseException] = []

    def importer() -> None:
        try:
            skills.import_skills(workspace.engine, examples, project="newproj")
        except Conflict:
            pass  # lost the race for a new skill: a clean, retryable error
        except BaseException as exc:  # anything else is a bug
            errors.append(exc)

    threads = [threading.Thread(target=importer) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert skills.import_skills(workspace.engine, examples, project="newproj").created == ()
    assert len(skills.list_skills(workspace.engine, "newproj")) >= 10


def test_same_content_is_not_a_new_version(workspace: Workspace, tmp_path: Path) -> None:
    write_skill(tmp_path, "alpha")
    skills.import_skills(workspace.engine, tmp_path)
    same = skills.get_skill(workspace.engine, "alpha").spec.content
    assert (
        skills.update_skill(
            workspace.engine, "alpha", content=same, author="a", reason="noop"
        ).version
        == 1
    )
    with pytest.raises(InvalidInput, match="NUL"):
        skills.update_skill(workspace.engine, "alpha", content="a\x00b", author="a", reason="r")


@pytest.mark.parametrize("name", ["../../../x", "ok\n", "a/b", "..", "Upper"])
def test_a_name_that_is_not_a_whole_safe_name_is_refused_everywhere(
    workspace: Workspace, tmp_path: Path, name: str
) -> None:
    """A skill's name becomes its folder: a separator, a dot or a trailing newline
    (which ``$`` lets through) must never get in, nor back out through export."""
    with pytest.raises(SkillFileError, match="not a valid skill name"):
        skills.parse_skill_md(f"---\nname: {json.dumps(name)}\n---\n\nBody.\n", source="x")
    with pytest.raises(SkillFileError, match="not a valid skill name"):
        skills.save_skills(workspace.engine, [skills.SkillSpec(name=name, content="Body.\n")])
    assert counts(workspace) == (0, 0)

    # A database from elsewhere (a restore before names were checked) holds one.
    skills.import_skills(workspace.engine, write_skill(tmp_path / "src", "fine"))
    with workspace.engine.begin() as conn:
        conn.execute(sa.update(skills_table).values(name=name))
    base = tmp_path / "exports"
    base.mkdir()
    with pytest.raises(SkillFileError, match="not a valid skill name"):
        skills.export_skills(workspace.engine, base / "a" / "b" / "out")
    assert list(base.rglob("*")) == []  # "../../../x" would have landed in it
