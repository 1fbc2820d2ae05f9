"""The load test's core on a tiny configuration, and ``amelio serve --workers 2``.

Both start real ``amelio serve`` processes: what is checked (events acknowledged
are stored; several workers share one port) only exists across processes.
"""

from __future__ import annotations

import importlib
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from types import ModuleType

import httpx
import pytest
import uvicorn

from amelio.server import NoDelayH11Protocol, create_app
from amelio.testing import FakeLLMServer
from amelio.workspace.folder import Workspace
from support.processes import free_port

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture
def load(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """benchmarks/load.py, which imports its sibling benchmarks as top-level modules."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module("load")


@pytest.mark.slow
def test_mixed_load_stores_every_acknowledged_event(load: ModuleType, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    queries = load.query_pool(load.write_corpus(corpus, 300), 2000)
    with FakeLLMServer(default="Use git revert.") as llm:
        result = load.run_configuration(
            "sqlite",
            1,
            levels=[2],
            seconds=1.0,
            corpus=corpus,
            queries=queries,
            llm_url=llm.openai_base_url,
        )
        chats_sent_to_llm = len(llm.requests)
    [step] = result.steps
    answered = Counter(s.kind for s in step.samples if s.ok)
    assert answered["search"] > 0 and answered["feedback"] > 0
    assert result.errors == 0 and not result.ledger.refused
    # every feedback request carried real tokens and fresh ids: all accepted, all stored
    assert result.ledger.acknowledged
    assert result.stored == result.ledger.acknowledged and not result.ledger.in_doubt
    assert result.chain_ok and result.passed
    # each answered chat, the warm-up's included, asked the fake LLM exactly once
    assert chats_sent_to_llm == answered["chat"] + 2 * load.WARMUP_ROUNDS


@pytest.mark.slow
def test_serve_with_two_workers(sqlite_workspace: Workspace, tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "amelio",
                "-w",
                str(sqlite_workspace.root),
                "serve",
                "--port",
                str(port),
                "--workers",
                "2",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        health = None
        workers = 0
        deadline = time.monotonic() + 60  # a guard against a hang, not a measure
        while (health is None or workers < 2) and time.monotonic() < deadline:
            assert server.poll() is None, log.read_text()
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=5)
                health = response.json() if response.status_code == 200 else None
            except httpx.TransportError:
                pass
            workers = log.read_text().count("Application startup complete")
            time.sleep(0.1)
        assert health is not None and health["status"] == "ok", log.read_text()
        assert workers == 2, log.read_text()
        assert "2 worker processes" in log.read_text()
    finally:
        server.terminate()
        server.wait(30)


def test_connections_on_a_socket_bound_by_the_parent_get_tcp_nodelay(
    sqlite_workspace: Workspace,
) -> None:
    """With --workers, uvicorn's parent binds the socket and asyncio leaves Nagle on
    (each keep-alive response then waits ~40 ms for a delayed ACK): the protocol
    ``amelio serve`` gives the workers turns it off itself."""
    config = uvicorn.Config(
        create_app(sqlite_workspace),
        host="127.0.0.1",
        port=0,
        http=NoDelayH11Protocol,
        lifespan="off",
        log_config=None,
        access_log=False,
    )
    server = uvicorn.Server(config)
    listener = config.bind_socket()  # as the multiprocess supervisor does
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        while not server.started:
            assert thread.is_alive()
            time.sleep(0.01)
        port = listener.getsockname()[1]
        with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
            for _ in range(2):  # the same keep-alive connection twice
                assert client.get("/v1/health").status_code == 200
            [connection] = server.server_state.connections
            accepted = connection.transport.get_extra_info("socket")  # type: ignore[attr-defined]
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    finally:
        server.should_exit = True
        thread.join(10)
