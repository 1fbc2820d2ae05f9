"""The knowledge loop through the HTTP API (with the background worker) and the CLI."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from amelio import knowledge
from amelio.cli import main
from amelio.server import create_app
from amelio.workspace import keys
from amelio.workspace.folder import Workspace, open_workspace

TICKET = {
    "sourceId": "T-1",
    "kind": "ticket",
    "title": "VPN password reset",
    "text": "To reset the VPN password, open the self-service portal and choose Reset.",
    "url": "https://crm.example/tickets/1",
    "updatedAt": "2026-05-01T10:00:00Z",
}
WIKI = {
    "sourceId": "wiki/refunds",
    "kind": "wiki",
    "title": "Refund policy",
    "text": "Refunds are granted within thirty days with a receipt.",
    "updatedAt": "2026-05-02T10:00:00Z",
}


def until(check: Callable[[], Any], timeout: float = 5.0) -> Any:
    """Poll ``check`` until it returns something truthy (the worker runs in a thread)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.02)


@pytest.fixture
def headers(workspace: Workspace) -> dict[str, dict[str, str]]:
    return {
        role: {
            "Authorization": "Bearer " + keys.create_key(workspace.engine, name=role, role=role)[1]
        }
        for role in ("admin", "bot")
    }


def test_api_sync_is_fire_and_forget_and_the_worker_indexes(
    workspace: Workspace, headers: dict[str, dict[str, str]]
) -> None:
    admin, bot = headers["admin"], headers["bot"]
    with TestClient(create_app(workspace)) as client:
        assert client.get("/v1/knowledge/health").json()["worker"] == "running"  # public
        r = client.post("/v1/knowledge/notebooks", headers=admin, json={"name": "support"})
        assert r.status_code == 201 and r.json()["sources"] == 0
        assert (
            client.post(
                "/v1/knowledge/notebooks", headers=admin, json={"name": "support"}
            ).status_code
            == 409
        )
        assert (
            client.post("/v1/knowledge/notebooks", headers=bot, json={"name": "other"}).status_code
            == 403
        )
        assert (
            client.post(
                "/v1/knowledge/notebooks", headers=admin, json={"name": "Bad Name"}
            ).status_code
            == 422
        )

        r = client.post(
            "/v1/knowledge/sync",
            headers=bot,
            json={"notebook": "support", "sources": [TICKET, WIKI]},
        )
        assert r.status_code == 202
        assert r.json() | {"status": "accepted"} == {
            "notebook": "support",
            "project": "default",
            "queued": ["T-1", "wiki/refunds"],
            "unchanged": [],
            "status": "accepted",
        }

        def indexed() -> dict[str, Any] | None:
            [nb] = client.get("/v1/knowledge/notebooks", headers=bot).json()["notebooks"]
            return nb if nb["sources"] == 2 and nb["pending"] == 0 else None

        nb = until(indexed)
        assert nb and nb["chunks"] == 2 and nb["failures"] == 0 and nb["lastSync"]
        again = client.post(
            "/v1/knowledge/sync", headers=bot, json={"notebook": "support", "source": TICKET}
        ).json()
        assert again["queued"] == [] and again["unchanged"] == ["T-1"]

        r = client.post(
            "/v1/knowledge/query",
            headers=bot,
            json={"notebook": "support", "question": "reset my VPN password"},
        )
        assert r.status_code == 200
        body = r.json()
        assert body["mode"] == "extractive" and body["answer"].startswith("Extractive answer")
        first = body["citations"][0]
        assert (first["n"], first["sourceId"], first["chunk"], first["url"]) == (
            1,
            "T-1",
            0,
            "https://crm.example/tickets/1",
        )

        listed = client.get("/v1/knowledge/notebooks/support/sources", headers=bot).json()
        assert {s["sourceId"] for s in listed["sources"]} == {"T-1", "wiki/refunds"}
        r = client.delete("/v1/knowledge/notebooks/support/sources/wiki/refunds", headers=bot)
        assert r.status_code == 200 and r.json()["deleted"] is True
        assert (
            client.delete(
                "/v1/knowledge/notebooks/support/sources/wiki/refunds", headers=bot
            ).status_code
            == 404
        )

        bad = [
            ({"notebook": "support"}, 422),
            ({"notebook": "support", "source": TICKET, "sources": [WIKI]}, 422),
            ({"notebook": "support", "source": {**TICKET, "kind": "Bad Kind"}}, 422),
            ({"notebook": "nope", "source": TICKET}, 404),
        ]
        for payload, status in bad:
            r = client.post("/v1/knowledge/sync", headers=bot, json=payload)
            assert r.status_code == status, (payload, r.json())
        assert (
            client.post(
                "/v1/knowledge/sync", json={"notebook": "support", "source": TICKET}
            ).status_code
            == 401
        )
        health = client.get("/v1/knowledge/health").json()
        assert health | {"oldestPending": None} == {
            "status": "ok",
            "queueDepth": 0,
            "oldestPending": None,
            "oldestPendingAgeSeconds": None,
            "deadLetters": 0,
            "worker": "running",
            "workerError": None,
        }
        assert client.get("/v1/knowledge/failures", headers=bot).json() == {"failures": []}
        assert client.post("/v1/knowledge/failures/retry", headers=admin).json() == {"retried": []}


def test_worker_off_leaves_the_queue_for_drain(
    workspace: Workspace, headers: dict[str, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AMELIO_KNOWLEDGE_WORKER", "false")
    ws = open_workspace(workspace.root)
    knowledge.create_notebook(ws, "support")
    with TestClient(create_app(ws)) as client:
        assert client.get("/v1/knowledge/health").json()["worker"] == "off"
        client.post(
            "/v1/knowledge/sync",
            headers=headers["bot"],
            json={"notebook": "support", "source": TICKET},
        )
        time.sleep(0.1)
        health = client.get("/v1/knowledge/health").json()
        assert health["queueDepth"] == 1 and health["oldestPendingAgeSeconds"] >= 0
    assert knowledge.drain(ws).indexed == ["T-1"]
    ws.dispose()


@pytest.fixture
def cli(sqlite_workspace: Workspace) -> Callable[..., Any]:
    runner = CliRunner()

    def run(*args: str, code: int = 0) -> Any:
        result = runner.invoke(main, ["-w", str(sqlite_workspace.root), *args])
        assert result.exit_code == code, result.output
        return result

    return run


def test_cli_sync_query_failures_and_retry(
    cli: Callable[..., Any], tmp_path: Path, sqlite_workspace: Workspace
) -> None:
    assert "created" in cli("knowledge", "create", "support").output
    cli("knowledge", "create", "support", code=1)
    sources = tmp_path / "sources.json"
    sources.write_text(json.dumps([TICKET, WIKI]))
    out = cli("knowledge", "sync", str(sources), "-n", "support").output
    assert "Queued 2, unchanged 0." in out and "2 indexed" in out
    doc = tmp_path / "howto.md"
    doc.write_text("# Printer setup\n\nAdd the printer from Settings, then pick PRN-42.\n")
    cli("knowledge", "sync", str(doc), "-n", "support", "--kind", "wiki")
    answer = json.loads(
        cli("knowledge", "query", "which printer do I pick?", "-n", "support", "--json").output
    )
    assert answer["citations"][0]["sourceId"] == "howto.md"
    assert answer["citations"][0]["title"] == "Printer setup"
    assert answer["citations"][0]["kind"] == "wiki"
    text = cli("knowledge", "query", "VPN password", "-n", "support").output
    assert "[1] VPN password reset — T-1, chunk 0 https://crm.example/tickets/1" in text
    listed = json.loads(cli("knowledge", "notebooks", "--json").output)
    assert listed[0]["sources"] == 3
    assert "howto.md" in cli("knowledge", "sources", "-n", "support").output

    # A source that cannot be indexed ends as a dead letter, then is retried.
    newer = {**TICKET, "updatedAt": "2026-06-01T00:00:00Z"}
    sources.write_text(json.dumps(newer))
    cli("knowledge", "sync", str(sources), "-n", "support", "--no-drain")
    ws = sqlite_workspace

    def broken(_: knowledge.Source) -> Any:
        raise OSError("disk full")

    for day in range(1, 4):  # each try a day later: every backoff has passed
        at = datetime.now(UTC) + timedelta(days=day)
        knowledge.drain(ws, indexer=broken, clock=lambda at=at: at)  # type: ignore[misc]
    failures = json.loads(cli("knowledge", "failures", "--json").output)
    assert [(f["sourceId"], f["attempts"], f["error"]) for f in failures] == [
        ("T-1", 3, "OSError: disk full")
    ]
    assert "disk full" in cli("knowledge", "failures").output
    assert "1 dead letters" in cli("knowledge", "health").output
    cli("knowledge", "retry", code=2)
    assert "1 indexed" in cli("knowledge", "retry", str(failures[0]["id"])).output
    assert "No dead letters." in cli("knowledge", "failures").output
    assert "0 queued, 0 dead letters" in cli("knowledge", "health").output
    assert "0 indexed" in cli("knowledge", "drain").output

    cli("knowledge", "delete", "howto.md", "-n", "support")
    cli("knowledge", "delete", "howto.md", "-n", "support", code=1)
    bad = tmp_path / "bad.json"
    bad.write_text('{"sourceId": "x"}')
    assert "text is required" in cli("knowledge", "sync", str(bad), "-n", "support", code=1).output
