"""Answers made elsewhere: log_exchange(), POST /v1/interactions and `amelio log`."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from fastapi.testclient import TestClient

from amelio import skills
from amelio.assistant.quality import find_underperformers, give_answer_feedback, quality_metrics
from amelio.assistant.respond import get_interaction, log_exchange
from amelio.cli import main
from amelio.db.schema import eval_results, interactions
from amelio.errors import Conflict, InvalidInput, ProjectNotFound, SkillNotFound
from amelio.server import create_app
from amelio.workspace import keys
from amelio.workspace.folder import Workspace

FORCE = "Run git push --force and you are done."
SAFE = "Run `git pull --rebase`, then git push --force-with-lease."
QUESTION = "git push rejected, help"


@pytest.fixture
def ws(workspace: Workspace, examples: Path) -> Workspace:
    skills.import_skills(workspace.engine, examples)
    return workspace


def _count(ws: Workspace) -> int:
    with ws.engine.connect() as conn:
        return int(conn.scalar(sa.select(sa.func.count()).select_from(interactions)) or 0)


def test_logged_answer_is_routed_checked_and_stored(ws: Workspace) -> None:
    reply = log_exchange(ws, QUESTION, FORCE, project="default", model="claude-code")
    assert reply.applied_skill == "git-help" and reply.skills[0].name == "git-help"
    assert reply.evals.success is False and reply.text.endswith(reply.footnotes[0])
    stored = get_interaction(ws, reply.interaction_id)
    assert stored["answer"] == FORCE and stored["provider"] == "external"
    assert stored["model"] == "claude-code" and stored["skillVersion"] == 1
    assert [e["ruleId"] for e in stored["evals"] if not e["passed"]] == ["gh-001"]


def test_named_skills_are_attributed_instead_of_routing(ws: Workspace) -> None:
    reply = log_exchange(
        ws,
        "what is the weather",
        SAFE,
        project="default",
        skills=["git-help", "code-review"],
        provider="cursor",
    )
    assert reply.applied_skill == "git-help"
    assert [h.name for h in reply.skills] == ["git-help", "code-review"]
    assert reply.evals.success and reply.completion.provider == "cursor"
    with pytest.raises(SkillNotFound):
        log_exchange(ws, QUESTION, SAFE, project="default", skills=["nope"])
    with pytest.raises(ProjectNotFound):
        log_exchange(ws, QUESTION, SAFE, project="nowhere")
    with pytest.raises(InvalidInput):
        log_exchange(ws, QUESTION, "   ", project="default")


def test_idempotency_key_returns_the_first_interaction(ws: Workspace) -> None:
    first = log_exchange(ws, QUESTION, FORCE, project="default", idempotency_key="k-1")
    again = log_exchange(ws, QUESTION, FORCE, project="default", idempotency_key="k-1")
    assert again.interaction_id == first.interaction_id
    assert again.footnotes == first.footnotes and again.applied_skill == "git-help"
    assert again.evals.success is False
    assert _count(ws) == 1
    with pytest.raises(Conflict, match="different exchange"):
        log_exchange(ws, QUESTION, SAFE, project="default", idempotency_key="k-1")
    # keys are per project, and NULL keys never collide
    from amelio.workspace.projects import create_project

    create_project(ws.engine, "other")
    log_exchange(ws, QUESTION, FORCE, project="other", idempotency_key="k-1")
    log_exchange(ws, QUESTION, FORCE, project="default")
    log_exchange(ws, QUESTION, FORCE, project="default")
    assert _count(ws) == 4
    with ws.engine.connect() as conn:
        assert conn.scalar(sa.select(sa.func.count()).select_from(eval_results)) == 4 * 3


def test_concurrent_retries_store_one_row(ws: Workspace) -> None:
    with ThreadPoolExecutor(4) as pool:
        ids = set(
            pool.map(
                lambda _: (
                    log_exchange(
                        ws, QUESTION, SAFE, project="default", idempotency_key="race"
                    ).interaction_id
                ),
                range(8),
            )
        )
    assert len(ids) == 1 and _count(ws) == 1


def test_logged_exchanges_count_in_quality_and_underperformers(ws: Workspace) -> None:
    for n in range(5):
        reply = log_exchange(ws, QUESTION, FORCE if n < 4 else SAFE, project="default")
    give_answer_feedback(ws, reply.interaction_id, "down", user="u1")
    [metrics] = [m for m in quality_metrics(ws, "default") if m.skill == "git-help"]
    assert metrics.applied_count == 5 and metrics.success_count == 1
    assert metrics.feedback_negative == 1 and metrics.rule_failures == {"gh-001": 4}
    found = find_underperformers(ws, "default", min_applied=5, min_success_rate=0.5)
    assert [f.skill for f in found] == ["git-help"]
    assert found[0].failed_answers and found[0].failed_answers[0][1] == FORCE


def test_api_logs_idempotently(ws: Workspace) -> None:
    _, token = keys.create_key(ws.engine, name="bot", role="bot")
    auth = {"Authorization": f"Bearer {token}"}
    body = {"message": QUESTION, "answer": FORCE, "model": "gpt-x", "skills": ["git-help"]}
    with TestClient(create_app(ws)) as http:
        first = http.post("/v1/interactions", json=body, headers={**auth, "Idempotency-Key": "abc"})
        assert first.status_code == 200, first.text
        data = first.json()
        assert data["appliedSkill"] == "git-help" and data["evals"]["success"] is False
        assert data["provider"] == "external" and data["model"] == "gpt-x"
        again = http.post("/v1/interactions", json=body, headers={**auth, "Idempotency-Key": "abc"})
        assert again.json()["interactionId"] == data["interactionId"]
        clash = http.post(
            "/v1/interactions",
            json={**body, "answer": SAFE},
            headers={**auth, "Idempotency-Key": "abc"},
        )
        assert clash.status_code == 409 and clash.json()["error"]["code"] == "conflict"
        feedback = http.post(
            f"/v1/interactions/{data['interactionId']}/feedback", json={"kind": "up"}, headers=auth
        )
        assert feedback.status_code == 200
        bad = http.post("/v1/interactions", json={**body, "skills": ["nope"]}, headers=auth)
        assert bad.status_code == 404
        empty = http.post("/v1/interactions", json={**body, "answer": ""}, headers=auth)
        assert empty.status_code == 422
        scoped = keys.create_key(ws.engine, name="a", role="bot", projects=["team-a"])[1]
        denied = http.post(
            "/v1/interactions", json=body, headers={"Authorization": f"Bearer {scoped}"}
        )
        assert denied.status_code == 403
    assert _count(ws) == 1


def test_cli_log(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMELIO_WORKSPACE", str(ws.root))
    runner = CliRunner()
    args = ["log", QUESTION, FORCE, "--model", "claude-code", "--idempotency-key", "cli-1"]
    done = runner.invoke(main, args)
    assert done.exit_code == 0, done.output
    assert "skill git-help: evals failed" in done.output
    assert "Never suggest --force" in done.output
    again = runner.invoke(main, [*args, "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.output)["model"] == "claude-code"
    piped = runner.invoke(main, ["log", QUESTION, "-", "--skill", "git-help", "--json"], input=SAFE)
    assert piped.exit_code == 0 and json.loads(piped.output)["evals"]["success"] is True
    missing = runner.invoke(main, ["log", QUESTION, SAFE, "--skill", "nope"])
    assert missing.exit_code == 1 and "Error:" in missing.output
    assert _count(ws) == 2
