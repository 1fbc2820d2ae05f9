"""Feedback ingestion throughput, beside its floor: the same bodies parsed and stored bare.

Batches of 500 events (a realistic mix: clicks, dwell times, reformulations,
votes with comments to scrub, other types), 50 sessions and 10 queries per
batch, raw ids to hash, a feedbackToken per query to verify, the default
per-session rate limits; half the bodies are JSON arrays, half NDJSON.

- **in process** times ``Collector.ingest_body`` on the request bytes on one
  thread: parse, strict validation, consent, tokens, anonymization and
  scrubbing, rate limits, duplicate check, HMAC chain, one durable transaction
  per batch.
- **floor** stores the same bodies with nothing but ``json.loads``,
  ``json.dumps`` (the payload column) and the bare driver, no validation, no
  hashing, no chain: on SQLite an ``executemany`` INSERT into a table of the same
  shape (same columns and indexes, WAL, ``synchronous=FULL`` as Amelio's
  feedback writes use), on PostgreSQL a psycopg ``COPY`` (what Amelio uses) into
  a table of the same shape; one transaction per batch. Amelio is reported as a
  ratio to it: what all of Amelio's guarantees cost on top of storing the rows.
- **HTTP** POSTs the same kind of bodies, one at a time, to ``amelio serve`` in
  another process (its per-key limit off, so the server's speed is measured).

Every measure runs ``--repeat`` times on fresh events; the median is reported,
with the wall-clock and CPU seconds of the median run. Amelio and the floor get
the same bodies and take turns batch by batch, so a burst of other work on the
machine slows both alike, and the ratio is the median of each run's own ratio.
On SQLite all the work happens in this process. On PostgreSQL the server does
part of it, so its CPU is counted too: the backends connected to the
benchmark's database and the WAL writer, read from ``/proc`` (the server runs
on this machine; when it cannot be read, only wall-clock is reported, and the
table says so). Targets: Amelio in process at 0.8 of its floor or better, on
each database, and at least 20,000 events/s on SQLite (wall-clock, median).

    python benchmarks/feedback_ingest.py [--batches 40] [--repeat 3] [--postgres URL] [--no-http]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa
from benchlib import Clock, load_line, median_of, target
from sqlalchemy.schema import CreateIndex, CreateTable

from amelio.db.schema import feedback_events
from amelio.feedback import Collector, verify_events
from amelio.feedback.examples import example_event
from amelio.feedback.tokens import TokenSigner
from amelio.workspace import keys
from amelio.workspace.folder import Workspace, init_workspace
from support.processes import ServeProcess, postgres_database

BATCH = 500
TARGET_RATE = 20_000
TARGET_RATIO = 0.8
MIX = (
    ["result_clicked"] * 12
    + ["result_dwell_time"] * 4
    + ["query_reformulated"] * 2
    + [
        "vote_up",
        "vote_down",
        "query_abandoned",
        "result_hidden",
        "action_executed",
        "report_problem",
    ]
)
COLUMNS = (
    "seq",
    "event_id",
    "event_type",
    "event_time_ms",
    "received_ms",
    "session_hash",
    "user_hash",
    "query_id",
    "request_id",
    "doc_id",
    "rank_shown",
    "payload",
    "signature",
)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def make_bodies(signer: TokenSigner, batches: int, seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    bodies = []
    for b in range(batches):
        queries = [(f"q-{seed}-{b}-{i}", f"r-{seed}-{b}-{i}") for i in range(10)]
        tokens = {q: signer.issue(q, r) for q, r in queries}
        events = []
        for _ in range(BATCH):
            query, request = rng.choice(queries)
            session = rng.randrange(50)
            event = example_event(
                rng.choice(MIX),
                query_id=query,
                request_id=request,
                token=tokens[query],
                session_id=f"session-{b}-{session}",
                user_id=f"user-{b}-{session}@example.org",
            )
            if event["eventType"] == "vote_down":
                event["vote"]["comment"] = "Wrong date; call me on 06 12 34 56 78."
            events.append(event)
        if b % 2:
            bodies.append("\n".join(json.dumps(e) for e in events).encode())
        else:
            bodies.append(json.dumps(events).encode())
    return bodies


# -- what is measured ----------------------------------------------------------------


@dataclass
class Run:
    """One pass over the bodies: events stored, wall and CPU seconds (this process's;
    ``server_cpu`` the database server's, None when not counted)."""

    events: int = 0
    wall: float = 0.0
    cpu: float = 0.0
    server_cpu: float | None = None

    @property
    def rate(self) -> float:
        return self.events / self.wall

    @property
    def per_cpu(self) -> float:
        return self.events / (self.cpu + (self.server_cpu or 0.0))

    def add(self, events: int, clock: Clock, server_cpu: float | None) -> None:
        self.events += events
        self.wall += clock.wall
        self.cpu += clock.cpu
        if server_cpu is not None:
            self.server_cpu = (self.server_cpu or 0.0) + server_cpu


class ServerCpu:
    """CPU seconds spent by the PostgreSQL processes working for one database (its
    backends, and the WAL writer), read from ``/proc``. :meth:`find` looks for them
    (outside the timed part: it reads every process's command line); none found (a
    server on another machine, or in a container) means wall-clock only."""

    def __init__(self, database: str) -> None:
        self._marks = (f" {database} ".encode(), b": walwriter")
        self.pids: list[int] = []

    def find(self) -> None:
        self.pids = []
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and self._ours((entry / "cmdline").read_bytes()):
                    self.pids.append(int(entry.name))
            except OSError:  # gone meanwhile, or not ours to read
                continue

    def _ours(self, cmdline: bytes) -> bool:
        return cmdline.startswith(b"postgres: ") and any(m in cmdline for m in self._marks)

    def seconds(self) -> dict[int, float]:
        found: dict[int, float] = {}
        for pid in self.pids:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # the backend exited: its last seconds are not counted
                continue
            found[pid] = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
        return found


def timed(work: Callable[[], int], into: Run, server: ServerCpu | None) -> None:
    """Run ``work`` and add its events and seconds to ``into``."""
    before = server.seconds() if server else {}
    with Clock() as clock:
        events = work()
    spent = None
    if server and server.pids:
        after = server.seconds()
        spent = sum(after[pid] - before[pid] for pid in after.keys() & before.keys())
    into.add(events, clock, spent)


# -- the floor: json and the bare driver ------------------------------------------------


def _rows(body: bytes, seq: int, received_ms: int) -> list[tuple[Any, ...]]:
    """The columns Amelio stores, taken from the parsed events as they are: the raw
    session and user ids cut to the column's 8 characters where Amelio stores hashes,
    no signature."""
    text = body.lstrip()
    events = (
        json.loads(text)
        if text.startswith(b"[")
        else [json.loads(line) for line in body.splitlines() if line.strip()]
    )
    rows = []
    for event in events:
        seq += 1
        session, request = event["session"], event["request"]
        result = event.get("result") or {}
        rows.append(
            (
                seq,
                event["eventId"],
                event["eventType"],
                event["eventTimeMs"],
                received_ms,
                session["sessionId"][-8:],
                session.get("userId", "")[-8:],
                request.get("queryId"),
                request.get("requestId"),
                result.get("docId"),
                result.get("rankShown"),
                json.dumps(event),
                "",
            )
        )
    return rows


def _table_ddl(dialect: sa.Dialect, schema: str | None = None) -> list[str]:
    """``feedback_events``'s CREATE TABLE and CREATE INDEX statements: the same shape."""
    table = feedback_events.to_metadata(sa.MetaData(), schema=schema)
    return [str(CreateTable(table).compile(dialect=dialect))] + [
        str(CreateIndex(index).compile(dialect=dialect)) for index in table.indexes
    ]


class SqliteFloor:
    """``json`` and ``sqlite3``: executemany, one transaction per batch."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")  # as Amelio's feedback transactions
        for statement in _table_ddl(sa.make_url("sqlite://").get_dialect()()):
            self.conn.execute(statement)
        self.seq = 0
        marks = ", ".join("?" * len(COLUMNS))
        self.insert = f"INSERT INTO feedback_events ({', '.join(COLUMNS)}) VALUES ({marks})"

    def store(self, bodies: list[bytes]) -> int:
        start = self.seq
        for body in bodies:
            rows = _rows(body, self.seq, int(time.time() * 1000))
            self.conn.execute("BEGIN")
            self.conn.executemany(self.insert, rows)
            self.conn.execute("COMMIT")
            self.seq += len(rows)
        return self.seq - start

    def stored(self) -> int:
        return int(self.conn.execute("SELECT count(*) FROM feedback_events").fetchone()[0])


class PostgresFloor:
    """``json`` and psycopg: COPY, one transaction per batch, in a schema of its own."""

    def __init__(self, url: str) -> None:
        import psycopg  # only with PostgreSQL

        parsed = sa.make_url(url)
        self.conn = psycopg.connect(
            parsed.set(drivername="postgresql").render_as_string(hide_password=False),
            autocommit=True,
        )
        self.conn.execute("CREATE SCHEMA floor")
        for statement in _table_ddl(parsed.get_dialect()(), schema="floor"):
            self.conn.execute(statement)
        self.seq = 0
        self.copy = f"COPY floor.feedback_events ({', '.join(COLUMNS)}) FROM STDIN"

    def store(self, bodies: list[bytes]) -> int:
        start = self.seq
        for body in bodies:
            rows = _rows(body, self.seq, int(time.time() * 1000))
            with (
                self.conn.transaction(),
                self.conn.cursor() as cursor,
                cursor.copy(self.copy) as copy,
            ):
                for row in rows:
                    copy.write_row(row)
            self.seq += len(rows)
        return self.seq - start

    def stored(self) -> int:
        row = self.conn.execute("SELECT count(*) FROM floor.feedback_events").fetchone()
        return int(row[0]) if row else 0


# -- Amelio ---------------------------------------------------------------------------------


def amelio_store(collector: Collector, bodies: list[bytes]) -> int:
    stored = 0
    for body in bodies:
        result = collector.ingest_body(body)
        accepted = result.count("accepted")
        if accepted != BATCH:
            raise SystemExit(f"lost events: {result.counts()}")
        stored += accepted
    return stored


def over_http(ws: Workspace, bodies: list[bytes]) -> Run:
    _, token = keys.create_key(ws.engine, name="bench", role="client")
    env = {**os.environ, "AMELIO_FEEDBACK_RATE_KEY": "0"}
    with (
        ServeProcess(ws.root, env=env) as server,
        httpx.Client(
            base_url=server.base, timeout=30, headers={"Authorization": f"Bearer {token}"}
        ) as client,
    ):
        client.post("/v1/feedback/events", content=bodies[0])

        def post_all() -> int:
            for body in bodies[1:]:
                response = client.post("/v1/feedback/events", content=body)
                if response.status_code != 202 or response.json()["accepted"] != BATCH:
                    raise SystemExit(f"HTTP ingestion failed: {response.text[:500]}")
            return (len(bodies) - 1) * BATCH

        found = Run()
        timed(post_all, found, None)
        return found


# -- one database -----------------------------------------------------------------------


def run(
    url: str, batches: int, repeat: int, http: bool, floor_at: Path | None
) -> dict[str, list[Run]]:
    """Amelio, its floor and (optionally) HTTP, ``repeat`` times each on ``url``.

    Amelio and the floor take turns batch by batch (which goes first alternates),
    so a burst of other work on the machine slows both alike."""
    os.environ["AMELIO_DATABASE_URL"] = url
    postgres = url.startswith("postgresql")
    server = ServerCpu(sa.make_url(url).database or "") if postgres else None
    with tempfile.TemporaryDirectory() as tmp:
        ws, _ = init_workspace(Path(tmp) / "ws")
        try:
            collector = Collector(ws)
            floor: SqliteFloor | PostgresFloor = (
                PostgresFloor(url) if postgres else SqliteFloor(floor_at or Path(tmp) / "f.db")
            )
            warm = make_bodies(collector.signer, 1, seed=1000)
            amelio_store(collector, warm)  # validators, connection pool, salt
            floor.store(warm)
            runs: dict[str, list[Run]] = {"in process": [], "floor": [], "HTTP": []}
            for n in range(repeat):
                if server:
                    server.find()
                amelio, bare = Run(), Run()
                for i, body in enumerate(make_bodies(collector.signer, batches, seed=2 * n)):
                    turns = [
                        (amelio, lambda b=body: amelio_store(collector, [b])),
                        (bare, lambda b=body: floor.store([b])),
                    ]
                    for into, work in turns if i % 2 == 0 else turns[::-1]:
                        timed(work, into, server)
                runs["in process"].append(amelio)
                runs["floor"].append(bare)
                if http:
                    runs["HTTP"].append(
                        over_http(ws, make_bodies(collector.signer, batches + 1, seed=2 * n + 1))
                    )
            expected = (1 + repeat * batches) * BATCH
            if floor.stored() != expected:
                raise SystemExit(f"floor stored {floor.stored()} events, not {expected}")
            report = verify_events(ws)
            if not report.ok:
                raise SystemExit(f"the chain does not verify: {report}")
            return {path: found for path, found in runs.items() if found}
        finally:
            ws.dispose()


# -- the report -------------------------------------------------------------------------


def median_run(runs: list[Run]) -> Run:
    """The run whose rate is the median (its own wall and CPU seconds, consistent)."""
    return sorted(runs, key=lambda r: r.rate)[len(runs) // 2]


def ratio(runs: list[Run], floors: list[Run]) -> float:
    """The median, over the runs, of a run's rate over its own floor's (the two took
    turns batch by batch, so each pair saw the same machine)."""
    return median_of([run.rate / floor.rate for run, floor in zip(runs, floors, strict=True)])


def report(
    rows: list[tuple[str, dict[str, list[Run]]]], batches: int, repeat: int, load: float
) -> None:
    print(
        f"feedback ingestion, {batches} batches of {BATCH} events per run (after one "
        f"warm-up batch), median of {repeat} runs"
    )
    print(
        f"{'database':11} {'path':11} {'events/s':>9} {'x floor':>8} {'range/s':>15} "
        f"{'wall s':>7} {'CPU s':>6} {'server s':>9} {'per CPU-s':>10}"
    )
    print("-" * 92)
    for database, runs in rows:
        for path, found in runs.items():
            rate = median_of([r.rate for r in found])
            mid = median_run(found)
            spread = f"{min(r.rate for r in found):,.0f}-{max(r.rate for r in found):,.0f}"
            in_http = path == "HTTP"
            counted = database == "sqlite" or mid.server_cpu is not None
            server = (
                f"{mid.server_cpu:9.2f}"
                if mid.server_cpu is not None
                else (f"{'':9}" if database == "sqlite" or in_http else f"{'n/a':>9}")
            )
            cpu = f"{'':6}" if in_http else f"{mid.cpu:6.2f}"
            per_cpu = f"{mid.per_cpu:10,.0f}" if counted and not in_http else f"{'':10}"
            print(
                f"{database:11} {path:11} {rate:9,.0f} {ratio(found, runs['floor']):8.2f} "
                f"{spread:>15} {mid.wall:7.2f} {cpu} {server} {per_cpu}"
            )
    print(
        "events/s: wall-clock, median run (range: slowest-fastest run); x floor: median "
        "of each run's rate over its floor's;\n"
        "wall s, CPU s: the median run's; CPU s: this process's; server s: the "
        "PostgreSQL backends of the benchmark's database\n"
        "and the WAL writer (from /proc; n/a: not visible, wall-clock only); per CPU-s: "
        "events per second of all the CPU that\n"
        "did the work (this process plus, on PostgreSQL, the server). HTTP: client and "
        "server are other processes, wall-clock only."
    )
    print(load_line(load))
    for database, runs in rows:
        target(
            f"{database} in process / floor",
            ratio(runs["in process"], runs["floor"]),
            TARGET_RATIO,
            "x floor",
        )
    target(
        "sqlite in process",
        median_of([r.rate for r in dict(rows)["sqlite"]["in process"]]),
        TARGET_RATE,
        "events/s",
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-http", action="store_true")
    parser.add_argument(
        "--postgres",
        default=os.environ.get(
            "AMELIO_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
        ),
    )
    args = parser.parse_args()
    load = os.getloadavg()[0]
    rows: list[tuple[str, dict[str, list[Run]]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        rows.append(
            (
                "sqlite",
                run(
                    f"sqlite:///{tmp}/bench.db",
                    args.batches,
                    args.repeat,
                    not args.no_http,
                    Path(tmp) / "floor.db",
                ),
            )
        )
    try:
        with postgres_database(args.postgres, prefix="amelio_bench") as url:
            rows.append(("postgresql", run(url, args.batches, args.repeat, not args.no_http, None)))
    except sa.exc.OperationalError as exc:  # a run without PostgreSQL still reports SQLite
        print(f"PostgreSQL not reachable ({exc.__class__.__name__}); skipped", file=sys.stderr)
    report(rows, args.batches, args.repeat, load)
    return 0


if __name__ == "__main__":
    sys.exit(main())
