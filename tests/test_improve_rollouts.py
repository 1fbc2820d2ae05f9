"""Canary rollouts: a share of conversations on the new version, sticky, judged by a
sequential test that pauses on a regression and promotes after a stage.

The test's power and false-alarm rate are measured by benchmarks/canary.py; these
tests check the behaviour around it with small, lopsided numbers."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from amelio import skills
from amelio.assistant.prompt import build_prompt
from amelio.assistant.quality import give_answer_feedback
from amelio.assistant.respond import respond
from amelio.cli import main
from amelio.errors import Conflict, InvalidInput
from amelio.improve import proposals as props
from amelio.improve import rollouts as ro
from amelio.llm.fake import ScriptedProvider
from amelio.workspace.folder import Workspace, open_workspace

NEW = "# Git help\n\nAlways use --force-with-lease.\n"
MESSAGE = "git push rejected"


@pytest.fixture
def ws(workspace: Workspace, examples: Path) -> Workspace:
    skills.import_skills(workspace.engine, examples)
    return workspace


def canary(ws: Workspace, percent: int = 20) -> ro.Rollout:
    """git-help's proposal approved for ``percent`` % of conversations."""
    made = props.create_proposal(
        ws, "git-help", proposed_content=NEW, rationale="safer pushes", author="ana"
    )
    props.approve_proposal(ws, made.id, actor="ana", canary=percent)
    [rollout] = ro.list_rollouts(ws)
    return rollout


def ask(ws: Workspace, user: str, answer: str = "ok") -> int:
    """One answer for ``user``; returns the skill version that answered."""
    reply = respond(ws, MESSAGE, user=user, provider=ScriptedProvider(default=answer))
    assert reply.applied_skill == "git-help" and reply.skill_version is not None
    return reply.skill_version


def test_a_canary_serves_its_share_stickily_and_records_the_version(ws: Workspace) -> None:
    r = canary(ws, 30)
    assert (r.percent, r.status, r.to_version, r.from_version) == (30, "running", 2, 1)
    # The skill's row holds the new version; the old one is served from its history.
    assert skills.get_skill(ws.engine, "git-help").version == 2
    versions = {f"u{i}": ask(ws, f"u{i}") for i in range(300)}
    share = sum(v == 2 for v in versions.values()) / len(versions)
    assert 0.22 < share < 0.38  # 30 % give or take sampling noise over 300 people
    for user in list(versions)[:20]:  # sticky: the same person, the same version
        assert ask(ws, user) == versions[user]
    # The control arm gets the old rulebook in its prompt, the canary arm the new one.
    control = next(u for u, v in versions.items() if v == 1)
    new = next(u for u, v in versions.items() if v == 2)
    assert "force-with-lease" in build_prompt(ws, MESSAGE, unit=f"u:{new}").system
    assert (
        "Always use --force-with-lease" not in build_prompt(ws, MESSAGE, unit=f"u:{control}").system
    )
    # Raising the share only moves people onto the new version.
    ro.promote_rollout(ws, r.id, actor="ana")
    assert all(ask(ws, u) == 2 for u, v in list(versions.items())[:60] if v == 2)


def test_bad_canaries_are_refused(ws: Workspace) -> None:
    made = props.create_proposal(ws, "git-help", proposed_content=NEW, rationale="r", author="a")
    for bad in (0, 100, 150, -5):
        with pytest.raises(InvalidInput, match="between 1 and 99"):
            props.approve_proposal(ws, made.id, actor="ana", canary=bad)
    assert props.get_proposal(ws, made.id).status == "pending"  # nothing half-written
    props.approve_proposal(ws, made.id, actor="ana", canary=10)
    second = props.create_proposal(
        ws, "git-help", proposed_content=NEW + "More.\n", rationale="r", author="a"
    )
    with pytest.raises(Conflict, match="already has a canary rollout"):
        props.approve_proposal(ws, second.id, actor="ana", canary=10)
    with pytest.raises(Conflict, match="already has a canary rollout"):
        props.approve_proposal(ws, second.id, actor="ana")  # a plain approval too
    assert props.get_proposal(ws, second.id).status == "pending"
    [r] = ro.list_rollouts(ws)
    ro.pause_rollout(ws, r.id, actor="ana")
    with pytest.raises(Conflict, match="paused"):
        ro.promote_rollout(ws, r.id, actor="ana")
    ro.abort_rollout(ws, r.id, actor="ana")
    with pytest.raises(Conflict, match="aborted"):
        ro.abort_rollout(ws, r.id, actor="ana")


def test_a_new_skill_has_no_canary(ws: Workspace) -> None:
    skill_md = (
        "---\nname: refunds\ndescription: Refund questions.\ntriggers: [refund]\n"
        "keywords: [money back]\n---\n\n# Refunds\n\n1. Quote the policy that applies.\n"
    )
    made = props.create_skill_proposal(ws, skill_md, rationale="r", author="a")
    with pytest.raises(InvalidInput, match="creates a skill"):
        props.approve_proposal(ws, made.id, actor="ana", canary=10)


def test_a_regression_pauses_it_and_everyone_goes_back(ws: Workspace) -> None:
    """Every answer of the new version gets a 👎, none of the old: the test crosses
    early, the rollout pauses, and everyone is served the old version."""
    r = canary(ws, 50)
    for i in range(160):
        reply = respond(ws, MESSAGE, user=f"u{i}", provider=ScriptedProvider(default="ok"))
        if reply.skill_version == r.to_version:
            give_answer_feedback(ws, reply.interaction_id, "down", user=f"u{i}")
    [check] = ro.check_rollouts(ws)
    assert check.action == "paused" and "👎 rate" in (check.reason or "")
    paused = ro.get_rollout(ws, r.id)
    assert paused.status == "paused" and paused.reason and "regression" in paused.reason
    assert paused.last_check and paused.last_check["regressions"] == ["down"]
    test = paused.last_check["tests"]["down"]
    assert test["crossed"] and test["interval"][0] > 0
    assert {ask(ws, f"u{i}") for i in range(40)} == {r.from_version}
    assert ro.check_rollouts(ws) == []  # a paused rollout is not checked again
    curves = ro.rollout_curves(ws, r.id)
    assert curves["canary"][-1][1] == 1.0 and curves["control"][-1][1] == 0.0


def test_a_stage_that_passes_moves_on_by_itself(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AMELIO_ROLLOUT_STAGE_EXPOSURES", "10")
    fast = open_workspace(ws.root)
    try:
        r = canary(fast, 30)
        for i in range(80):
            ask(fast, f"u{i}")
        assert ro.check_rollouts(fast)[0].action == "promoted"
        assert ro.get_rollout(fast, r.id).percent == 50
        assert ro.check_rollouts(fast)[0].action == "none"  # the new stage starts at 0
        for i in range(80, 140):
            ask(fast, f"u{i}")
        assert ro.check_rollouts(fast)[0].action == "done"
        done = ro.get_rollout(fast, r.id)
        assert (done.status, done.percent) == ("done", 100)
        # The history keeps each change of stage or status, not every check.
        assert [(e["percent"], e["status"]) for e in done.history] == [
            (30, "running"),
            (50, "running"),
            (100, "done"),
        ]
        assert {ask(fast, f"u{i}") for i in range(20)} == {r.to_version}
    finally:
        fast.dispose()


def test_under_manual_promotion_a_passed_stage_waits_for_a_person(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AMELIO_ROLLOUT_STAGE_EXPOSURES", "10")
    monkeypatch.setenv("AMELIO_ROLLOUT_PROMOTE", "manual")
    held = open_workspace(ws.root)
    try:
        r = canary(held, 40)
        for i in range(60):
            ask(held, f"u{i}")
        assert ro.check_rollouts(held)[0].action == "ready"
        assert ro.get_rollout(held, r.id).percent == 40
        assert ro.promote_rollout(held, r.id, actor="ana").percent == 50
    finally:
        held.dispose()


def test_abort_rolls_the_skill_back(ws: Workspace) -> None:
    r = canary(ws, 50)
    old = skills.list_versions(ws.engine, "git-help")[0].spec.content
    ro.abort_rollout(ws, r.id, actor="ana", reason="not now")
    skill = skills.get_skill(ws.engine, "git-help")
    assert skill.version == 3 and skill.spec.content == old
    assert ro.get_rollout(ws, r.id).status == "aborted"
    assert {ask(ws, f"u{i}") for i in range(10)} == {3}
    log = skills.skill_log(ws.engine, "git-help")
    assert log[-1].reason == "rollback to v1"


def test_another_process_sees_a_pause_at_its_next_request(ws: Workspace) -> None:
    """Two workspaces on one database stand for two workers: no restart, no cache."""
    r = canary(ws, 99)
    other = open_workspace(ws.root)
    try:
        assert build_prompt(other, MESSAGE, unit="u:zoe").applied.version == 2  # type: ignore[union-attr]
        ro.pause_rollout(ws, r.id, actor="ana")
        assert build_prompt(other, MESSAGE, unit="u:zoe").applied.version == 1  # type: ignore[union-attr]
    finally:
        other.dispose()


def test_the_sequential_test_is_quiet_on_equal_arms_and_loud_on_a_gap() -> None:
    same = ro.msprt(100, 1000, 1000, 10_000, alpha=0.05)
    assert not same["crossed"] and same["interval"][0] < 0 < same["interval"][1]
    gap = ro.msprt(150, 1000, 1000, 10_000, alpha=0.05)
    assert gap["crossed"] and gap["interval"][0] > 0
    assert ro.msprt(1, 10, 0, 10, alpha=0.05)["interval"] is None  # too few to test


# -- the faces ---------------------------------------------------------------------------


@pytest.fixture
def keys_(ws: Workspace) -> tuple[dict[str, str], dict[str, str]]:
    from amelio.workspace import keys

    _, bot = keys.create_key(ws.engine, name="bot", role="bot")
    _, admin = keys.create_key(ws.engine, name="ana", role="admin")
    return {"Authorization": f"Bearer {bot}"}, {"Authorization": f"Bearer {admin}"}


def test_over_http_an_admin_starts_pauses_and_aborts(
    ws: Workspace, keys_: tuple[dict[str, str], dict[str, str]]
) -> None:
    from fastapi.testclient import TestClient

    from amelio.server import create_app

    as_bot, as_admin = keys_
    made = props.create_proposal(ws, "git-help", proposed_content=NEW, rationale="r", author="a")
    with TestClient(create_app(ws)) as client:
        bad = client.post(
            f"/v1/proposals/{made.id}/approve", json={"canary": 100}, headers=as_admin
        )
        assert bad.status_code == 422
        ok = client.post(f"/v1/proposals/{made.id}/approve", json={"canary": 25}, headers=as_admin)
        assert ok.status_code == 200, ok.text
        [listed] = client.get("/v1/rollouts", headers=as_bot).json()["rollouts"]
        assert (listed["percent"], listed["status"]) == (25, "running")
        rid = listed["id"]
        # /v1/prompt sticks to the user, else the conversation: 40 of them see both.
        seen = {
            "Always use --force-with-lease"
            in client.post("/v1/prompt", json={"message": MESSAGE, **who}, headers=as_bot).json()[
                "system"
            ]
            for i in range(20)
            for who in ({"user": f"u{i}"}, {"conversation": f"thread-{i}"})
        }
        assert seen == {True, False}
        assert client.post(f"/v1/rollouts/{rid}/pause", headers=as_bot).status_code == 403
        assert client.post(f"/v1/rollouts/{rid}/pause", headers=as_admin).status_code == 200
        again = client.post(f"/v1/rollouts/{rid}/promote", headers=as_admin)
        assert again.status_code == 409 and "paused" in again.text
        one = client.get(f"/v1/rollouts/{rid}", headers=as_bot).json()
        assert one["status"] == "paused" and set(one["curves"]) == {"control", "canary"}
        done = client.post(f"/v1/rollouts/{rid}/abort", json={"reason": "no"}, headers=as_admin)
        assert done.json()["status"] == "aborted"
        assert client.get("/v1/rollouts/999", headers=as_bot).status_code == 404


def test_the_cli_approves_with_a_canary_and_follows_it(ws: Workspace) -> None:
    made = props.create_proposal(ws, "git-help", proposed_content=NEW, rationale="r", author="a")

    def cli(*args: str, code: int = 0) -> str:
        result = CliRunner().invoke(main, ["-w", str(ws.root), *args])
        assert result.exit_code == code, result.output
        return result.output

    assert "between 1 and 99" in cli("proposals", "approve", str(made.id), "--canary", "0", code=1)
    said = cli("proposals", "approve", str(made.id), "--canary", "15")
    assert "live for 15 % of conversations" in said
    [r] = ro.list_rollouts(ws)
    for i in range(40):
        ask(ws, f"u{i}")
    assert "running" in cli("rollouts", "list")
    assert f"Rollout {r.id}: none" in cli("rollouts", "check")
    shown = cli("rollouts", "show", str(r.id))
    assert "v1 → v2" in shown and "answers" in shown
    assert "aborted" in cli("rollouts", "abort", str(r.id), "-m", "changed my mind")
    assert "Error:" in cli("rollouts", "promote", str(r.id), code=1)


def test_the_dashboard_draws_both_arms_and_an_admin_pauses(ws: Workspace) -> None:
    import re

    from fastapi.testclient import TestClient

    from amelio.server import create_app
    from amelio.workspace import keys

    r = canary(ws, 50)
    for i in range(60):
        ask(ws, f"u{i}")
    ro.check_rollouts(ws)
    _, admin = keys.create_key(ws.engine, name="ops", role="admin")
    with TestClient(create_app(ws)) as client:
        client.post("/login", data={"api_key": admin, "next": "/rollouts"})
        page = client.get("/rollouts").text
        assert f"#{r.id} git-help" in page and "v1 → v2" in page
        assert page.count("<polyline") == 2 and 'class="canary" points="' in page
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
        assert csrf is not None
        done = client.post(
            f"/rollouts/{r.id}",
            data={"csrf": csrf.group(1), "action": "pause"},
            follow_redirects=False,
        )
        assert done.status_code == 303 and "rollout_paused" in done.headers["location"]
        forged = client.post(
            f"/rollouts/{r.id}", data={"csrf": "0" * 32, "action": "abort"}, follow_redirects=False
        )
        assert forged.status_code in (303, 403)
    assert ro.get_rollout(ws, r.id).status == "paused"


def test_a_skill_edited_by_hand_ends_its_rollout(ws: Workspace) -> None:
    r = canary(ws, 50)
    skills.update_skill(ws.engine, "git-help", author="ana", reason="hotfix", content=NEW + "Hi.\n")
    [check] = ro.check_rollouts(ws)
    assert check.action == "aborted" and "moved on to v3" in (check.reason or "")
    assert ro.get_rollout(ws, r.id).status == "aborted"
    assert skills.get_skill(ws.engine, "git-help").version == 3  # no rollback over the edit
