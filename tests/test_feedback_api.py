"""Feedback events through the HTTP API and the ``amelio feedback`` commands."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from fastapi.testclient import TestClient

from amelio import db
from amelio.cli import main
from amelio.db.schema import feedback_events
from amelio.feedback import Collector, feedback_stats
from amelio.feedback.examples import example_event
from amelio.server import create_app
from amelio.workspace import keys
from amelio.workspace.folder import Workspace, open_workspace

Api = tuple[TestClient, dict[str, str], Collector]


@pytest.fixture
def api(workspace: Workspace) -> Iterator[Api]:
    _, token = keys.create_key(workspace.engine, name="web", role="client")
    with TestClient(create_app(workspace)) as client:
        yield client, {"Authorization": f"Bearer {token}"}, Collector(workspace)


def ndjson(events: list[dict[str, object]]) -> bytes:
    return "\n".join(json.dumps(e) for e in events).encode()


def test_schema_is_public(api: Api) -> None:
    client, _, _ = api
    r = client.get("/v1/feedback/schema")
    assert r.status_code == 200 and r.json()["title"] == "MartyFeedbackEventV1"


def test_ingest_answers_202_with_a_status_per_event(api: Api, workspace: Workspace) -> None:
    client, h, c = api
    events = [
        example_event("result_clicked", signer=c.signer),
        example_event("vote_up"),
        example_event("vote_up", consent="denied"),
    ]
    events.append(dict(events[0]))
    r = client.post("/v1/feedback/events", headers=h, content=ndjson(events))
    assert r.status_code == 202, r.text
    body = r.json()
    assert (body["accepted"], body["duplicate"], body["rejected"], body["dropped"]) == (2, 1, 0, 1)
    assert [e["status"] for e in body["events"]] == ["accepted", "accepted", "dropped", "duplicate"]
    assert body["events"][0] == {"index": 0, "eventId": events[0]["eventId"], "status": "accepted"}
    # durable: another engine, as another process would, sees them at once
    other = db.create_engine(workspace.settings.effective_database_url)
    try:
        with other.connect() as conn:
            assert conn.scalar(sa.select(sa.func.count()).select_from(feedback_events)) == 2
            if conn.dialect.name == "sqlite":  # the durable level was only for that write
                assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1
    finally:
        other.dispose()
    bad = example_event("result_clicked")  # no token
    r = client.post("/v1/feedback/events", headers=h, json=[bad])
    assert r.status_code == 202
    assert r.json()["events"][0]["field"] == "request.feedbackToken"


def test_ingest_needs_a_client_key_or_better(api: Api, workspace: Workspace) -> None:
    client, _, _ = api
    body = ndjson([example_event("vote_up")])
    assert client.post("/v1/feedback/events", content=body).status_code == 401
    _, bot = keys.create_key(workspace.engine, name="bot", role="bot")
    r = client.post("/v1/feedback/events", content=body, headers={"Authorization": f"Bearer {bot}"})
    assert r.status_code == 202
    stats = client.get("/v1/feedback/stats", headers={"Authorization": f"Bearer {bot}"})
    assert stats.json()["byType"] == {"vote_up": 1}
    assert client.get("/v1/feedback/stats", headers=api[1]).status_code == 403


def test_oversized_batches_are_413(api: Api, workspace: Workspace) -> None:
    client, h, _ = api
    many = ndjson([example_event("vote_up") for _ in range(501)])
    r = client.post("/v1/feedback/events", headers=h, content=many)
    assert r.status_code == 413 and "500 events" in r.json()["error"]["message"]
    heavy = json.dumps([example_event("vote_up"), " " * 1_000_000]).encode()
    r = client.post("/v1/feedback/events", headers=h, content=heavy)
    assert r.status_code == 413 and r.json()["error"]["code"] == "input_too_large"

    def chunks() -> Iterator[bytes]:  # no Content-Length: refused while streaming
        for _ in range(11):
            yield b" " * 100_000

    r = client.post("/v1/feedback/events", headers=h, content=chunks())
    assert r.status_code == 413
    assert client.post("/v1/feedback/events", headers=h, content=b"").status_code == 422
    assert feedback_stats(workspace)["total"] == 0


def test_rate_limited_requests_are_429_with_retry_after(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AMELIO_FEEDBACK_RATE_SESSION", "0.5")
    monkeypatch.setenv("AMELIO_FEEDBACK_BURST_SESSION", "2")
    ws = open_workspace(workspace.root)
    try:
        _, token = keys.create_key(ws.engine, name="web", role="client")
        h = {"Authorization": f"Bearer {token}"}
        with TestClient(create_app(ws)) as client:
            ok = client.post(
                "/v1/feedback/events",
                headers=h,
                content=ndjson([example_event("vote_up") for _ in range(2)]),
            )
            assert ok.status_code == 202
            r = client.post(
                "/v1/feedback/events",
                headers=h,
                content=ndjson(
                    [example_event("vote_up"), example_event("vote_up", session_id="s-2")]
                ),
            )
            assert r.status_code == 429
            assert r.headers["Retry-After"] == "2"
            assert r.json()["error"]["details"] == {"retryAfter": 2, "scope": "session"}
        assert feedback_stats(ws)["total"] == 2  # nothing of the refused request
    finally:
        ws.dispose()


# -- CLI ------------------------------------------------------------------------------


def test_cli_schema_ingest_verify_purge(workspace: Workspace, tmp_path: Path) -> None:
    runner = CliRunner()
    w = ["-w", str(workspace.root)]
    schema = runner.invoke(main, ["feedback", "schema"])
    assert schema.exit_code == 0 and json.loads(schema.stdout)["title"] == "MartyFeedbackEventV1"
    signer = Collector(workspace).signer
    events = [example_event("result_clicked", signer=signer), example_event("vote_down")]
    path = tmp_path / "events.ndjson"
    path.write_bytes(ndjson(events) + b"\n\n{oops\n" + json.dumps(events[0]).encode() + b"\n")
    result = runner.invoke(main, [*w, "feedback", "ingest", str(path)])
    assert result.exit_code == 0, result.output
    assert "2 accepted, 1 duplicate, 1 rejected, 0 dropped" in result.stdout
    assert "line 4: event: not valid JSON" in result.stdout
    as_json = runner.invoke(main, [*w, "feedback", "ingest", str(path), "--json"])
    assert json.loads(as_json.stdout)["duplicate"] == 3
    array = tmp_path / "events.json"
    array.write_text(json.dumps([example_event("query_abandoned", signer=signer)]))
    assert "1 accepted" in runner.invoke(main, [*w, "feedback", "ingest", str(array)]).stdout

    verify = runner.invoke(main, [*w, "feedback", "verify"])
    assert verify.exit_code == 0 and "OK: 3 events verified" in verify.stdout
    stats = json.loads(runner.invoke(main, [*w, "feedback", "stats", "--json"]).stdout)
    assert stats["total"] == 3
    with workspace.engine.begin() as conn:
        conn.execute(feedback_events.delete().where(feedback_events.c.seq == 2))
    verify = runner.invoke(main, [*w, "feedback", "verify"])
    assert verify.exit_code == 1 and "FAILED at seq 2" in verify.stdout
    assert json.loads(runner.invoke(main, [*w, "feedback", "verify", "--json"]).stdout)["seq"] == 2
    purge = runner.invoke(main, [*w, "feedback", "purge", "--older-than", "0"])
    assert purge.exit_code == 0 and "Purged 2 events" in purge.stdout
    assert runner.invoke(main, [*w, "feedback", "purge", "--older-than", "-1"]).exit_code == 2
    assert runner.invoke(main, [*w, "feedback", "ingest", "missing.ndjson"]).exit_code == 2


def test_cli_feedback_id_still_means_give(workspace: Workspace) -> None:
    runner = CliRunner()
    w = ["-w", str(workspace.root)]
    for args in (["feedback", "12", "up"], ["feedback", "give", "12", "up"]):
        result = runner.invoke(main, [*w, *args])
        assert result.exit_code == 1 and "12" in result.stderr  # no such interaction
    assert runner.invoke(main, [*w, "feedback", "12", "meh"]).exit_code == 2
    assert runner.invoke(main, [*w, "feedback", "nope"]).exit_code == 2
    assert "give" in runner.invoke(main, ["feedback", "--help"]).stdout
