"""The nightly loop: underperformers, template proposals, approvals, files, the log."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from amelio import skills
from amelio.assistant import learnings
from amelio.assistant.quality import (
    daily_metrics,
    find_underperformers,
    give_answer_feedback,
    quality_metrics,
    recent_failed_answers,
    rule_stats,
    wilson_interval,
)
from amelio.assistant.respond import respond
from amelio.cli import main
from amelio.demo.app import load_recorded_interactions
from amelio.errors import Conflict, InvalidInput, NotFound
from amelio.improve import proposals as props
from amelio.improve.nightly import last_report, run_improve
from amelio.improve.templates import SECTION_START, template_proposal
from amelio.llm.fake import ScriptedProvider
from amelio.server import create_app
from amelio.workspace import keys
from amelio.workspace.folder import Workspace, open_workspace

FORCE = "Run git push --force."
SAFE = "Run `git pull --rebase`, then git push --force-with-lease."


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
    assert sum(d.feedback_negative for d in days) == metrics.feedback_negative == 1
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
