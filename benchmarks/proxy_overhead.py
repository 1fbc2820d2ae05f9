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
Target: added p95 under 5 ms.

    python benchmarks/proxy_overhead.py [--requests 300] [--postgres URL]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import openai
from benchlib import Clock, percentile, target
from respond_overhead import ANSWER, MESSAGES  # this folder: the same chat and answer

from amelio import keys, learnings, skills
from amelio.testing import FakeLLMServer, ServeProcess, postgres_database
from amelio.workspace import init_workspace

ROOT = Path(__file__).resolve().parent.parent

def _messages(i: int) -> list[Any]:
    return [{"role": "system", "content": "You are the team's assistant."},
            {"role": "user", "content": MESSAGES[i % len(MESSAGES)]}]


def _plain(client: openai.OpenAI, model: str, i: int) -> float:
    start = time.perf_counter()
    client.chat.completions.create(model=model, messages=_messages(i))
    return (time.perf_counter() - start) * 1000


def _first_token(client: openai.OpenAI, model: str, i: int) -> float:
    """Milliseconds to the first content delta; the stream is then read to its end."""
    start = time.perf_counter()
    first = None
    for chunk in client.chat.completions.create(model=model, messages=_messages(i),
                                                stream=True):
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = (time.perf_counter() - start) * 1000
    assert first is not None
    return first


def run(url: str, n: int, llm: FakeLLMServer) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AMELIO_")}
        env |= {"AMELIO_DATABASE_URL": url, "AMELIO_WORKSPACE": f"{tmp}/ws",
                "AMELIO_LLM_PROVIDER": "openai", "AMELIO_LLM_MODEL": "fake-model",
                "AMELIO_LLM_BASE_URL": llm.openai_base_url, "AMELIO_LLM_API_KEY": "fake"}
        os.environ.update(env)
        ws, _ = init_workspace(Path(tmp) / "ws")
        try:
            skills.import_skills(ws.engine, ROOT / "examples" / "skills")
            for i in range(20):
                learnings.add_learning(ws, f"Learned rule number {i} about the answers",
                                       skill=None if i % 2 else "git-help")
            _, token = keys.create_key(ws.engine, name="bench", role="bot")
        finally:
            ws.dispose()
        with ServeProcess(Path(tmp) / "ws", env=env) as server:
            return _measure(llm, server, token, n, url)


def _measure(llm: FakeLLMServer, server: ServeProcess, token: str, n: int, url: str
             ) -> dict[str, list[float]]:
    base = server.base
    direct = openai.OpenAI(api_key="fake", base_url=llm.openai_base_url, max_retries=0)
    proxied = openai.OpenAI(api_key=token, base_url=f"{base}/v1", max_retries=0)
    for i in range(len(MESSAGES) * 3):  # warm pools, router index, compiled rules
        _plain(direct, "fake-model", i)
        _plain(proxied, "amelio", i)
        _first_token(proxied, "amelio", i)
    out: dict[str, list[float]] = {k: [] for k in (
        "direct", "proxied", "added", "ttft direct", "ttft proxied", "ttft added")}
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
        for i in range(max(n // 3, 20)):
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
    parser.add_argument("--postgres", default=os.environ.get(
        "AMELIO_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"))
    args = parser.parse_args()
    rows: list[tuple[str, dict[str, list[float]]]] = []
    with FakeLLMServer(default=ANSWER) as llm:
        with tempfile.TemporaryDirectory() as tmp:
            rows.append(("sqlite", run(f"sqlite:///{tmp}/bench.db", args.requests, llm)))
        try:
            with postgres_database(args.postgres, prefix="amelio_bench") as url:
                rows.append(("postgresql", run(url, args.requests, llm)))
        except Exception as exc:  # a run without PostgreSQL still reports SQLite
            print(f"PostgreSQL not reachable ({exc.__class__.__name__}); skipped",
                  file=sys.stderr)
    print(f"/v1/chat/completions vs the upstream directly, {args.requests} requests each, "
          "openai SDK client, zero-latency fake upstream")
    print(f"{'database':12} {'series':14} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8}")
    print("-" * 54)
    for name, out in rows:
        for series, samples in out.items():
            if series == "server CPU":
                continue
            print(f"{name:12} {series:14} {percentile(samples, 50):8.2f} "
                  f"{percentile(samples, 95):8.2f} {percentile(samples, 99):8.2f}")
    for name, out in rows:
        if "server CPU" in out:
            print(f"{name:12} Amelio's server process: {out['server CPU'][0]:.2f} ms CPU per "
                  "request (mean)")
    for name, out in rows:
        target(f"proxy added p95 on {name}", percentile(out["added"], 95), 5.0, "ms",
               higher_is_better=False)
        target(f"proxy added time to first token p95 on {name}",
               percentile(out["ttft added"], 95), 5.0, "ms", higher_is_better=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
