"""What the OpenAI-compatible endpoint adds over calling the upstream directly.

The same openai SDK client code calls, alternately, the fake LLM server itself
(zero latency) and Amelio's ``/v1/chat/completions`` in front of it (uvicorn in
its own process, as deployed, over loopback; 13 skills, 20 learnings): the difference is
Amelio's own work, its HTTP hop included (routing, the system block, the
forward, the evals, the write). Alternating the two keeps a busy machine from
favouring either. Prints p50/p95/p99 of both and of the added time, the time to
the first streamed token both ways, and the CPU time Amelio's server process
spent per request (from /proc, on Linux): on a busy machine wall-clock figures
grow with the load, while CPU per request stays what Amelio costs.
The fake upstream runs in a process of its own: in the client's process it would
compete with the client for the GIL (a switch interval is 5 ms), and both series
would gain noise that is nobody's overhead.

Then, on SQLite, the plain requests again while ``--streams`` answers stream from
a second fake upstream that takes 20 ms a token, as a model does: this is what a
relay that held a worker thread per open stream would fail.

Targets: added p95 under 5 ms; a plain request's p95 under 50 ms while the
streams are open. The time to first token is reported: Amelio routes before it
forwards, so it adds the same work as a plain request.

    python benchmarks/proxy_overhead.py [--requests 300] [--streams 40] [--postgres URL]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import openai
from benchlib import Clock, percentile, target
from respond_overhead import ANSWER, MESSAGES  # this folder: the same chat and answer

from amelio import skills
from amelio.assistant import learnings
from amelio.testing import FakeLLMServer
from amelio.workspace import keys
from amelio.workspace.folder import init_workspace
from support.processes import ServeProcess, postgres_database

ROOT = Path(__file__).resolve().parent.parent


def _serve_fake(pipe: Connection, token_delay: float) -> None:
    with FakeLLMServer(default=ANSWER, token_delay=token_delay) as llm:
        pipe.send(llm.openai_base_url)
        pipe.recv()  # until the parent is done


@contextmanager
def fake_upstream(token_delay: float = 0.0) -> Iterator[str]:
    """The fake LLM server in a child process; yields its OpenAI base URL.
    ``token_delay``: seconds before each streamed token, as a real model takes."""
    ours, theirs = multiprocessing.Pipe()
    child = multiprocessing.get_context("spawn").Process(
        target=_serve_fake, args=(theirs, token_delay), daemon=True
    )
    child.start()
    try:
        if not ours.poll(60):
            raise RuntimeError("the fake LLM server did not start")
        yield str(ours.recv())
    finally:
        ours.send("stop")
        child.join(10)
        if child.is_alive():
            child.kill()


def _messages(i: int) -> list[Any]:
    return [
        {"role": "system", "content": "You are the team's assistant."},
        {"role": "user", "content": MESSAGES[i % len(MESSAGES)]},
    ]


def _plain(client: openai.OpenAI, model: str, i: int) -> float:
    start = time.perf_counter()
    client.chat.completions.create(model=model, messages=_messages(i))
    return (time.perf_counter() - start) * 1000


def _first_token(client: openai.OpenAI, model: str, i: int) -> float:
    """Milliseconds to the first content delta; the stream is then read to its end."""
    start = time.perf_counter()
    first = None
    for chunk in client.chat.completions.create(model=model, messages=_messages(i), stream=True):
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = (time.perf_counter() - start) * 1000
    assert first is not None
    return first


def run(
    url: str, n: int, upstream: str, slow: str | None = None, streams: int = 0
) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AMELIO_")}
        env |= {
            "AMELIO_DATABASE_URL": url,
            "AMELIO_WORKSPACE": f"{tmp}/ws",
            "AMELIO_LLM_PROVIDER": "openai",
            "AMELIO_LLM_MODEL": "fake-model",
            "AMELIO_LLM_BASE_URL": upstream,
            "AMELIO_LLM_API_KEY": "fake",
        }
        os.environ.update(env)
        ws, _ = init_workspace(Path(tmp) / "ws")
        try:
            skills.import_skills(ws.engine, ROOT / "examples" / "skills")
            for i in range(20):
                learnings.add_learning(
                    ws,
                    f"Learned rule number {i} about the answers",
                    skill=None if i % 2 else "git-help",
                )
            _, token = keys.create_key(ws.engine, name="bench", role="bot")
        finally:
            ws.dispose()
        with ServeProcess(Path(tmp) / "ws", env=env) as server:
            out = _measure(upstream, server, token, n, url)
        if slow is not None and streams:
            env["AMELIO_LLM_BASE_URL"] = slow
            with ServeProcess(Path(tmp) / "ws", env=env) as server:
                out |= _during_streams(server, token, streams)
        return out


def _during_streams(server: ServeProcess, token: str, streams: int) -> dict[str, list[float]]:
    """Plain requests while ``streams`` answers stream from a model that takes 20 ms a
    token: a relay that held a worker thread per open stream would make every other
    request wait for a thread."""
    proxied = openai.OpenAI(api_key=token, base_url=f"{server.base}/v1", max_retries=0)
    for i in range(len(MESSAGES)):
        _plain(proxied, "amelio", i)
    started = threading.Barrier(streams + 1)

    def stream(i: int) -> None:
        client = openai.OpenAI(api_key=token, base_url=f"{server.base}/v1", max_retries=0)
        started.wait()
        for _ in client.chat.completions.create(model="amelio", messages=_messages(i), stream=True):
            pass

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(streams)]
    for thread in threads:
        thread.start()
    started.wait()
    time.sleep(0.5)  # every stream is open and relaying tokens
    during = [_plain(proxied, "amelio", i) for i in range(40)]
    for thread in threads:
        thread.join()
    return {f"plain, {streams} streams open": during}


def _measure(
    upstream: str, server: ServeProcess, token: str, n: int, url: str
) -> dict[str, list[float]]:
    base = server.base
    direct = openai.OpenAI(api_key="fake", base_url=upstream, max_retries=0)
    proxied = openai.OpenAI(api_key=token, base_url=f"{base}/v1", max_retries=0)
    for i in range(len(MESSAGES) * 3):  # warm pools, router index, compiled rules
        _plain(direct, "fake-model", i)
        _plain(proxied, "amelio", i)
        _first_token(proxied, "amelio", i)
    out: dict[str, list[float]] = {
        k: [] for k in ("direct", "proxied", "added", "ttft direct", "ttft proxied", "ttft added")
    }
    cpu_before = server.cpu_seconds()
    with Clock() as clock:
        for i in range(n):
            d, p = _plain(direct, "fake-model", i), _plain(proxied, "amelio", i)
            out["direct"].append(d)
            out["proxied"].append(p)
            out["added"].append(p - d)
        cpu_after = server.cpu_seconds()
        if cpu_before is not None and cpu_after is not None:
            out["server CPU"] = [(cpu_after - cpu_before) * 1000 / n]
        for i in range(max(n // 3, 20)):  # the answer streams 160 tokens at once
            d = _first_token(direct, "fake-model", i)
            p = _first_token(proxied, "amelio", i)
            out["ttft direct"].append(d)
            out["ttft proxied"].append(p)
            out["ttft added"].append(p - d)
    print(f"  {url.split(':')[0]}: client {clock}", file=sys.stderr)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument(
        "--streams",
        type=int,
        default=40,
        help="streams open while plain requests are timed (SQLite run)",
    )
    parser.add_argument(
        "--postgres",
        default=os.environ.get(
            "AMELIO_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
        ),
    )
    args = parser.parse_args()
    rows: list[tuple[str, dict[str, list[float]]]] = []
    with fake_upstream() as upstream, fake_upstream(token_delay=0.02) as slow:
        with tempfile.TemporaryDirectory() as tmp:
            rows.append(
                (
                    "sqlite",
                    run(f"sqlite:///{tmp}/bench.db", args.requests, upstream, slow, args.streams),
                )
            )
        try:
            with postgres_database(args.postgres, prefix="amelio_bench") as url:
                rows.append(("postgresql", run(url, args.requests, upstream)))
        except Exception as exc:  # a run without PostgreSQL still reports SQLite
            print(f"PostgreSQL not reachable ({exc.__class__.__name__}); skipped", file=sys.stderr)
    print(
        f"/v1/chat/completions vs the upstream directly, {args.requests} requests each, "
        "openai SDK client, zero-latency fake upstream"
    )
    print(f"{'database':12} {'series':24} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8}")
    print("-" * 64)
    for name, out in rows:
        for series, samples in out.items():
            if series == "server CPU":
                continue
            print(
                f"{name:12} {series:24} {percentile(samples, 50):8.2f} "
                f"{percentile(samples, 95):8.2f} {percentile(samples, 99):8.2f}"
            )
    for name, out in rows:
        if "server CPU" in out:
            print(
                f"{name:12} Amelio's server process: {out['server CPU'][0]:.2f} ms CPU per "
                "request (mean)"
            )
    for name, out in rows:
        target(
            f"proxy added p95 on {name}",
            percentile(out["added"], 95),
            5.0,
            "ms",
            higher_is_better=False,
        )
        streaming = [k for k in out if k.endswith("streams open")]
        if streaming:
            target(
                f"proxy plain request p95 with {args.streams} streams open, on {name}",
                percentile(out[streaming[0]], 95),
                50.0,
                "ms",
                higher_is_better=False,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
