"""Feedback ingestion throughput: the collector pipeline in process and over HTTP.

Batches of 500 events (a realistic mix: clicks, dwell times, reformulations,
votes with comments to scrub, other types), 50 sessions and 10 queries per
batch, raw ids to hash, a feedbackToken per query to verify, the default
per-session rate limits. "in process" times ``Collector.ingest_body`` on the
request bytes on one thread (parse, validate, consent, tokens, anonymize,
rate-limit, HMAC chain, durable commit); "HTTP" POSTs the same bodies, one at a
time, to ``amelio serve`` running in another process (its per-key limit off,
so the server's speed is what is measured). SQLite and, when reachable,
PostgreSQL. Each measure runs ``--repeat`` times on fresh events and reports the
best and the median (a shared machine's other work only ever slows a run down).
Target: at least 20,000 events/s in process.

    python benchmarks/feedback_ingest.py [--batches 40] [--repeat 3] [--postgres URL] [--no-http]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import sqlalchemy as sa
from respond_overhead import fresh_pg  # this folder: the same throwaway database

from amelio import keys
from amelio.feedback import Collector, verify_events
from amelio.feedback.examples import example_event
from amelio.feedback.tokens import TokenSigner
from amelio.workspace import Workspace, init_workspace

BATCH = 500
TARGET = 20_000
MIX = (["result_clicked"] * 12 + ["result_dwell_time"] * 4 + ["query_reformulated"] * 2
       + ["vote_up", "vote_down", "query_abandoned", "result_hidden", "action_executed",
          "report_problem"])


def make_bodies(signer: TokenSigner, batches: int, seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    bodies = []
    for b in range(batches):
        queries = [(f"q-{b}-{i}", f"r-{b}-{i}") for i in range(10)]
        tokens = {q: signer.issue(q, r) for q, r in queries}
        events = []
        for _ in range(BATCH):
            query, request = rng.choice(queries)
            session = rng.randrange(50)
            event = example_event(rng.choice(MIX), query_id=query, request_id=request,
                                  token=tokens[query], session_id=f"session-{b}-{session}",
                                  user_id=f"user-{b}-{session}@example.org")
            if event["eventType"] == "vote_down":
                event["vote"]["comment"] = "Wrong date; call me on 06 12 34 56 78."
            events.append(event)
        if b % 2:
            bodies.append("\n".join(json.dumps(e) for e in events).encode())
        else:
            bodies.append(json.dumps(events).encode())
    return bodies


def in_process(ws: Workspace, bodies: list[bytes]) -> tuple[float, float]:
    """Events per wall-clock second, and per second of this process's CPU time (what
    one core does, whatever else the machine is running)."""
    collector = Collector(ws)
    collector.ingest_body(bodies[0])  # warm: validators, connection pool, salt
    start, cpu = time.perf_counter(), time.process_time()
    for body in bodies[1:]:
        result = collector.ingest_body(body)
        assert result.count("accepted") == BATCH, result.counts()
    events = (len(bodies) - 1) * BATCH
    return events / (time.perf_counter() - start), events / (time.process_time() - cpu)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def over_http(ws: Workspace, bodies: list[bytes]) -> float:
    _, token = keys.create_key(ws.engine, name="bench", role="client")
    port = free_port()
    env = {**os.environ, "AMELIO_FEEDBACK_RATE_KEY": "0"}
    server = subprocess.Popen(
        [sys.executable, "-m", "amelio", "-w", str(ws.root), "serve", "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, timeout=30,
                          headers={"Authorization": f"Bearer {token}"}) as client:
            deadline = time.monotonic() + 20
            while True:
                try:
                    if client.get("/v1/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("amelio serve did not start")
                time.sleep(0.1)
            client.post("/v1/feedback/events", content=bodies[0])
            start = time.perf_counter()
            for body in bodies[1:]:
                response = client.post("/v1/feedback/events", content=body)
                assert response.status_code == 202, response.text
                assert response.json()["accepted"] == BATCH
            return (len(bodies) - 1) * BATCH / (time.perf_counter() - start)
    finally:
        server.terminate()
        server.wait(10)


def run(url: str, batches: int, repeat: int, http: bool) -> dict[str, list[float]]:
    os.environ["AMELIO_DATABASE_URL"] = url
    with tempfile.TemporaryDirectory() as tmp:
        ws, _ = init_workspace(Path(tmp) / "ws")
        try:
            signer = Collector(ws).signer
            rates: dict[str, list[float]] = {"in process": [], "HTTP": [], "cpu": []}
            for n in range(repeat):
                wall, cpu = in_process(ws, make_bodies(signer, batches, seed=2 * n))
                rates["in process"].append(wall)
                rates["cpu"].append(cpu)
                if http:
                    rates["HTTP"].append(
                        over_http(ws, make_bodies(signer, batches, seed=2 * n + 1)))
            report = verify_events(ws)
            assert report.ok, report
            return {path: sorted(r, reverse=True) for path, r in rates.items() if r}
        finally:
            ws.dispose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-http", action="store_true")
    parser.add_argument("--postgres", default=os.environ.get(
        "AMELIO_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"))
    args = parser.parse_args()
    rows: list[tuple[str, dict[str, list[float]]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        rows.append(("sqlite", run(f"sqlite:///{tmp}/bench.db", args.batches, args.repeat,
                                   not args.no_http)))
    pg = fresh_pg(args.postgres)
    if pg is not None:
        url, admin, name = pg
        try:
            rows.append(("postgresql", run(url, args.batches, args.repeat, not args.no_http)))
        finally:
            with admin.connect() as conn:
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    print(f"feedback ingestion, {args.batches - 1} timed batches of {BATCH} events "
          f"(after one warm-up batch), {args.repeat} runs each")
    print(f"{'database':12} {'path':12} {'best/s':>10} {'median/s':>10} {'per CPU-s':>10}")
    print("-" * 58)
    ok = True
    for database, rates in rows:
        cpu = rates.pop("cpu")
        for path, runs in rates.items():
            per_cpu = f"{cpu[0]:10,.0f}" if path == "in process" else f"{'':10}"
            if path == "in process":
                ok &= runs[0] >= TARGET
            print(f"{database:12} {path:12} {runs[0]:10,.0f} {statistics.median(runs):10,.0f} "
                  f"{per_cpu}")
    print("per CPU-s: events per second of the benchmark process's own CPU time (the "
          "database server's is not counted)")
    print(f"target in process >= {TARGET:,} events/s: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
