"""The nightly loop: underperformers, template proposals, approvals, files, the log."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from amelio import skills
from amelio.assistant import learnings
from amelio.assistant.quality import (
    Finding,
    daily_metrics,
    find_underperformers,
    give_answer_feedback,
    quality_metrics,
    recent_failed_answers,
    rule_stats,
)
from amelio.assistant.respond import log_exchange, respond
from amelio.assistant.stats import wilson_interval
from amelio.cli import main
from amelio.demo.app import load_recorded_interactions
from amelio.errors import Conflict, Forbidden, InvalidInput, NotFound
from amelio.improve import proposals as props
from amelio.improve.drafts import Drafted
from amelio.improve.nightly import last_report, run_improve
from amelio.improve.templates import SECTION_START, template_proposal
from amelio.llm.fake import ScriptedProvider
from amelio.server import create_app
from amelio.workspace import keys
from amelio.workspace.folder import Workspace, open_workspace
from amelio.workspace.projects import create_project

FORCE = "Run git push --force."
SAFE = "Run `git pull --rebase`, then git push --force-with-lease."
NEW_SKILL = """---
name: refund-policy
description: Answers refund questions from the written policy.
triggers: [refund]
keywords: [policy, money back]
---

# Refund policy

1. Quote the policy section that applies.
"""


def answer(ws: Workspace, message: str, text: str, project: str = "default") -> int:
    return respond(
        ws, message, project=project, provider=ScriptedProvider(default=text)
    ).interaction_id


@pytest.fixture
def ws(workspace: Workspace, examples: Path) -> Workspace:
    skills.import_skills(workspace.engine, examples)
    return workspace


def git_history(ws: Workspace, fails: int, passes: int) -> None:
    for _ in range(fails):
        answer(ws, "git push rejected", FORCE)
    for _ in range(passes):
        answer(ws, "git push rejected", SAFE)


@pytest.mark.parametrize(
    ("fails", "passes", "selected"),
    [
        (2, 0, False),  # 2 uses: under the 3-use minimum, however bad
        (3, 0, True),
        (1, 3, True),  # 75 % < 80 %
        (1, 4, False),  # exactly 80 % is not under 80 %
        (0, 5, False),
    ],
)
def test_seed_rule_boundaries(ws: Workspace, fails: int, passes: int, selected: bool) -> None:
    git_history(ws, fails, passes)
    assert [f.skill for f in find_underperformers(ws)] == (["git-help"] if selected else [])


def test_feedback_alone_selects_and_ties_do_not(ws: Workspace) -> None:
    ids = [answer(ws, "git push rejected", SAFE) for _ in range(3)]
    give_answer_feedback(ws, ids[0], "down", user="a")
    give_answer_feedback(ws, ids[1], "up", user="b")
    assert find_underperformers(ws) == []  # 1 👎 vs 1 👍
    give_answer_feedback(ws, ids[2], "down", user="c")
    [finding] = find_underperformers(ws)
    assert finding.reasons == ("more 👎 (2) than 👍 (1)",)


def test_a_fixit_is_negative_feedback_once_per_person_and_answer(ws: Workspace) -> None:
    ids = [answer(ws, "git push rejected", SAFE) for _ in range(3)]  # every rule passes
    give_answer_feedback(ws, ids[0], "up", user="a")
    give_answer_feedback(ws, ids[1], "fixit", user="b")
    assert find_underperformers(ws) == []  # one each
    give_answer_feedback(ws, ids[1], "down", user="b")  # the same person, the same answer
    assert find_underperformers(ws) == []
    give_answer_feedback(ws, ids[2], "fixit", user="c", comment="Name the remote branch")
    [finding] = find_underperformers(ws)
    assert finding.reasons == ("more 👎 or Fix It (2, 2 of them Fix It) than 👍 (1)",)
    metrics = finding.metrics
    assert (metrics.feedback_positive, metrics.feedback_negative, metrics.feedback_fixit) == (
        1,
        2,
        2,
    )
    assert sum(d.feedback_negative for d in daily_metrics(ws, "default")) == 2


#: Five skills with no eval rules of their own, a message for each, and the correction
#: the first Fix-It on each skill gave (the others are bare Fix-Its).
NEWCOMER = {
    "git-help": ("my push was rejected", "Show the exact command to recover"),
    "sql-review": ("review this query", "Point at the missing index by name"),
    "deployment": ("deploy the api", "List the rollback command first"),
    "meeting-notes": ("notes from the standup", "Put the owner next to each action"),
    "release-notes": ("write the changelog", "Group the entries under Added and Fixed"),
}


def test_fixits_alone_make_skills_underperform_and_get_proposals(
    workspace: Workspace, examples: Path
) -> None:
    """A newcomer's week: 23 Fix-Its on 25 answers of five skills that have no eval
    rules, so every answer "succeeds". The Fix-Its are negative feedback, so all five
    underperform and each gets a proposal from the corrections people wrote."""
    ws = workspace
    specs = [replace(s, evals=None) for s in skills.read_skills(examples) if s.name in NEWCOMER]
    skills.save_skills(ws.engine, specs)
    given = 0
    for position, (name, (message, correction)) in enumerate(NEWCOMER.items()):
        for n in range(5):
            reply = log_exchange(ws, f"{message} ({n})", "Done.", project="default", skills=[name])
            if n == 4 and position >= 3:  # 5 + 5 + 5 + 4 + 4 = 23
                continue
            comment = correction if n == 0 else None
            give_answer_feedback(ws, reply.interaction_id, "fixit", user=f"u{n}", comment=comment)
            given += 1
    assert given == 23
    metrics = quality_metrics(ws, "default")
    assert all(m.success_rate == 1.0 for m in metrics) and len(metrics) == 5
    assert sum(m.feedback_fixit for m in metrics) == sum(m.feedback_negative for m in metrics) == 23
    shown = CliRunner().invoke(main, ["-w", str(ws.root), "quality", "-p", "default"])
    assert shown.exit_code == 0 and "👎 or 🛠️" in shown.stdout
    assert shown.stdout.count("5 (5 🛠️)") == 3 and shown.stdout.count("4 (4 🛠️)") == 2

    report = run_improve(ws, notify=False)
    assert sorted(p["skill"] for p in report.proposals) == sorted(NEWCOMER)
    for made in report.proposals:
        content = props.get_proposal(ws, made["id"]).proposed_content
        assert f"- {NEWCOMER[made['skill']][1]} (Learned from fixit feedback.)" in content
        assert "Fix requested for" not in content
    reasons = {f["skill"]: f["reasons"] for f in report.projects[0]["underperformers"]}
    assert reasons["git-help"] == ["more 👎 or Fix It (5, 5 of them Fix It) than 👍 (0)"]


def test_daily_and_per_rule_figures_add_up_to_the_metrics(ws: Workspace) -> None:
    git_history(ws, 3, 1)
    ids = [answer(ws, "git push rejected", SAFE) for _ in range(2)]
    give_answer_feedback(ws, ids[0], "down", user="a")
    give_answer_feedback(ws, ids[1], "up", user="b")
    give_answer_feedback(ws, ids[1], "fixit", user="b", comment="Say --force-with-lease.")
    [metrics] = quality_metrics(ws, "default")
    days = [d for d in daily_metrics(ws, "default") if d.skill == metrics.skill]
    assert sum(d.applied_count for d in days) == metrics.applied_count == 6
    assert sum(d.success_count for d in days) == metrics.success_count == 3
    assert sum(d.feedback_positive for d in days) == metrics.feedback_positive == 1
    assert sum(d.feedback_negative for d in days) == metrics.feedback_negative == 2
    stats = rule_stats(ws, "default", metrics.skill)
    assert (
        {r: s.total - s.passed for r, s in stats.items() if s.passed < s.total}
        == metrics.rule_failures
        == {"gh-001": 3}
    )
    assert len(stats["gh-001"].failures) == 3 and stats["gh-001"].pass_rate == 0.5
    assert recent_failed_answers(ws, "default", metrics.skill) == (("gh-001", FORCE),) * 3
    with pytest.raises(NotFound):
        daily_metrics(ws, "nowhere")


def test_wilson_mode_does_not_over_read_small_samples(ws: Workspace) -> None:
    git_history(ws, 1, 3)  # 75 %: the seed rule flags it, the data cannot prove it
    assert [f.skill for f in find_underperformers(ws, mode="seed")] == ["git-help"]
    assert find_underperformers(ws, mode="wilson") == []
    git_history(ws, 20, 0)  # 3 of 24: clearly bad
    [finding] = find_underperformers(ws, mode="wilson")
    assert finding.success_bounds[1] < 0.8 and "Wilson" in finding.reasons[0]
    low, high = wilson_interval(3, 4, 0.95)
    assert 0.2 < low < 0.35 and 0.9 < high < 0.97
    with pytest.raises(InvalidInput):
        find_underperformers(ws, mode="bayes")


def test_template_is_deterministic_and_cites_evidence(ws: Workspace) -> None:
    git_history(ws, 3, 1)
    learnings.add_learning(ws, "Prefer --force-with-lease", skill="git-help", source="fixit")
    [finding] = find_underperformers(ws)
    spec = skills.get_skill(ws.engine, "git-help").spec
    first, second = template_proposal(spec, finding), template_proposal(spec, finding)
    assert first is not None and first == second
    assert first.content.startswith(spec.content.rstrip("\n"))
    assert SECTION_START in first.content
    assert "(Rule gh-001 failed in 3 of 4 answers.)" in first.content
    assert "- Prefer --force-with-lease (Learned from fixit feedback.)" in first.content
    assert "success rate 25% (1 of 4)" in first.rationale and "gh-001" in first.rationale
    # A second round replaces the section instead of stacking another.
    again = template_proposal(
        skills.SkillSpec(**{**spec.__dict__, "content": first.content}), finding
    )
    assert again is not None and again.content.count(SECTION_START) == 1


def test_template_lines_leave_out_what_the_skill_forbids(ws: Workspace) -> None:
    """git-help bans a plain --force, even quoted as a warning: its proposal must not
    teach the model the very flag (and the rule's name quotes it)."""
    git_history(ws, 3, 1)
    answer(ws, "git push rejected", "git push origin main -f")  # fails gh-002
    learnings.add_learning(ws, "Never suggest git push --force", skill="git-help", source="fixit")
    [finding] = find_underperformers(ws)
    spec = skills.get_skill(ws.engine, "git-help").spec
    draft = template_proposal(spec, finding)
    assert draft is not None
    section = draft.content[draft.content.index(SECTION_START) :]
    assert "- Avoid this: Never suggest … (use --force-with-lease). (Rule gh-001" in section
    assert "- Avoid this: Never suggest git push … (Rule gh-002" in section
    assert "- Never suggest git push … (Learned from fixit feedback.)" in section
    assert "… marks words left out because this skill forbids writing them." in section
    assert draft.evidence["linesCut"] == 3 and draft.evidence["linesDropped"] == 0
    assert props.own_rule_breaks(spec, draft.content) == ()
    assert [p["skill"] for p in run_improve(ws, notify=False).proposals] == ["git-help"]


def test_a_draft_that_breaks_its_own_skill_rules_is_not_filed(ws: Workspace) -> None:
    git_history(ws, 3, 0)

    def careless(ws: Workspace, finding: Finding) -> Drafted:
        spec = skills.get_skill(ws.engine, finding.skill).spec
        return Drafted(spec.content + "\nIf the lease fails, run git push --force.\n", "r")

    dry = run_improve(ws, dry_run=True, proposer=careless)
    report = run_improve(ws, proposer=careless, notify=False)
    for run in (dry, report):
        assert run.proposals == []
        [skipped] = run.projects[0]["skipped"]
        assert skipped["rules"] == ["gh-001"]
        assert skipped["reason"].startswith("not filed: the text it adds breaks the skill's own")
    assert "skipped git-help: not filed:" in Path(report.files[1]).read_text()
    # Only the findings' own proposal was filed (its line leaves the flag out).
    assert [p.author for p in props.list_proposals(ws)] == ["amelio findings"]
    assert all("push --force\n" not in p.proposed_content for p in props.list_proposals(ws))
    # The skill's own rulebook quotes the flag it forbids; a draft that keeps those
    # lines and adds nothing forbidden is filed.
    spec = skills.get_skill(ws.engine, "git-help").spec
    assert "`git push --force`" in spec.content
    assert props.own_rule_breaks(spec, spec.content + "\nPrefer git switch.\n") == ()


def test_improve_creates_reports_and_is_idempotent(ws: Workspace) -> None:
    git_history(ws, 3, 1)
    dry = run_improve(ws, dry_run=True)
    assert [p["skill"] for p in dry.proposals] == ["git-help"]
    assert props.list_proposals(ws) == [] and dry.files == [] and last_report(ws) is None
    report = run_improve(ws)
    assert [p["skill"] for p in report.proposals] == ["git-help"]
    assert all(Path(f).is_file() for f in report.files)
    saved = json.loads(Path(report.files[0]).read_text())
    assert saved["reportVersion"] == 1 and saved["runId"] == report.run_id
    assert "git-help" in Path(report.files[1]).read_text()
    again = run_improve(ws)
    assert again.proposals == []
    assert again.projects[0]["skipped"] == [
        {"skill": "git-help", "reason": f"proposal #{report.proposals[0]['id']} is pending"}
    ]
    assert len(props.list_proposals(ws)) == 1
    assert last_report(ws)["runId"] == again.run_id  # type: ignore[index]


def test_approve_makes_a_version_and_logs_it(ws: Workspace) -> None:
    git_history(ws, 3, 0)
    [made] = run_improve(ws).proposals
    proposal = props.get_proposal(ws, made["id"])
    assert proposal.diff().startswith("--- git-help v1\n+++ git-help proposal")
    approved = props.approve_proposal(ws, proposal.id, actor="ana", reason="looks right")
    assert (approved.status, approved.result_version) == ("approved", 2)
    skill = skills.get_skill(ws.engine, "git-help")
    assert skill.version == 2 and skill.spec.content == proposal.proposed_content
    log = [(e.kind, e.version, e.proposal_id) for e in skills.skill_log(ws.engine, "git-help")]
    assert log == [
        ("import", 1, None),
        ("proposal", None, proposal.id),
        ("approval", 2, proposal.id),
    ]
    with pytest.raises(Conflict, match="already approved"):
        props.reject_proposal(ws, proposal.id, actor="bob")
    with pytest.raises(NotFound):
        props.approve_proposal(ws, 999, actor="ana")


def test_reject_and_stale_proposals(ws: Workspace) -> None:
    first = props.create_proposal(
        ws, "git-help", proposed_content="# Git\n\nNew body", rationale="clearer", author="ana"
    )
    with pytest.raises(Conflict, match="still pending"):
        props.create_proposal(
            ws, "git-help", proposed_content="# Other", rationale="x", author="bob"
        )
    rejected = props.reject_proposal(ws, first.id, actor="bob", reason="too short")
    assert rejected.status == "rejected" and rejected.decision_reason == "too short"
    assert skills.skill_log(ws.engine, "git-help")[-1].kind == "rejection"

    stale = props.create_proposal(
        ws, "git-help", proposed_content="# Git v2", rationale="r", author="ana"
    )
    skills.update_skill(
        ws.engine, "git-help", content="# Edited by hand", author="carl", reason="typo"
    )
    with pytest.raises(Conflict, match="stale: it was written for git-help v1, which is now v2"):
        props.approve_proposal(ws, stale.id, actor="ana")
    assert skills.get_skill(ws.engine, "git-help").spec.content == "# Edited by hand\n"
    assert run_improve(ws).superseded == [stale.id]
    assert props.get_proposal(ws, stale.id).status == "superseded"
    with pytest.raises(InvalidInput, match="identical"):
        props.create_proposal(
            ws, "git-help", proposed_content="# Edited by hand", rationale="r", author="a"
        )


def test_concurrent_approvals_exactly_one_wins(ws: Workspace) -> None:
    proposal = props.create_proposal(
        ws, "git-help", proposed_content="# Git\n\nv2", rationale="r", author="ana"
    )
    outcomes: list[str] = []
    barrier = threading.Barrier(4)

    def approver(n: int) -> None:
        barrier.wait()
        try:
            props.approve_proposal(ws, proposal.id, actor=f"admin{n}")
            outcomes.append("won")
        except Conflict:
            outcomes.append("409")

    threads = [threading.Thread(target=approver, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["409", "409", "409", "won"]
    assert [v.version for v in skills.list_versions(ws.engine, "git-help")] == [1, 2]


def test_rollback_restores_an_old_version_as_new(ws: Workspace) -> None:
    proposal = props.create_proposal(
        ws, "git-help", proposed_content="# Git\n\nv2", rationale="r", author="ana"
    )
    props.approve_proposal(ws, proposal.id, actor="ana")
    result = CliRunner().invoke(
        main, ["-w", str(ws.root), "skills", "rollback", "git-help", "--to", "1"]
    )
    assert result.exit_code == 0, result.output
    skill = skills.get_skill(ws.engine, "git-help")
    assert skill.version == 3
    assert skill.spec.content == skills.list_versions(ws.engine, "git-help")[0].spec.content
    assert skills.skill_log(ws.engine, "git-help")[-1].kind == "rollback"


# -- file-backed skills: rotation ---------------------------------------------------------


@pytest.fixture
def file_ws(sqlite_workspace: Workspace, examples: Path) -> Workspace:
    """A workspace whose skills live in its own skills/ folder."""
    import shutil

    shutil.copytree(examples / "git-help", sqlite_workspace.skills_dir / "git-help")
    skills.import_skills(sqlite_workspace.engine, sqlite_workspace.skills_dir)
    return sqlite_workspace


def approve_new(ws: Workspace, body: str) -> None:
    proposal = props.create_proposal(
        ws, "git-help", proposed_content=body, rationale="r", author="ana"
    )
    props.approve_proposal(ws, proposal.id, actor="ana")


def test_approval_rotates_files_keeping_three_backups(file_ws: Workspace) -> None:
    """A backup is named by the registry version it holds, not by how far back it is."""
    folder = file_ws.skills_dir / "git-help"
    original = (folder / "SKILL.md").read_text()
    for n in range(1, 5):
        approve_new(file_ws, f"# Git\n\nversion {n + 1}")
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["SKILL.md", "SKILL.v2.md", "SKILL.v3.md", "SKILL.v4.md", "git-help.evals.json"]
    assert "version 5" in (folder / "SKILL.md").read_text()
    for version in (2, 3, 4):
        assert f"version {version}" in (folder / f"SKILL.v{version}.md").read_text()
    assert original not in {p.read_text() for p in folder.iterdir()}  # the oldest dropped
    # The file is the stored version: it imports back unchanged.
    assert skills.import_skills(file_ws.engine, file_ws.skills_dir).unchanged == ("git-help",)


def test_backups_an_older_amelio_named_by_position_get_their_version(
    file_ws: Workspace,
) -> None:
    folder = file_ws.skills_dir / "git-help"
    original = (folder / "SKILL.md").read_text()
    approve_new(file_ws, "# Git\n\nversion 2")
    approve_new(file_ws, "# Git\n\nversion 3")
    # As an older Amelio left them: SKILL.v1.md was "one back" (v2), SKILL.v2.md v1.
    (folder / "SKILL.v1.md").rename(folder / "old")
    (folder / "SKILL.v2.md").rename(folder / "SKILL.v1.md")
    (folder / "old").rename(folder / "SKILL.v2.md")
    approve_new(file_ws, "# Git\n\nversion 4")
    assert (folder / "SKILL.v1.md").read_text() == original
    assert "version 2" in (folder / "SKILL.v2.md").read_text()
    assert "version 3" in (folder / "SKILL.v3.md").read_text()


def test_crash_during_rotation_recovers_to_the_committed_version(
    file_ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = file_ws.skills_dir / "git-help"
    real_replace = os.replace
    calls = {"n": 0}

    def crash_after_first(src: Any, dst: Any) -> None:
        calls["n"] += 1
        if calls["n"] > 1 and ".amelio-new" in str(src):
            raise OSError("simulated crash")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", crash_after_first)
    with pytest.raises(OSError, match="simulated crash"):
        approve_new(file_ws, "# Git\n\ncrashed version")
    monkeypatch.setattr(os, "replace", real_replace)
    # The database committed v2; the folder is half-rotated until recovery runs.
    assert skills.get_skill(file_ws.engine, "git-help").version == 2
    assert props.recover_files(file_ws, "git-help") == "forward"
    assert "crashed version" in (folder / "SKILL.md").read_text()
    assert sorted(p.name for p in folder.iterdir()) == [
        "SKILL.md",
        "SKILL.v1.md",
        "git-help.evals.json",
    ]


# -- the demo, the API and the CLI ---------------------------------------------------------


def test_demo_data_selects_exactly_the_rule_s_skills(ws: Workspace) -> None:
    assert load_recorded_interactions(ws) == 21
    assert load_recorded_interactions(ws) == 0  # a second run adds nothing
    report = run_improve(ws, notify=False)
    assert sorted(p["skill"] for p in report.proposals) == [
        "customer-support-reply",
        "deployment",
        "git-help",
    ]
    underperformers = {f["skill"] for p in report.projects for f in p["underperformers"]}
    assert underperformers == {"customer-support-reply", "deployment", "git-help"}


@pytest.fixture
def api(ws: Workspace) -> Iterator[tuple[TestClient, dict[str, dict[str, str]]]]:
    headers = {
        role: {"Authorization": "Bearer " + keys.create_key(ws.engine, name=role, role=role)[1]}
        for role in ("admin", "bot")
    }
    with TestClient(create_app(ws)) as client:
        yield client, headers


def test_proposal_routes(api: tuple[TestClient, dict[str, dict[str, str]]], ws: Workspace) -> None:
    client, h = api
    r = client.post(
        "/v1/proposals",
        headers=h["admin"],
        json={
            "skill": "git-help",
            "proposedContent": "# Git\n\nHuman edit",
            "rationale": "clearer",
        },
    )
    assert r.status_code == 201 and r.json()["proposedBy"] == "human"
    pid = r.json()["id"]
    assert "+Human edit" in client.get(f"/v1/proposals/{pid}", headers=h["bot"]).json()["diff"]
    listed = client.get("/v1/proposals?status=pending&skill=git-help", headers=h["bot"]).json()
    assert [p["id"] for p in listed["proposals"]] == [pid]
    assert client.post(f"/v1/proposals/{pid}/approve", headers=h["bot"]).status_code == 403
    r = client.post(f"/v1/proposals/{pid}/approve", headers=h["admin"], json={"reason": "ok"})
    assert r.status_code == 200 and r.json()["resultVersion"] == 2
    r = client.post(f"/v1/proposals/{pid}/approve", headers=h["admin"])
    assert r.status_code == 409 and r.json()["error"]["code"] == "conflict"
    events = client.get("/v1/skills/git-help/evolution", headers=h["bot"]).json()["events"]
    assert [e["kind"] for e in events] == ["import", "proposal", "approval"]
    assert client.get("/v1/proposals?status=nope", headers=h["bot"]).status_code == 422
    assert client.get("/v1/proposals/999", headers=h["bot"]).status_code == 404


def test_improve_route_and_cli(
    api: tuple[TestClient, dict[str, dict[str, str]]], ws: Workspace
) -> None:
    client, h = api
    git_history(ws, 3, 0)
    r = client.post("/v1/improve", headers=h["admin"], json={"dryRun": True})
    assert r.status_code == 200 and r.json()["dryRun"] is True
    runner = CliRunner()
    result = runner.invoke(main, ["-w", str(ws.root), "improve", "--no-notify"])
    assert result.exit_code == 0 and "git-help" in result.stdout
    assert client.get("/v1/improve/last", headers=h["bot"]).json()["report"]["runId"]
    listed = runner.invoke(main, ["-w", str(ws.root), "proposals", "list", "--json"])
    pid = json.loads(listed.stdout)[0]["id"]
    assert "@@" in runner.invoke(main, ["-w", str(ws.root), "proposals", "diff", str(pid)]).stdout
    assert (
        runner.invoke(
            main, ["-w", str(ws.root), "proposals", "reject", str(pid), "-m", "no"]
        ).exit_code
        == 0
    )
    log = runner.invoke(main, ["-w", str(ws.root), "skills", "log", "git-help"]).stdout
    assert "rejection" in log and f"#{pid}" in log
    assert runner.invoke(main, ["-w", str(ws.root), "improve", "--all", "-p", "x"]).exit_code == 2


@pytest.mark.parametrize("login", ["alice", None])
def test_proposer_and_approver_are_named_alike_without_user(
    ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, login: str | None
) -> None:
    """Cron and containers often run without $USER: the person proposing (here by a
    hand edit that `skills sync` files) and the person approving are still named by
    one rule, the login name wherever it is found, else "cli"."""
    import pwd

    for name in ("USER", "LOGNAME", "LNAME", "USERNAME"):
        monkeypatch.delenv(name, raising=False)
    if login is None:  # a uid with no account either

        def no_account(uid: int) -> pwd.struct_passwd:
            raise KeyError(f"getpwuid(): uid not found: {uid}")

        monkeypatch.setattr(pwd, "getpwuid", no_account)
    else:
        monkeypatch.setenv("LOGNAME", login)
    expected = login or "cli"
    runner = CliRunner()
    agent = tmp_path / "agent"
    base = ["-w", str(ws.root)]
    assert runner.invoke(main, [*base, "skills", "sync", str(agent)]).exit_code == 0
    edited = agent / "git-help" / "SKILL.md"
    edited.write_text(edited.read_text(encoding="utf-8") + "\nPrefer git switch.\n")
    synced = runner.invoke(main, [*base, "skills", "sync", str(agent)])
    assert synced.exit_code == 0, synced.output
    [proposal] = props.list_proposals(ws, status="pending")
    approved = runner.invoke(main, [*base, "proposals", "approve", str(proposal.id)])
    assert approved.exit_code == 0, approved.output
    decided = props.get_proposal(ws, proposal.id)
    assert decided.author.startswith(f"{expected} via skills sync ")
    assert decided.decided_by == expected


def test_one_rule_says_who_may_decide_a_proposal(ws: Workspace) -> None:
    """Every door asks :func:`props.authorize_decision`: an admin decides; a skill
    every project sees (a global one, or a new global one) needs an admin bound to
    no project; a project's fork or own skill, an admin of that project."""
    create_project(ws.engine, "acme")
    shared = props.create_proposal(
        ws, "git-help", project="acme", proposed_content="# Git\n\nv2", rationale="r", author="a"
    )
    skills.fork_skill(ws.engine, "deployment", "acme", author="t")
    forked = props.create_proposal(
        ws,
        "deployment",
        project="acme",
        proposed_content="# Deploy\n\nv2",
        rationale="r",
        author="a",
    )
    new_global = props.create_skill_proposal(ws, NEW_SKILL, rationale="r", author="a")
    new_local = props.create_skill_proposal(
        ws,
        NEW_SKILL.replace("refund-policy", "acme-refunds"),
        rationale="r",
        author="a",
        project="acme",
        scope="project",
    )
    everything = (shared, forked, new_global, new_local)
    assert all(props.may_decide(p, role="admin", projects=()) for p in everything)
    assert [props.may_decide(p, role="admin", projects=("acme",)) for p in everything] == [
        False,
        True,
        False,
        True,
    ]
    assert not any(props.may_decide(p, role="admin", projects=("beta",)) for p in everything)
    assert not any(props.may_decide(p, role="bot", projects=()) for p in everything)
    with pytest.raises(Forbidden, match="changes the global skill 'git-help'"):
        props.authorize_decision(shared, role="admin", projects=("acme",))
    with pytest.raises(Forbidden, match="creates the global skill 'refund-policy'"):
        props.authorize_decision(new_global, role="admin", projects=("acme",))
    with pytest.raises(Forbidden, match="is in project 'acme'; this is bound to beta"):
        props.authorize_decision(forked, role="admin", projects=("beta",))
    with pytest.raises(Forbidden, match="Only an admin"):
        props.authorize_decision(forked, role="bot", projects=("acme",))


def test_the_last_report_shows_a_key_bound_to_projects_only_those(
    api: tuple[TestClient, dict[str, dict[str, str]]], ws: Workspace
) -> None:
    """``GET /v1/improve/last`` and the dashboard's quality page: a key bound to acme
    reads acme's underperformers, not another project's findings, failing rules,
    learnings or superseded proposals."""
    client, h = api
    create_project(ws.engine, "acme")
    learnings.add_learning(ws, "Default's private rule: page the on-call", skill="git-help")
    git_history(ws, 3, 0)
    for _ in range(3):
        answer(ws, "git push rejected", FORCE, project="acme")
    stale = props.create_proposal(
        ws, "git-help", proposed_content="# Git\n\nv2", rationale="r", author="a"
    )
    skills.update_skill(ws.engine, "git-help", content="# Edited", author="c", reason="typo")
    made = run_improve(ws, notify=False)
    assert made.superseded == [stale.id]
    assert {p["project"] for p in made.projects} == {"default", "acme"}
    _, acme = keys.create_key(ws.engine, name="acme-bot", role="bot", projects=["acme"])

    everything = client.get("/v1/improve/last", headers=h["bot"]).json()["report"]
    assert everything == json.loads(json.dumps(last_report(ws)))  # a global key: all of it
    assert "private rule" in json.dumps(everything)
    scoped = client.get("/v1/improve/last", headers={"Authorization": f"Bearer {acme}"})
    report = scoped.json()["report"]
    assert [p["project"] for p in report["projects"]] == ["acme"]
    assert report["superseded"] == [] and everything["superseded"] == [stale.id]
    assert report["runId"] == made.run_id
    assert "private rule" not in scoped.text and '"default"' not in scoped.text

    page = client.post("/login", data={"api_key": acme}, follow_redirects=True)
    assert page.status_code == 200
    quality = client.get("/quality", params={"project": "acme"}).text
    assert "git-help</strong> (acme)" in quality
    assert "(default)" not in quality


def test_improve_sends_a_signed_webhook(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from amelio.improve.notifiers import verify_signature
    from amelio.testing import ThreadedServer

    received: list[tuple[bytes, dict[str, str]]] = []

    async def hook(request: Request) -> JSONResponse:
        received.append((await request.body(), dict(request.headers)))
        return JSONResponse({"ok": True})

    git_history(ws, 3, 0)
    with ThreadedServer(Starlette(routes=[Route("/hook", hook, methods=["POST"])])) as server:
        monkeypatch.setenv("AMELIO_NOTIFY_WEBHOOK_URL", f"{server.url}/hook")
        monkeypatch.setenv("AMELIO_NOTIFY_WEBHOOK_SECRET", "s3cret")
        monkeypatch.setenv("AMELIO_PUBLIC_URL", "https://amelio.example")
        configured = open_workspace(ws.root)
        try:
            report = run_improve(configured)
        finally:
            configured.dispose()
    assert report.deliveries[0]["ok"] is True
    body, headers = received[0]
    assert verify_signature(
        body, headers["x-amelio-timestamp"], headers["x-amelio-signature"], "s3cret"
    )
    sent = json.loads(body)
    assert sent["kind"] == "improve.report" and sent["payload"]["runId"] == report.run_id
    pid = report.proposals[0]["id"]
    # The link opens the proposal on the dashboard, where a signed-in admin decides: the
    # API's approve route is a POST with an admin key, which no chat client can send.
    assert {
        "label": f"Review #{pid} git-help",
        "action": "review",
        "proposalId": pid,
        "url": f"https://amelio.example/proposals/{pid}",
    } in sent["actions"]


# -- edits a person can review --------------------------------------------------------


def test_a_rejected_idea_is_not_proposed_again_by_anyone(
    api: tuple[TestClient, dict[str, dict[str, str]]], ws: Workspace
) -> None:
    """The template a person rejected is not filed again by the next nightly run, nor
    by a person over HTTP; a different change is, and so is one its author withdrew."""
    client, h = api
    git_history(ws, 3, 0)
    [made] = run_improve(ws).proposals
    props.reject_proposal(ws, made["id"], actor="bob", reason="the rules say it already")
    again = run_improve(ws)
    assert again.proposals == []
    [skipped] = again.projects[0]["skipped"]
    assert skipped["resembles"] == made["id"] and skipped["similarity"] == 1.0
    assert skipped["reason"].startswith(
        f"Not filed: this change to git-help is 100% like proposal #{made['id']}, which bob "
        "rejected: the rules say it already."
    )

    rejected = props.get_proposal(ws, made["id"])
    nearly = rejected.proposed_content.replace("Follow these rules", "Please follow these rules")
    r = client.post(
        "/v1/proposals",
        headers=h["admin"],
        json={"skill": "git-help", "proposedContent": nearly, "rationale": "again"},
    )
    assert r.status_code == 409 and r.json()["error"]["code"] == "resembles_rejected"
    assert r.json()["error"]["details"]["proposalId"] == made["id"]
    assert props.list_proposals(ws, status="pending") == []

    other = rejected.current_content + "\n## Undo\n\nSay how to undo each command.\n"
    mine = props.create_proposal(
        ws, "git-help", proposed_content=other, rationale="r", author="ann"
    )
    props.reject_proposal(ws, mine.id, actor="ann", reason="replaced")  # withdrawn
    props.create_proposal(
        ws, "git-help", proposed_content=other + "Be brief.\n", rationale="r", author="ann"
    )


def test_large_leaky_or_self_contradicting_changes(ws: Workspace) -> None:
    """A change over proposal_max_changed_lines is marked large; a line that copies 8
    words of a message it was written from is flagged; content that breaks the skill's
    own rules is not filed, whoever writes it."""
    message = "my push was rejected by the remote after I rebased my feature branch"
    iid = answer(ws, message, FORCE)
    current = skills.get_skill(ws.engine, "git-help").spec.content
    long = current + "".join(f"\n- Extra rule number {i}." for i in range(31))
    big = props.create_proposal(ws, "git-help", proposed_content=long, rationale="r", author="a")
    assert big.large and big.review["changedLines"] == 32  # 31 lines and a blank one
    [flag] = props.review_flags(big)
    assert flag.startswith("Large change: 32 lines added or removed (over ")
    shown = CliRunner().invoke(main, ["-w", str(ws.root), "proposals", "show", str(big.id)])
    assert "! Large change: 32 lines" in shown.output
    props.reject_proposal(ws, big.id, actor="bob")

    leaky = current + f"\nWhen {message}, run git pull --rebase first.\n"
    copied = props.create_proposal(
        ws,
        "git-help",
        proposed_content=leaky,
        rationale="r",
        author="a",
        evidence={"writtenFrom": [iid]},
    )
    assert not copied.large
    assert copied.review["leaks"] == [
        {"interactionId": iid, "line": f"When {message}, run git pull --rebase first."}
    ]
    assert props.review_flags(copied)[0].startswith(
        f"Copies 8+ words from interaction {iid}'s message, which it was written from"
    )
    props.reject_proposal(ws, copied.id, actor="bob")

    with pytest.raises(InvalidInput, match=r"breaks the skill.s own rule.*gh-001"):
        props.create_proposal(
            ws,
            "git-help",
            proposed_content=current + "\nIf all else fails, git push --force.\n",
            rationale="r",
            author="a",
        )
    assert props.list_proposals(ws, status="pending") == []
