"""Prometheus metrics after real traffic: the counters move as requests, feedback
events, searches and LLM calls happen; the database's gauges say what is stored."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from amelio import skills
from amelio.feedback.examples import example_event
from amelio.improve import proposals as props
from amelio.ops.schedule import claim, finish
from amelio.search.engines.registry import workspace_corpus
from amelio.server import create_app
from amelio.testing import FakeLLMServer
from amelio.workspace import keys
from amelio.workspace.folder import Workspace, open_workspace
from support.processes import ServeProcess, free_port

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(text: str) -> Samples:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(default="Run `git pull --rebase`, then push.") as server:
        yield server


@pytest.fixture
def ws(
    workspace: Workspace,
    examples: Path,
    llm: FakeLLMServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Workspace]:
    skills.import_skills(workspace.engine, examples)
    monkeypatch.setenv("AMELIO_LLM_PROVIDER", "anthropic")
    monkeypatch.setenv("AMELIO_LLM_BASE_URL", llm.anthropic_base_url)
    monkeypatch.setenv("AMELIO_LLM_API_KEY", "test")
    monkeypatch.setenv("AMELIO_LLM_MODEL", "claude-test")
    monkeypatch.setenv("AMELIO_LLM_MAX_RETRIES", "0")
    configured = open_workspace(workspace.root)
    docs = tmp_path / "docs.jsonl"
    docs.write_text(
        "".join(
            json.dumps(d) + "\n"
            for d in [
                {"docId": "reset", "title": "Reset your password", "text": "Open settings, reset."},
                {"docId": "vpn", "title": "VPN", "text": "Connect to the VPN first."},
            ]
        )
    )
    workspace_corpus(configured.settings).import_file(docs)
    yield configured
    configured.dispose()


def test_metrics_move_with_real_traffic(ws: Workspace, llm: FakeLLMServer) -> None:
    _, admin = keys.create_key(ws.engine, name="prom", role="admin")
    _, bot = keys.create_key(ws.engine, name="bot", role="bot")
    _, client_key = keys.create_key(ws.engine, name="web", role="client")
    auth = {"Authorization": f"Bearer {admin}"}
    with TestClient(create_app(ws)) as client:
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", headers={"Authorization": f"Bearer {bot}"}).status_code == 403
        before = scrape(client.get("/metrics", headers=auth).text)

        for _ in range(3):
            assert client.get("/v1/health").status_code == 200
        assert client.get("/v1/skills/nope", headers=auth).status_code == 404
        for _ in range(2):  # the same query twice: a miss, then a hit
            assert (
                client.post(
                    "/v1/search",
                    headers=auth,
                    json={"query": "reset password", "rankProfile": "bm25"},
                ).status_code
                == 200
            )
        # Two of each outcome in one batch (the clicks carry no token): each counts.
        events = [example_event(kind) for kind in ("vote_up", "result_clicked") * 2]
        r = client.post(
            "/v1/feedback/events", json=events, headers={"Authorization": f"Bearer {client_key}"}
        )
        assert r.status_code == 202 and r.json()["rejected"] == 2
        assert (
            client.post("/v1/chat", headers=auth, json={"message": "git push rejected"}).status_code
            == 200
        )
        llm.fail(500, times=1)
        assert (
            client.post("/v1/chat", headers=auth, json={"message": "git push rejected"}).status_code
            >= 500
        )
        r = client.get("/metrics", headers=auth)
    assert r.headers["content-type"].startswith("text/plain")
    after = scrape(r.text)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    health = {"method": "GET", "route": "/v1/health", "status": "200"}
    assert delta("amelio_http_request_duration_seconds_count", **health) == 3
    assert (
        delta(
            "amelio_http_request_duration_seconds_count",
            method="GET",
            route="/v1/skills/{name}",
            status="404",
        )
        == 1
    )  # the template, not the path
    assert delta("amelio_search_cache_requests_total", result="miss") == 1
    assert delta("amelio_search_cache_requests_total", result="hit") == 1
    assert delta("amelio_feedback_events_total", outcome="accepted", field="") == 2
    assert (
        delta("amelio_feedback_events_total", outcome="rejected", field="request.feedbackToken")
        == 2
    )
    ok = {"provider": "anthropic", "model": "claude-test"}
    assert delta("amelio_llm_calls_total", **ok, outcome="ok") == 1
    assert delta("amelio_llm_calls_total", **ok, outcome="error") == 1
    assert delta("amelio_llm_tokens_total", **ok, direction="input") > 0
    assert delta("amelio_llm_tokens_total", **ok, direction="output") > 0


def test_database_gauges_and_the_separate_port(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    git = skills.get_skill(ws.engine, "git-help")
    props.create_proposal(
        ws,
        "git-help",
        proposed_content=git.spec.content + "\nMore.\n",
        rationale="r",
        proposed_by="template",
        author="t",
    )
    assert claim(ws, "improve", datetime.now(UTC), "me")
    finish(ws, "improve", "me", "error", "boom")
    port = free_port()
    monkeypatch.setenv("AMELIO_METRICS_PORT", str(port))
    separate = open_workspace(ws.root)
    try:
        with TestClient(create_app(separate)):
            r = httpx.get(f"http://127.0.0.1:{port}/metrics")  # no key: a private port
        samples = scrape(r.text)
    finally:
        separate.dispose()
    assert r.status_code == 200
    assert value(samples, "amelio_proposals", status="pending") == 1
    assert value(samples, "amelio_scheduled_job_runs", job="improve") == 1
    assert value(samples, "amelio_scheduled_job_last_success", job="improve") == 0
    assert value(samples, "amelio_knowledge_queue_jobs", state="dead") == 0
    assert ("amelio_signals_lag", (("source", "events"),)) in samples
    with pytest.raises(httpx.TransportError):  # stopped with the app
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)


@pytest.mark.slow
def test_workers_share_their_counters(tmp_path: Path) -> None:
    from amelio.workspace.folder import init_workspace

    ws, _ = init_workspace(tmp_path / "ws")
    _, admin = keys.create_key(ws.engine, name="prom", role="admin")
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    env["AMELIO_WARM_UP"] = "false"
    try:
        with ServeProcess(ws.root, workers=2, env=env) as served:
            for _ in range(20):  # a new connection each time: any worker may answer
                assert httpx.get(f"{served.base}/v1/health").status_code == 200
            texts = [
                httpx.get(
                    f"{served.base}/metrics", headers={"Authorization": f"Bearer {admin}"}
                ).text
                for _ in range(6)
            ]
    finally:
        ws.dispose()
    counts = {
        value(
            scrape(t),
            "amelio_http_request_duration_seconds_count",
            method="GET",
            route="/v1/health",
            status="200",
        )
        for t in texts
    }
    # Whichever worker answered the scrape, it counted the requests all workers served
    # (at least the 20 here; the start-up probe adds its own).
    assert len(counts) == 1 and counts.pop() >= 20


def test_callers_cannot_mint_model_labels(
    ws: Workspace, llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through a non-openai provider the caller names the model: 40 made-up names must
    not become 40 label values (each one a series per outcome, direction and bucket)."""
    monkeypatch.setenv("AMELIO_METRICS_MODELS", "claude-extra, ")
    configured = open_workspace(ws.root)
    _, admin = keys.create_key(configured.engine, name="prom", role="admin")
    auth = {"Authorization": f"Bearer {admin}"}
    models = ["claude-test", "claude-extra"] + [f"made-up-{i}" for i in range(40)]
    with TestClient(create_app(configured)) as client:
        before = scrape(client.get("/metrics", headers=auth).text)
        for model in models:
            r = client.post(
                "/v1/chat/completions",
                headers=auth,
                json={"model": model, "messages": [{"role": "user", "content": "git push"}]},
            )
            assert r.status_code == 200, r.text
        after = scrape(client.get("/metrics", headers=auth).text)
    configured.dispose()
    llm_series = {labels for (name, labels) in after if name.startswith("amelio_llm_")} - {
        labels for (name, labels) in before if name.startswith("amelio_llm_")
    }
    assert {dict(labels)["model"] for labels in llm_series} <= {
        "claude-test",
        "claude-extra",
        "other",
    }
    calls = {"provider": "anthropic", "outcome": "ok"}
    assert (
        value(after, "amelio_llm_calls_total", model="other", **calls)
        - value(before, "amelio_llm_calls_total", model="other", **calls)
        == 40
    )
    for model in ("claude-test", "claude-extra"):
        assert (
            value(after, "amelio_llm_calls_total", model=model, **calls)
            - value(before, "amelio_llm_calls_total", model=model, **calls)
            == 1
        )
