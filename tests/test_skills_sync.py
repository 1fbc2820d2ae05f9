"""`amelio skills sync DIR`: an Agent Skills folder kept in step with the registry.

Real folders in tmp, real databases (SQLite and PostgreSQL), the real watcher.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from amelio import skills
from amelio.cli import main
from amelio.db.schema import skills as skills_table
from amelio.errors import InvalidInput
from amelio.improve import proposals, rotation
from amelio.skills import files
from amelio.skills.sync import STATE_FILE, SyncReport, sync_skills, watch_skills
from amelio.workspace.folder import Workspace

SKILL = """---
name: {name}
description: Helps with {name}.
triggers:
  - {name}
keywords:
  - alpha
---

# {name}

1. Be precise about {name}.
"""
RULES = {
    "version": 1,
    "skill": "{name}",
    "rules": [
        {
            "id": "r-1",
            "name": "Says hello",
            "type": "string_contains",
            "value": "hello",
            "severity": "warning",
        }
    ],
}


def make_source(root: Path, *names: str) -> Path:
    for name in names:
        folder = root / name
        folder.mkdir(parents=True)
        (folder / "SKILL.md").write_text(SKILL.format(name=name), encoding="utf-8")
        rules = json.loads(json.dumps(RULES).replace("{name}", name))
        (folder / f"{name}.evals.json").write_text(json.dumps(rules), encoding="utf-8")
    return root


@pytest.fixture
def seeded(workspace: Workspace, tmp_path: Path) -> Workspace:
    skills.import_skills(workspace.engine, make_source(tmp_path / "src", "alpha", "beta"))
    return workspace


def actions(report: SyncReport) -> dict[str, str]:
    return {item.skill: item.action for item in report.items}


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def edit_body(path: Path, old: str, new: str) -> str:
    text = path.read_text(encoding="utf-8").replace(old, new)
    assert new in text
    path.write_text(text, encoding="utf-8")
    return text


def test_first_sync_writes_the_skills_and_their_rules_then_nothing(
    seeded: Workspace, tmp_path: Path
) -> None:
    agent = tmp_path / "agent" / "skills"
    report = sync_skills(seeded, agent)
    assert actions(report) == {"alpha": "write", "beta": "write"}
    alpha = files.read_skills(agent / "alpha")[0]
    assert alpha == skills.get_skill(seeded.engine, "alpha").spec
    rules = json.loads((agent / "alpha" / "alpha.evals.json").read_text())
    assert [r["id"] for r in rules["rules"]] == ["r-1"]
    state = json.loads((agent / STATE_FILE).read_text())
    assert set(state["skills"]) == {"alpha", "beta"} and state["project"] is None
    before = snapshot(agent)
    assert actions(sync_skills(seeded, agent)) == {"alpha": "unchanged", "beta": "unchanged"}
    assert snapshot(agent) == before


def test_an_approved_proposal_is_written_on_the_next_sync_with_rotation(
    seeded: Workspace, tmp_path: Path
) -> None:
    agent = tmp_path / "agent"
    sync_skills(seeded, agent)
    old = (agent / "alpha" / "SKILL.md").read_bytes()
    made = proposals.create_proposal(
        seeded,
        "alpha",
        proposed_content="# alpha\n\n1. Say hello.",
        rationale="clearer",
        proposed_by="sage",
        author="sage",
    )
    proposals.approve_proposal(seeded, made.id, actor="alice")
    report = sync_skills(seeded, agent)
    assert actions(report) == {"alpha": "write", "beta": "unchanged"}
    assert report.items[0].version == 2
    assert "1. Say hello." in (agent / "alpha" / "SKILL.md").read_text()
    assert (agent / "alpha" / "SKILL.v1.md").read_bytes() == old
    assert not list(agent.rglob(f"*{rotation.TEMP_SUFFIX}"))
    assert not (agent / "alpha" / rotation.JOURNAL).exists()
    assert actions(sync_skills(seeded, agent))["alpha"] == "unchanged"


def test_a_hand_edit_becomes_a_pending_proposal_and_the_file_is_kept(
    seeded: Workspace, tmp_path: Path
) -> None:
    agent = tmp_path / "agent"
    sync_skills(seeded, agent)
    path = agent / "alpha" / "SKILL.md"
    v1 = path.read_bytes()
    written = edit_body(path, "1. Be precise about alpha.", "1. Be precise.\n2. Cite sources.")
    report = sync_skills(seeded, agent, author="skills sync test")
    assert actions(report)["alpha"] == "propose"
    proposal = proposals.get_proposal(seeded, report.items[0].proposal_id or 0)
    assert (proposal.status, proposal.proposed_by, proposal.author) == (
        "pending",
        "human",
        "skills sync test",
    )
    assert "2. Cite sources." in proposal.proposed_content
    assert path.read_text(encoding="utf-8") == written
    assert skills.get_skill(seeded.engine, "alpha").version == 1  # no silent change either

    again = sync_skills(seeded, agent)
    assert actions(again)["alpha"] == "pending" and path.read_text() == written

    proposals.approve_proposal(seeded, proposal.id, actor="alice")
    adopted = sync_skills(seeded, agent).items[0]
    assert (adopted.action, adopted.version) == ("adopt", 2)
    assert "v1 kept as SKILL.v1.md" in adopted.detail
    assert path.read_text(encoding="utf-8") == written  # the person's file, as written
    assert (agent / "alpha" / "SKILL.v1.md").read_bytes() == v1  # the version it replaced
    assert actions(sync_skills(seeded, agent))["alpha"] == "unchanged"


def test_a_declined_edit_is_replaced_by_the_registry_and_kept_as_a_backup(
    seeded: Workspace, tmp_path: Path
) -> None:
    agent = tmp_path / "agent"
    sync_skills(seeded, agent)
    path = agent / "beta" / "SKILL.md"
    edited = edit_body(path, "Be precise about beta.", "Never be precise.")
    made = sync_skills(seeded, agent).items[1].proposal_id
    assert made is not None
    proposals.reject_proposal(seeded, made, actor="alice", reason="no")
    report = sync_skills(seeded, agent)
    assert actions(report)["beta"] == "restore"
    assert files.read_skills(agent / "beta")[0] == skills.get_skill(seeded.engine, "beta").spec
    assert (agent / "beta" / "SKILL.edited.md").read_text(encoding="utf-8") == edited
    assert not (agent / "beta" / "SKILL.v1.md").exists()  # the edit was never v1


def test_a_later_save_replaces_the_sync_s_own_proposal_and_undoing_withdraws_it(
    seeded: Workspace, tmp_path: Path
) -> None:
    agent = tmp_path / "agent"
    sync_skills(seeded, agent)
    path = agent / "alpha" / "SKILL.md"
    original = path.read_text(encoding="utf-8")
    edit_body(path, "Be precise", "Be brief")
    first = sync_skills(seeded, agent).items[0].proposal_id
    edit_body(path, "Be brief", "Be very brief")
    second = sync_skills(seeded, agent).items[0].proposal_id
    assert first is not None and second is not None and second != first
    assert proposals.get_proposal(seeded, first).status == "rejected"
    assert "Be very brief" in proposals.get_proposal(seeded, second).proposed_content
    path.write_text(original, encoding="utf-8")
    undone = sync_skills(seeded, agent).items[0]
    assert (undone.action, undone.detail) == (
        "unchanged",
        f"the edit was undone; proposal #{second} withdrawn",
    )
    assert proposals.get_proposal(seeded, second).status == "rejected"
    assert sync_skills(seeded, agent).items[0].detail == ""


def test_front_matter_edits_are_kept_and_reported_not_proposed(
    seeded: Workspace, tmp_path: Path
) -> None:
    agent = tmp_path / "agent"
    sync_skills(seeded, agent)
    path = agent / "alpha" / "SKILL.md"
    written = edit_body(path, "description: Helps with alpha.", "description: Other.")
    report = sync_skills(seeded, agent)
    assert actions(report)["alpha"] == "kept" and "description" in report.items[0].detail
    assert path.read_text(encoding="utf-8") == written
    assert proposals.list_proposals(seeded, skill="alpha") == []
    # The report names the command that applies the edit, and that command does.
    command = re.search(r"`amelio (skills import [^`]+)`", report.items[0].detail)
    assert command is not None, report.items[0].detail
    ran = CliRunner().invoke(main, ["-w", str(seeded.root), *command.group(1).split()])
    assert ran.exit_code == 0, ran.output
    assert skills.get_skill(seeded.engine, "alpha").spec.description == "Other."
    assert actions(sync_skills(seeded, agent))["alpha"] == "adopt"


def test_dry_run_changes_nothing(seeded: Workspace, tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    assert actions(sync_skills(seeded, tmp_path / "nowhere", dry_run=True)) == {
        "alpha": "write",
        "beta": "write",
    }
    assert not (tmp_path / "nowhere").exists()
    sync_skills(seeded, agent)
    edit_body(agent / "alpha" / "SKILL.md", "Be precise", "Be brief")
    made = proposals.create_proposal(
        seeded,
        "beta",
        proposed_content="# beta\n\nNew.",
        rationale="r",
        proposed_by="sage",
        author="sage",
    )
    proposals.approve_proposal(seeded, made.id, actor="alice")
    make_source(agent, "gamma")
    before, versions = snapshot(agent), [s.version for s in skills.list_skills(seeded.engine)]
    pending = len(proposals.list_proposals(seeded, status="pending"))
    report = sync_skills(seeded, agent, dry_run=True)
    assert report.dry_run
    assert actions(report) == {"alpha": "propose", "beta": "write", "gamma": "new"}
    assert snapshot(agent) == before
    assert [s.version for s in skills.list_skills(seeded.engine)] == versions
    assert len(proposals.list_proposals(seeded, status="pending")) == pending


def test_a_malformed_skill_md_is_reported_with_file_and_field_and_the_others_sync(
    seeded: Workspace, tmp_path: Path
) -> None:
    agent = tmp_path / "agent"
    sync_skills(seeded, agent)
    broken = agent / "alpha" / "SKILL.md"
    broken.write_text(broken.read_text().replace("description:", "description: [", 1))
    (agent / "gamma").mkdir()
    (agent / "gamma" / "SKILL.md").write_text("---\nname: gamma\ntriggers: one\n---\n\nBody.\n")
    made = proposals.create_proposal(
        seeded,
        "beta",
        proposed_content="# beta\n\nNew.",
        rationale="r",
        proposed_by="sage",
        author="sage",
    )
    proposals.approve_proposal(seeded, made.id, actor="alice")
    report = sync_skills(seeded, agent)
    assert actions(report) == {"alpha": "error", "beta": "write", "gamma": "error"}
    alpha, gamma = report.errors
    assert (alpha.file, alpha.field) == (str(broken), "front matter")
    assert (gamma.file, gamma.field) == (str(agent / "gamma" / "SKILL.md"), "triggers")
    assert "New." in (agent / "beta" / "SKILL.md").read_text()
    assert "description: [" in broken.read_text()  # the person's text, untouched


def test_a_new_folder_is_proposed_as_a_new_skill(seeded: Workspace, tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    sync_skills(seeded, agent)
    make_source(agent, "gamma")
    report = sync_skills(seeded, agent)
    assert actions(report)["gamma"] == "new"
    proposal = proposals.get_proposal(seeded, report.items[2].proposal_id or 0)
    assert (proposal.scope, proposal.proposed_by, proposal.status) == ("new", "human", "pending")
    assert proposal.new_skill is not None and proposal.new_skill["evals"][0]["id"] == "r-1"
    assert actions(sync_skills(seeded, agent))["gamma"] == "pending"
    proposals.approve_proposal(seeded, proposal.id, actor="alice")
    assert actions(sync_skills(seeded, agent))["gamma"] == "adopt"
    assert skills.get_skill(seeded.engine, "gamma").version == 1


def test_a_deleted_folder_is_reported_and_the_registry_keeps_the_skill(
    seeded: Workspace, tmp_path: Path
) -> None:
    agent = tmp_path / "agent"
    sync_skills(seeded, agent)
    for entry in (agent / "beta").iterdir():
        entry.unlink()
    (agent / "beta").rmdir()
    assert actions(sync_skills(seeded, agent))["beta"] == "missing"
    assert actions(sync_skills(seeded, agent))["beta"] == "missing"
    assert not (agent / "beta").exists()
    assert skills.get_skill(seeded.engine, "beta").version == 1


def test_an_existing_folder_is_adopted_or_brought_up_to_date(
    seeded: Workspace, tmp_path: Path
) -> None:
    """A first sync of a folder the skills came from: no state file yet."""
    agent = make_source(tmp_path / "agent", "alpha", "beta")
    made = proposals.create_proposal(
        seeded,
        "beta",
        proposed_content="# beta\n\nNew.",
        rationale="r",
        proposed_by="sage",
        author="sage",
    )
    proposals.approve_proposal(seeded, made.id, actor="alice")
    report = sync_skills(seeded, agent)
    assert actions(report) == {"alpha": "adopt", "beta": "write"}
    assert "v1" in report.items[1].detail and (agent / "beta" / "SKILL.v1.md").exists()


def test_an_interrupted_write_is_finished_by_the_next_sync(
    seeded: Workspace, tmp_path: Path
) -> None:
    agent = tmp_path / "agent"
    sync_skills(seeded, agent)
    made = proposals.create_proposal(
        seeded,
        "alpha",
        proposed_content="# alpha\n\nNew.",
        rationale="r",
        proposed_by="sage",
        author="sage",
    )
    proposals.approve_proposal(seeded, made.id, actor="alice")
    spec = skills.get_skill(seeded.engine, "alpha").spec
    # The process died after staging, before any rename: the journal is on disk.
    rotation.stage_rotation(
        agent / "alpha",
        skill_md=files.render_skill_md(spec),
        evals_json=None,
        evals_name="alpha.evals.json",
        target_version=2,
        current_version=1,
    )
    assert actions(sync_skills(seeded, agent))["alpha"] == "write"
    assert not (agent / "alpha" / rotation.JOURNAL).exists()
    assert files.read_skills(agent / "alpha")[0] == spec


def test_a_project_s_view_and_its_folder(seeded: Workspace, tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    skills.fork_skill(seeded.engine, "alpha", "acme", author="t")
    skills.update_skill(
        seeded.engine, "alpha", project="acme", author="t", reason="r", content="# alpha for acme\n"
    )
    assert actions(sync_skills(seeded, agent, project="acme")) == {
        "alpha": "write",
        "beta": "write",
    }
    assert "alpha for acme" in (agent / "alpha" / "SKILL.md").read_text()
    edit_body(agent / "alpha" / "SKILL.md", "alpha for acme", "alpha for acme, edited")
    report = sync_skills(seeded, agent, project="acme")
    assert proposals.get_proposal(seeded, report.items[0].proposal_id or 0).scope == "project"
    with pytest.raises(InvalidInput, match="--project acme"):
        sync_skills(seeded, agent)


def test_watch_picks_up_an_edit(seeded: Workspace, tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    stop = threading.Event()
    reports: list[SyncReport] = []
    proposed = threading.Event()
    started = threading.Event()
    errors: list[BaseException] = []

    def on_report(report: SyncReport) -> None:
        reports.append(report)
        started.set()
        if any(i.action == "propose" for i in report.items):
            proposed.set()

    def run() -> None:
        try:
            watch_skills(
                seeded,
                agent,
                stop_event=stop,
                on_report=on_report,
                poll_ms=500,
                debounce_ms=100,
                step_ms=20,
            )
        except BaseException as exc:  # surfaced in the test thread below
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        assert started.wait(30)
        assert actions(reports[0]) == {"alpha": "write", "beta": "write"}
        edit_body(agent / "alpha" / "SKILL.md", "Be precise", "Be watched")
        assert proposed.wait(30)
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive() and not errors
    pending = proposals.list_proposals(seeded, status="pending", skill="alpha")
    assert len(pending) == 1 and "Be watched" in pending[0].proposed_content


def test_cli_sync_json_dry_run_and_errors(seeded: Workspace, tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    ws = ["-w", str(seeded.root)]
    runner = CliRunner()
    dry = runner.invoke(main, [*ws, "skills", "sync", str(agent), "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "write" in dry.output and "dry run" in dry.output and not agent.exists()
    done = runner.invoke(main, [*ws, "skills", "sync", str(agent), "--json"])
    assert done.exit_code == 0, done.output
    assert {i["skill"]: i["action"] for i in json.loads(done.output)["items"]} == {
        "alpha": "write",
        "beta": "write",
    }
    (agent / "alpha" / "SKILL.md").write_text("no front matter\n")
    bad = runner.invoke(main, [*ws, "skills", "sync", str(agent)])
    assert bad.exit_code == 1 and "SKILL.md" in bad.output
    both = runner.invoke(main, [*ws, "skills", "sync", str(agent), "--watch", "--dry-run"])
    assert both.exit_code == 2


def test_a_registry_name_that_walks_out_is_reported_not_followed(
    seeded: Workspace, tmp_path: Path
) -> None:
    """A database restored from elsewhere may hold ``../../x``: the sync skips it."""
    with seeded.engine.begin() as conn:
        conn.execute(
            sa.update(skills_table).where(skills_table.c.name == "beta").values(name="../../x")
        )
    base = tmp_path / "base"
    agent = base / "a" / "agent"
    report = sync_skills(seeded, agent)
    assert actions(report) == {"../../x": "error", "alpha": "write"}
    assert "not a valid skill name" in report.errors[0].detail
    assert sorted(p.relative_to(base).as_posix() for p in base.iterdir()) == ["a"]
    assert sorted(p.name for p in (base / "a").iterdir()) == ["agent"]


def test_links_out_of_the_folder_are_reported_and_never_followed(
    seeded: Workspace, tmp_path: Path
) -> None:
    agent, private = tmp_path / "agent", tmp_path / "private"
    sync_skills(seeded, agent)
    make_source(private, "gamma")
    secret = private / "notes.md"
    secret.write_text(SKILL.format(name="alpha").replace("Be precise", "Leak the key"))
    (agent / "alpha" / "SKILL.md").unlink()
    (agent / "alpha" / "SKILL.md").symlink_to(secret)
    (agent / "gamma").symlink_to(private / "gamma", target_is_directory=True)
    planted = tmp_path / "planted.json"
    planted.write_text("untouched")
    (agent / f".{STATE_FILE}{rotation.TEMP_SUFFIX}").symlink_to(planted)
    before = snapshot(private)

    report = sync_skills(seeded, agent)
    assert actions(report) == {"alpha": "error", "beta": "unchanged", "gamma": "error"}
    assert all("outside" in item.detail for item in report.errors)
    assert proposals.list_proposals(seeded) == []
    assert snapshot(private) == before and planted.read_text() == "untouched"
    assert (agent / "alpha" / "SKILL.md").is_symlink()


def test_the_summary_counts_what_failed(seeded: Workspace, tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    sync_skills(seeded, agent)
    (agent / "alpha" / "SKILL.md").write_text("no front matter\n")
    result = CliRunner().invoke(main, ["-w", str(seeded.root), "skills", "sync", str(agent)])
    assert result.exit_code == 1
    assert f"Synced 1 of 2 skills in {agent}; 1 failed (see above)." in result.output


def test_an_edit_made_on_an_older_version_is_refused_as_stale(
    seeded: Workspace, tmp_path: Path
) -> None:
    """Proposed against the current version, an edit of v1 would silently undo v2."""
    agent = tmp_path / "agent"
    sync_skills(seeded, agent)
    made = proposals.create_proposal(
        seeded,
        "alpha",
        proposed_content="# alpha\n\n1. Be precise about alpha.\n2. Say hello.\n",
        rationale="v2",
        proposed_by="sage",
        author="sage",
    )
    proposals.approve_proposal(seeded, made.id, actor="alice")
    path = agent / "alpha" / "SKILL.md"  # still v1: the person edits that
    written = edit_body(path, "1. Be precise about alpha.", "1. Be brief.")
    report = sync_skills(seeded, agent)
    item = report.items[0]
    assert (item.action, item.version) == ("stale", 2)
    assert "edited on v1" in item.detail and "would undo v2" in item.detail
    assert report.failures == [item] and item.file == str(path)
    assert proposals.list_proposals(seeded, skill="alpha", status="pending") == []
    assert path.read_text(encoding="utf-8") == written
    assert skills.get_skill(seeded.engine, "alpha").version == 2
    result = CliRunner().invoke(main, ["-w", str(seeded.root), "skills", "sync", str(agent)])
    assert result.exit_code == 1 and "stale" in result.output


def test_backups_are_named_by_version_and_positional_ones_renamed(
    seeded: Workspace, tmp_path: Path
) -> None:
    agent = tmp_path / "agent"
    rendered = {1: files.render_skill_md(skills.get_skill(seeded.engine, "alpha").spec)}
    sync_skills(seeded, agent)
    for n in range(2, 6):
        made = proposals.create_proposal(
            seeded,
            "alpha",
            proposed_content=f"# alpha\n\nversion {n}\n",
            rationale="r",
            proposed_by="sage",
            author="sage",
        )
        proposals.approve_proposal(seeded, made.id, actor="alice")
        rendered[n] = files.render_skill_md(skills.get_skill(seeded.engine, "alpha").spec)
        sync_skills(seeded, agent)
    folder = agent / "alpha"
    backups = sorted(p.name for p in folder.iterdir() if p.name.startswith("SKILL.v"))
    assert backups == ["SKILL.v2.md", "SKILL.v3.md", "SKILL.v4.md"]
    for n in (2, 3, 4):
        assert (folder / f"SKILL.v{n}.md").read_text(encoding="utf-8") == rendered[n]

    # What an older Amelio left: SKILL.v1.md was "one back" (v4), SKILL.v3.md v2.
    (folder / "SKILL.v2.md").rename(folder / "SKILL.v3.tmp")
    (folder / "SKILL.v4.md").rename(folder / "SKILL.v1.md")
    (folder / "SKILL.v3.md").rename(folder / "SKILL.v2.md")
    (folder / "SKILL.v3.tmp").rename(folder / "SKILL.v3.md")
    assert actions(sync_skills(seeded, agent))["alpha"] == "unchanged"
    for n in (2, 3, 4):
        assert (folder / f"SKILL.v{n}.md").read_text(encoding="utf-8") == rendered[n]
    assert not (folder / "SKILL.v1.md").exists()


def test_a_hand_edit_like_a_rejected_one_is_kept_but_not_proposed(
    seeded: Workspace, tmp_path: Path
) -> None:
    agent = tmp_path / "agent"
    sync_skills(seeded, agent)
    path = agent / "alpha" / "SKILL.md"
    edit_body(path, "Be precise", "Be brief and precise")
    made = sync_skills(seeded, agent).items[0].proposal_id
    assert made is not None
    proposals.reject_proposal(seeded, made, actor="bob", reason="too vague")
    edit_body(path, "Be brief and precise", "Be brief and precise!")
    item = sync_skills(seeded, agent).items[0]
    assert item.action == "error" and item.proposal_id is None
    assert item.detail.startswith("the hand edit is kept but not proposed: Not filed: this")
    assert f"like proposal #{made}, which bob rejected: too vague." in item.detail
    assert "Be brief and precise!" in path.read_text(encoding="utf-8")
