"""What Amelio adds around the LLM call: routing, prompt, evals, storage.

Runs respond() with an in-process provider that answers instantly, so the time
measured is Amelio's own, on SQLite and (when reachable) PostgreSQL, and prints
p50/p95/p99 per message, and wall-clock beside CPU time for each database (on
PostgreSQL the server's CPU is not in the figure). PostgreSQL runs once per
``interaction_commit`` value: ``durable`` (the default, whose commit waits for the
write-ahead log's flush) and ``fast`` (it does not). Target: p95 under 5 ms.

A durable commit waits for the disk, which no code of Amelio's can shorten: on the
same database and in the same run, the benchmark times the raw database's own
one-row durable commit (``psycopg``, no Amelio), and the durable row's target is
Amelio's p95 less that baseline's p95, under the same 5 ms.

    python benchmarks/respond_overhead.py [--messages 400] [--postgres URL]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchlib import Clock, percentile, target

from amelio import skills
from amelio.assistant import learnings
from amelio.assistant.respond import respond
from amelio.llm.fake import ScriptedProvider
from amelio.workspace.folder import init_workspace
from support.processes import postgres_database

ROOT = Path(__file__).resolve().parent.parent
MESSAGES = [
    "please review this pull request before I merge it",
    "git push rejected after rebase, what now",
    "deploy the api to production tonight",
    "the server is slow: audit disk, RAM and CPU",
    "draft release notes for version 2.4.0",
    "what is the capital of Australia",
]
ANSWER = (
    '{"verdict": "approve"} Run git pull --rebase then git push --force-with-lease. '
    "Rollback: redeploy the previous tag. Verify with a smoke test. " * 8
)


def run(url: str, n: int, commit: str = "durable") -> tuple[list[float], Clock]:
    os.environ["AMELIO_DATABASE_URL"] = url
    os.environ["AMELIO_INTERACTION_COMMIT"] = commit
    with tempfile.TemporaryDirectory() as tmp:
        ws, _ = init_workspace(Path(tmp) / "ws")
        try:
            skills.import_skills(ws.engine, ROOT / "examples" / "skills")
            for i in range(20):
                learnings.add_learning(
                    ws,
                    f"Learned rule number {i} about the answers",
                    skill=None if i % 2 else "git-help",
                )
            provider = ScriptedProvider(default=ANSWER)
            for m in MESSAGES:  # warm caches (router index, compiled rules)
                respond(ws, m, provider=provider)
            samples = []
            with Clock() as clock:
                for i in range(n):
                    start = time.perf_counter()
                    reply = respond(ws, MESSAGES[i % len(MESSAGES)], provider=provider, user="u")
                    samples.append(
                        (time.perf_counter() - start) * 1000 - reply.completion.latency_ms
                    )
            return samples, clock
        finally:
            ws.dispose()


def raw_commits(url: str, n: int) -> list[float]:
    """The floor under a durable interaction: one-row INSERT commits through psycopg
    alone, on a table of its own, with the server's own ``synchronous_commit``."""
    import psycopg

    dsn = url.replace("postgresql+psycopg://", "postgresql://", 1)
    samples = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE floor (id serial PRIMARY KEY, body text NOT NULL)")
        for _ in range(20):  # warm the connection and the table
            conn.execute("INSERT INTO floor (body) VALUES (%s)", (ANSWER,))
        for _ in range(n):
            start = time.perf_counter()
            conn.execute("INSERT INTO floor (body) VALUES (%s)", (ANSWER,))
            samples.append((time.perf_counter() - start) * 1000)
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=400)
    parser.add_argument(
        "--postgres",
        default=os.environ.get(
            "AMELIO_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
        ),
    )
    args = parser.parse_args()
    rows = []
    floor: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        rows.append(("sqlite", *run(f"sqlite:///{tmp}/bench.db", args.messages)))
    try:
        for commit in ("durable", "fast"):
            with postgres_database(args.postgres, prefix="amelio_bench") as url:
                rows.append((f"postgresql, {commit}", *run(url, args.messages, commit)))
                if commit == "durable":
                    floor = raw_commits(url, args.messages)
    except Exception as exc:  # a benchmark run without PostgreSQL still reports SQLite
        print(f"PostgreSQL not reachable ({exc.__class__.__name__}); skipped", file=sys.stderr)
    print(
        f"respond() overhead per message, {args.messages} messages, 13 skills, "
        "20 learnings, instant provider"
    )
    print(
        f"{'database':20} {'mean ms':>8} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} "
        f"{'wall s':>7} {'CPU s':>6}"
    )
    print("-" * 72)
    for name, samples, clock in rows:
        print(
            f"{name:20} {statistics.fmean(samples):8.2f} {percentile(samples, 50):8.2f} "
            f"{percentile(samples, 95):8.2f} {percentile(samples, 99):8.2f} "
            f"{clock.wall:7.2f} {clock.cpu:6.2f}"
        )
    if floor:
        print(
            f"{'raw durable commit':20} {statistics.fmean(floor):8.2f} "
            f"{percentile(floor, 50):8.2f} {percentile(floor, 95):8.2f} "
            f"{percentile(floor, 99):8.2f}   (psycopg alone, the disk's floor)"
        )
    for name, samples, _ in rows:
        if name == "postgresql, durable" and floor:
            target(
                "respond() overhead p95 on postgresql, durable, less the raw commit's p95",
                percentile(samples, 95) - percentile(floor, 95),
                5.0,
                "ms",
                higher_is_better=False,
            )
            continue
        target(
            f"respond() overhead p95 on {name}",
            percentile(samples, 95),
            5.0,
            "ms",
            higher_is_better=False,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
