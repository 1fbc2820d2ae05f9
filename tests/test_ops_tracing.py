"""OpenTelemetry traces: one chat request is one trace, with Amelio's steps, the SQL and
the LLM provider's HTTP call under the server span (spans kept in memory)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from opentelemetry import trace
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from amelio import skills
from amelio.errors import ConfigError
from amelio.server import create_app
from amelio.testing import FakeLLMServer
from amelio.workspace import keys
from amelio.workspace.folder import Workspace, open_workspace


@pytest.fixture(scope="module")
def exporter() -> Iterator[InMemorySpanExporter]:
    """The process's tracer provider (set once: OpenTelemetry allows no second), with an
    in-memory exporter."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    yield memory
    memory.shutdown()
    HTTPXClientInstrumentor().uninstrument()  # process-wide patches: undone
    SQLAlchemyInstrumentor().uninstrument()


@pytest.fixture
def traced(
    sqlite_workspace: Workspace, examples: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Workspace, FakeLLMServer]]:
    skills.import_skills(sqlite_workspace.engine, examples)
    with FakeLLMServer(default="Run `git pull --rebase`, then push.") as llm:
        monkeypatch.setenv("AMELIO_LLM_PROVIDER", "anthropic")
        monkeypatch.setenv("AMELIO_LLM_BASE_URL", llm.anthropic_base_url)
        monkeypatch.setenv("AMELIO_LLM_API_KEY", "test")
        monkeypatch.setenv("AMELIO_LLM_MODEL", "claude-test")
        monkeypatch.setenv("AMELIO_TRACING", "global")
        ws = open_workspace(sqlite_workspace.root)
        yield ws, llm
        ws.dispose()


def _children(spans: list[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    assert parent.context is not None
    return [s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id]


def test_a_chat_request_is_one_trace_with_each_step(
    traced: tuple[Workspace, FakeLLMServer], exporter: InMemorySpanExporter
) -> None:
    ws, _ = traced
    _, admin = keys.create_key(ws.engine, name="ops", role="admin")
    with TestClient(create_app(ws)) as client:
        exporter.clear()
        r = client.post(
            "/v1/chat",
            headers={"Authorization": f"Bearer {admin}"},
            json={"message": "git push rejected"},
        )
        assert r.status_code == 200, r.text
        client.get("/v1/health")  # excluded: health checks would drown the traces
    spans = list(exporter.get_finished_spans())
    [server] = [s for s in spans if s.kind == trace.SpanKind.SERVER]
    assert server.name == "POST /v1/chat" and server.parent is None
    assert server.context is not None
    in_trace = [
        s for s in spans if s.context is not None and s.context.trace_id == server.context.trace_id
    ]
    # Outside the request's trace: only the background workers' SQL (the sync worker's
    # polls, the warm-up, the schedule), each its own trace.
    others = {s.name.split()[0] for s in spans if s not in in_trace}
    assert others <= {"SELECT", "INSERT", "UPDATE", "DELETE", "BEGIN", "PRAGMA", "connect"}, others

    names = [s.name for s in in_trace]
    for step in ("amelio.route", "amelio.prompt", "chat claude-test", "amelio.evals"):
        assert names.count(step) == 1, names
    [route] = [s for s in in_trace if s.name == "amelio.route"]
    assert route.attributes is not None and "git-help" in route.attributes["amelio.route.skills"]
    [chat] = [s for s in in_trace if s.name == "chat claude-test"]
    attributes = dict(chat.attributes or {})
    assert chat.kind == trace.SpanKind.CLIENT
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.provider.name"] == "anthropic"
    assert attributes["gen_ai.request.model"] == "claude-test"
    assert attributes["gen_ai.usage.input_tokens"] > 0
    assert attributes["gen_ai.usage.output_tokens"] > 0
    # The provider's HTTP call is under the LLM span: the anthropic SDK traces it itself
    # (its own span; it keeps httpx's instrumentation from tracing it twice).
    below, frontier = [], [chat]
    while frontier:
        found = [c for parent in frontier for c in _children(in_trace, parent)]
        below += found
        frontier = found
    [call] = [
        s
        for s in below
        if s.kind == trace.SpanKind.CLIENT
        and str((s.attributes or {}).get("url.full", "")).endswith("/v1/messages")
    ]
    assert (call.attributes or {}).get("http.response.status_code") == 200
    # The SQL statements are traced too (the interaction stored, the skills read).
    assert {"SELECT", "INSERT"} <= {s.name.split()[0] for s in in_trace}, names
    [evaluated] = [s for s in in_trace if s.name == "amelio.evals"]
    assert evaluated.attributes is not None and evaluated.attributes["amelio.evals.rules"] > 0
    # In the order a request runs them.
    start = {s.name: s.start_time for s in in_trace}
    assert (
        start["amelio.route"]
        < start["amelio.prompt"]
        < start["chat claude-test"]
        < start["amelio.evals"]
    )


def test_a_failed_llm_call_is_an_error_span(
    traced: tuple[Workspace, FakeLLMServer],
    exporter: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ws, llm = traced
    monkeypatch.setenv("AMELIO_LLM_MAX_RETRIES", "0")
    no_retry = open_workspace(ws.root)
    _, admin = keys.create_key(no_retry.engine, name="ops", role="admin")
    try:
        with TestClient(create_app(no_retry)) as client:
            exporter.clear()
            llm.fail(500)
            r = client.post(
                "/v1/chat",
                headers={"Authorization": f"Bearer {admin}"},
                json={"message": "git push rejected"},
            )
        assert r.status_code >= 500
    finally:
        no_retry.dispose()
    [chat] = [s for s in exporter.get_finished_spans() if s.name == "chat claude-test"]
    assert chat.status.status_code == trace.StatusCode.ERROR
    assert any(e.name == "exception" for e in chat.events)


def test_tracing_off_instruments_nothing(
    sqlite_workspace: Workspace, exporter: InMemorySpanExporter
) -> None:
    with TestClient(create_app(sqlite_workspace)) as client:
        exporter.clear()
        client.get("/v1/skills")
    servers = [s for s in exporter.get_finished_spans() if s.kind == trace.SpanKind.SERVER]
    assert not servers, [(s.name, s.instrumentation_scope) for s in servers]


def test_a_wrong_tracing_setting_is_a_clear_error(
    sqlite_workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AMELIO_TRACING", "jaeger")
    with pytest.raises(ConfigError, match="tracing"):
        open_workspace(sqlite_workspace.root)
