"""Load test: mixed traffic on `amelio serve` over loopback, rising to the knee.

For each configuration (database × worker processes) the script builds a fresh
workspace (what ``amelio init``, ``skills import`` of the example skills,
``corpus import`` of a synthetic corpus and ``keys create`` do), starts ``amelio
serve --workers N`` in its own processes, and drives it with async httpx virtual
users that send requests back to back (no think time):

* 70 % ``POST /v1/search``: a query drawn uniformly from a pool of distinct
  queries, large enough that most searches are new ones (not warm-cache hits);
* 25 % ``POST /v1/feedback/events``: a ``result_clicked`` and a
  ``result_dwell_time`` event (``query_abandoned`` when there was no result) on
  that user's last search, with its real ``queryId`` and ``feedbackToken`` and a
  fresh ``eventId``; every 10 requests a user becomes a new session;
* 5 % ``POST /v1/chat``: routing, prompt, evals and the interaction record
  around an OpenAI-compatible fake LLM (``amelio.testing.FakeLLMServer``, in
  its own process) that answers at once.

After a warm-up that sends every kind of request to every worker, the number of
users doubles step by step (1, 2, 4, …) until throughput stops rising (two steps
in a row add under 10 % to the best so far), p95 passes 10× the first step's,
or ``--max-concurrency``. The knee is the smallest step within 10 % of the best
throughput. Rate limits are the defaults; a 429 is counted apart and is
not an error. After each configuration the feedback events stored in the
database are compared, by ``eventId``, to those the API acknowledged as stored
(``accepted`` in its 202): a lost event is one acknowledged and not stored. The
HMAC chain is checked as ``amelio feedback verify`` does. The script exits 1 when
an event is lost or refused, the chain is broken, or a request fails other than
by 429.

    python benchmarks/load.py [--duration 8] [--max-concurrency 64]
        [--databases sqlite,postgresql] [--workers 1,2] [--postgres-url URL] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import multiprocessing
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import sqlalchemy as sa
from benchlib import target
from respond_overhead import ANSWER, MESSAGES  # this folder: the same chat messages
from search_latency import documents  # this folder: the same synthetic corpus

from amelio import skills
from amelio.db.schema import feedback_events
from amelio.embeddings import optional_embedder
from amelio.feedback import verify_events
from amelio.feedback.examples import example_event
from amelio.search import Fts5Engine
from amelio.testing import FakeLLMServer
from amelio.workspace import keys
from amelio.workspace.discovery import CONFIG_FILE
from amelio.workspace.folder import init_workspace, open_workspace
from support.processes import ServeProcess, postgres_database

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("search", "feedback", "chat")
MIX = (0.70, 0.25, 0.05)
SESSION_REQUESTS = 10
WARMUP_ROUNDS = 4  # search, feedback, chat; by 2 users per worker
TIMEOUT_S = 30.0
RISE = 1.10  # a step must add 10 % to the best throughput so far to go on
EXPLODED = 10.0  # ... and keep p95 under 10× the first step's
# The driver's own requests are not news (alembic's migration turns INFO logging on):
# a log line for each would spend CPU that the server under test needs.
logging.getLogger("httpx").setLevel(logging.WARNING)
#: Settings each configuration's amelio.toml decides, whatever the environment says.
PINNED = (
    "AMELIO_WORKSPACE",
    "AMELIO_DATABASE_URL",
    "AMELIO_LLM_PROVIDER",
    "AMELIO_LLM_BASE_URL",
    "AMELIO_LLM_API_KEY",
    "AMELIO_LLM_MODEL",
)


# -- what was measured -------------------------------------------------------------


class Sample(NamedTuple):
    """One request: its kind, latency and HTTP status (0: no answer at all)."""

    kind: str
    ms: float
    status: int

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


def percentiles(values: Sequence[float]) -> tuple[float, float, float] | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0], values[0], values[0]
    q = statistics.quantiles(values, n=100, method="inclusive")
    return q[49], q[94], q[98]


@dataclass(frozen=True)
class Step:
    """One level of concurrency, run for a bounded time; ``driver_cpu`` is the CPU
    time the driver itself used, in seconds (the server had the rest)."""

    users: int
    seconds: float
    samples: list[Sample]
    driver_cpu: float = 0.0

    @property
    def throughput(self) -> float:
        """Answered (2xx) requests per second."""
        return sum(s.ok for s in self.samples) / self.seconds

    def latency(self, kind: str | None = None) -> tuple[float, float, float] | None:
        """p50, p95 and p99 in ms of the answered requests (of one kind, or all)."""
        return percentiles(
            [s.ms for s in self.samples if s.ok and (kind is None or s.kind == kind)]
        )

    @property
    def p95(self) -> float:
        found = self.latency()
        return found[1] if found else float("inf")

    @property
    def errors(self) -> Counter[tuple[str, int]]:
        """Failed requests other than 429, by (kind, status)."""
        return Counter((s.kind, s.status) for s in self.samples if not s.ok and s.status != 429)

    @property
    def limited(self) -> int:
        return sum(s.status == 429 for s in self.samples)


@dataclass
class Ledger:
    """What the API said about feedback events and which queries were sent: the
    evidence the checks after a configuration compare the database with."""

    acknowledged: set[str] = field(default_factory=set)  # "accepted" in a 202
    refused: Counter[str] = field(default_factory=Counter)  # other per-event statuses
    in_doubt: set[str] = field(default_factory=set)  # sent, no answer came back
    queries_seen: set[str] = field(default_factory=set)
    searches: int = 0
    repeated: int = 0


@dataclass(frozen=True)
class Result:
    """One configuration's steps and the feedback checks."""

    database: str
    workers: int
    steps: list[Step]
    ledger: Ledger
    stored: set[str]
    chain_ok: bool

    @property
    def label(self) -> str:
        return f"{self.database}, {self.workers} worker{'s' if self.workers > 1 else ''}"

    @property
    def lost(self) -> set[str]:
        return self.ledger.acknowledged - self.stored

    @property
    def unexpected(self) -> set[str]:
        """Stored events the API never acknowledged, beyond those whose answer was lost."""
        return self.stored - self.ledger.acknowledged - self.ledger.in_doubt

    @property
    def errors(self) -> int:
        return sum(sum(step.errors.values()) for step in self.steps)

    @property
    def limited(self) -> int:
        return sum(step.limited for step in self.steps)

    @property
    def knee(self) -> Step | None:
        """The smallest step within 10 % of the best throughput; None while the last
        step still raised it (more users would have helped)."""
        top = max(step.throughput for step in self.steps)
        first = next(step for step in self.steps if step.throughput * RISE >= top)
        rising = len(self.steps) < 2 or first is self.steps[-1]
        return None if rising else first

    @property
    def passed(self) -> bool:
        return (
            not self.lost
            and not self.unexpected
            and not self.errors
            and self.chain_ok
            and not self.ledger.refused
        )


# -- the virtual users -------------------------------------------------------------


def feedback_for(search: dict[str, Any], session: str, rng: random.Random) -> list[dict[str, Any]]:
    """What a client sends after a search: a click and a dwell time on a result (the
    top ones more often), or an abandonment when there was none."""
    request = {
        "token": search["feedbackToken"],
        "query_id": search["queryId"],
        "request_id": search["requestId"],
        "session_id": session,
        "user_id": f"user-{session}",
    }
    results = search["results"]
    if not results:
        return [example_event("query_abandoned", **request)]
    hit = results[min(int(rng.expovariate(0.5)), len(results) - 1)]
    events = [example_event(kind, **request) for kind in ("result_clicked", "result_dwell_time")]
    for event in events:
        event["request"] |= {"rankProfile": search["rankProfile"], "alpha": search["alpha"]}
        event["result"] = {"docId": hit["docId"], "rankShown": hit["rank"]}
    events[1]["outcome"] = {"dwellMs": rng.randint(500, 60_000)}
    return events


class VirtualUser:
    """One client: it searches, sends feedback on its last search, chats, and becomes
    a new session every few requests (a stream of people, as a browser tab is)."""

    def __init__(
        self, client: httpx.AsyncClient, queries: Sequence[str], ledger: Ledger, rng: random.Random
    ) -> None:
        self.client, self.queries, self.ledger, self.rng = client, queries, ledger, rng
        self.last_search: dict[str, Any] | None = None
        self.session = ""
        self.sent = 0

    async def run(self, deadline: float, samples: list[Sample]) -> None:
        """Requests back to back, in the mix, until ``deadline``."""
        while time.monotonic() < deadline:
            kind = self.rng.choices(KINDS, MIX)[0]
            if kind == "feedback" and self.last_search is None:
                kind = "search"  # a user's first request: nothing to give feedback on yet
            samples.append(await self.request(kind))

    async def request(self, kind: str) -> Sample:
        """Send one request of ``kind`` and book what its answer says."""
        if self.sent % SESSION_REQUESTS == 0:
            self.session = uuid.uuid4().hex
        self.sent += 1
        ledger = self.ledger
        event_ids: list[str] = []
        if kind == "search":
            query = self.rng.choice(self.queries)
            ledger.searches += 1
            ledger.repeated += query in ledger.queries_seen
            ledger.queries_seen.add(query)
            path, body = "/v1/search", {"query": query}
        elif kind == "feedback":
            assert self.last_search is not None
            events = feedback_for(self.last_search, self.session, self.rng)
            event_ids = [e["eventId"] for e in events]
            path, body = "/v1/feedback/events", events
        else:
            path, body = "/v1/chat", {"message": self.rng.choice(MESSAGES), "user": self.session}
        start = time.perf_counter()
        try:
            response = await self.client.post(path, json=body)
            status, payload = response.status_code, response.content
        except httpx.HTTPError:
            status, payload = 0, b""
        sample = Sample(kind, (time.perf_counter() - start) * 1000, status)
        if kind == "search" and status == 200:
            self.last_search = json.loads(payload)
        elif kind == "feedback" and status == 202:
            for event in json.loads(payload)["events"]:
                if event["status"] == "accepted":
                    ledger.acknowledged.add(event["eventId"])
                else:
                    ledger.refused[f"{event['status']}: {event.get('reason', '')}"] += 1
        elif kind == "feedback" and (status == 0 or status >= 500):
            ledger.in_doubt.update(event_ids)  # a 4xx (429 included): nothing was stored
        return sample


def _client(base_url: str, key: str, users: int, *, keep_alive: bool = True) -> httpx.AsyncClient:
    limits = httpx.Limits(
        max_connections=users, max_keepalive_connections=users if keep_alive else 0
    )
    return httpx.AsyncClient(
        base_url=base_url,
        timeout=TIMEOUT_S,
        limits=limits,
        headers={"Authorization": f"Bearer {key}"},
    )


async def warm_up(
    base_url: str, key: str, workers: int, queries: Sequence[str], ledger: Ledger
) -> None:
    """Every kind of request several times per worker, each on a new connection (the
    kernel hands new connections to whichever worker accepts first), so that no
    worker's first-request costs (lazy imports, caches, pools) land in a step."""
    async with _client(base_url, key, 2 * workers, keep_alive=False) as client:

        async def rounds(n: int) -> None:
            user = VirtualUser(client, queries, ledger, random.Random(-n - 1))
            for _ in range(WARMUP_ROUNDS):
                for kind in KINDS:
                    await user.request(kind)

        await asyncio.gather(*(rounds(n) for n in range(2 * workers)))


async def run_step(
    base_url: str,
    key: str,
    users: int,
    seconds: float,
    queries: Sequence[str],
    ledger: Ledger,
    seed: int,
) -> Step:
    """``users`` virtual users for ``seconds``; requests in flight at the end finish."""
    samples: list[Sample] = []
    async with _client(base_url, key, users) as client:
        start, cpu = time.monotonic(), time.process_time()
        await asyncio.gather(
            *(
                VirtualUser(client, queries, ledger, random.Random(seed * 1000 + n)).run(
                    start + seconds, samples
                )
                for n in range(users)
            )
        )
        return Step(users, time.monotonic() - start, samples, time.process_time() - cpu)


def climb(levels: Sequence[int], run: Callable[[int], Step]) -> list[Step]:
    """Run rising levels until two steps in a row add under 10 % to the best
    throughput so far (one could be a hiccup of a shared machine), or p95 explodes."""
    steps: list[Step] = []
    flat = 0
    for users in levels:
        step = run(users)
        print(
            f"  {users:>3} users: {step.throughput:7.1f} req/s, p95 {step.p95:7.1f} ms",
            file=sys.stderr,
            flush=True,
        )
        if steps:
            best = max(s.throughput for s in steps)
            flat = flat + 1 if step.throughput < best * RISE else 0
        steps.append(step)
        if flat == 2 or step.p95 > EXPLODED * steps[0].p95:
            break
    return steps


# -- the system under test ---------------------------------------------------------


def prepare_workspace(root: Path, database_url: str, llm_url: str, corpus: Path) -> str:
    """A workspace on ``database_url`` (empty: its own SQLite file) whose LLM is the
    fake one, with the example skills and ``corpus`` imported (the calls that ``amelio
    init``, ``skills import`` and ``corpus import`` make); returns a new bot key."""
    root.mkdir(parents=True)
    settings = {
        "llm_provider": "openai",
        "llm_base_url": llm_url,
        "llm_api_key": "load-test",
        "llm_model": "fake-model",
    }
    if database_url:
        settings["database_url"] = database_url
    (root / CONFIG_FILE).write_text(
        "".join(f"{name} = {json.dumps(value)}\n" for name, value in settings.items())
    )
    ws, _ = init_workspace(root)
    try:
        skills.import_skills(ws.engine, ROOT / "examples" / "skills")
        Fts5Engine.for_workspace(ws.settings.data_dir).import_file(
            corpus, embedder=optional_embedder(ws.settings)
        )
        return keys.create_key(ws.engine, name="load-test", role="bot")[1]
    finally:
        ws.dispose()


def write_corpus(path: Path, count: int, seed: int = 7) -> list[str]:
    """A BEIR JSONL corpus of ``count`` synthetic documents; returns their titles."""
    docs = documents(count, random.Random(seed))
    with path.open("w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"_id": d.doc_id, "title": d.title, "text": d.body}) + "\n")
    return [d.title for d in docs]


def query_pool(titles: Sequence[str], size: int, seed: int = 11) -> list[str]:
    """``size`` distinct queries of 2–4 title words (Zipf-weighted, as users' are)."""
    rng = random.Random(seed)
    words = [w for title in titles for w in title.split()]
    pool: set[str] = set()
    while len(pool) < size:
        pool.add(" ".join(rng.sample(words, rng.randint(2, 4))))
    return sorted(pool)


@contextmanager
def fresh_database(kind: str, postgres_url: str) -> Iterator[str]:
    """An empty database for one configuration: the workspace's own SQLite file
    (an empty URL), or a PostgreSQL database created now and dropped afterwards."""
    if kind == "sqlite":
        yield ""
        return
    with postgres_database(postgres_url, prefix="amelio_load") as url:
        yield url


def _fake_llm(urls: multiprocessing.Queue[str], stop: Event) -> None:
    with FakeLLMServer(default=ANSWER) as llm:
        urls.put(llm.openai_base_url)
        stop.wait()


@contextmanager
def fake_llm() -> Iterator[str]:
    """A zero-latency OpenAI-compatible LLM in its own process (so it competes with
    neither the driver's event loop nor the server for a Python interpreter);
    yields its base URL."""
    context = multiprocessing.get_context("spawn")
    urls: multiprocessing.Queue[str] = context.Queue()
    stop = context.Event()
    process = context.Process(target=_fake_llm, args=(urls, stop), daemon=True)
    process.start()
    try:
        yield urls.get(timeout=60)
    finally:
        stop.set()
        process.join(10)
        if process.is_alive():
            process.kill()


def run_configuration(
    database: str,
    workers: int,
    *,
    levels: Sequence[int],
    seconds: float,
    corpus: Path,
    queries: Sequence[str],
    llm_url: str,
    postgres_url: str = "",
) -> Result:
    """Set up a workspace on a fresh database, serve it, climb, check the events."""
    with tempfile.TemporaryDirectory() as tmp, fresh_database(database, postgres_url) as url:
        root = Path(tmp) / "ws"
        key = prepare_workspace(root, url, llm_url, corpus)
        env = {k: v for k, v in os.environ.items() if k not in PINNED}
        ledger = Ledger()
        with ServeProcess(root, workers=workers, env=env) as server:
            base = server.base

            def step(users: int) -> Step:
                return asyncio.run(run_step(base, key, users, seconds, queries, ledger, users))

            asyncio.run(warm_up(base, key, workers, queries, ledger))  # not reported
            steps = climb(levels, step)
        ws = open_workspace(root)
        try:
            with ws.engine.connect() as conn:
                stored = set(conn.scalars(sa.select(feedback_events.c.event_id)))
            chain_ok = verify_events(ws).ok
        finally:
            ws.dispose()
        return Result(database, workers, steps, ledger, stored, chain_ok)


# -- the report --------------------------------------------------------------------


def cell(found: tuple[float, float, float] | None) -> str:
    return (
        "-" if found is None else " / ".join(f"{v:.0f}" if v >= 10 else f"{v:.1f}" for v in found)
    )


def print_result(result: Result) -> None:
    ledger = result.ledger
    share = ledger.repeated / ledger.searches if ledger.searches else 0.0
    print(f"\n### {result.label}\n")
    print(
        f"Searches: {ledger.searches:,}, of which {share:.1%} repeated a query already "
        "sent in this configuration (the most that can have been warm-cache hits).\n"
    )
    print(
        "| users | req/s | all p50 / p95 / p99 ms | search | feedback | chat "
        "| errors | 429 | driver CPU |"
    )
    print("|---:|---:|---|---|---|---|---:|---:|---:|")
    for step in result.steps:
        print(
            f"| {step.users} | {step.throughput:,.0f} | {cell(step.latency())} | "
            + " | ".join(cell(step.latency(kind)) for kind in KINDS)
            + f" | {sum(step.errors.values())} | {step.limited} "
            f"| {step.driver_cpu / step.seconds:.0%} |"
        )
    errors = Counter[tuple[str, int]]()
    for step in result.steps:
        errors.update(step.errors)
    if errors:
        print(
            "\nErrors: "
            + ", ".join(
                f"{kind} {status or 'no answer'} × {n}"
                for (kind, status), n in errors.most_common()
            )
        )
    if ledger.refused:
        print(
            "\nEvents refused: "
            + "; ".join(f"{why} × {n}" for why, n in ledger.refused.most_common(5))
        )


def users(n: int) -> str:
    return f"{n} user{'s' if n > 1 else ''}"


def summary_line(result: Result) -> str:
    knee = result.knee
    last = result.steps[-1]
    where = (
        f"knee at {users(knee.users)}: {knee.throughput:,.0f} req/s, p95 {knee.p95:.0f} ms"
        if knee
        else f"no knee up to {users(last.users)} ({last.throughput:,.0f} req/s)"
    )
    chain = "chain verified" if result.chain_ok else "CHAIN BROKEN"
    return (
        f"{result.label}: {where}; errors {result.errors}, 429 {result.limited}; "
        f"events acknowledged {len(result.ledger.acknowledged):,}, stored "
        f"{len(result.stored):,}, lost {len(result.lost)}"
        + (f", unacknowledged but stored {len(result.unexpected)}" if result.unexpected else "")
        + (
            f", in doubt (no answer) {len(result.ledger.in_doubt)}"
            if result.ledger.in_doubt
            else ""
        )
        + f"; {chain}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--duration", type=float, default=None, help="Seconds per step (default 8; 2 with --quick)."
    )
    parser.add_argument(
        "--max-concurrency",
        type=int,
        default=None,
        help="Most virtual users (default 64; 4 with --quick).",
    )
    parser.add_argument(
        "--databases", default=None, help="sqlite,postgresql (default; sqlite with --quick)."
    )
    parser.add_argument(
        "--workers", default=None, help="Worker counts, e.g. 1,2 (default; 1 with --quick)."
    )
    parser.add_argument(
        "--docs",
        type=int,
        default=None,
        help="Documents in the corpus (default 5000; 1000 with --quick).",
    )
    parser.add_argument(
        "--queries", type=int, default=50_000, help="Distinct queries searches are drawn from."
    )
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("AMELIO_TEST_POSTGRES_URL", ""),
        help="Server to create a throwaway database on (default: AMELIO_TEST_POSTGRES_URL).",
    )
    parser.add_argument(
        "--quick", action="store_true", help="A smoke check in well under a minute."
    )
    args = parser.parse_args()
    for name in PINNED:
        os.environ.pop(name, None)
    quick = args.quick
    seconds = args.duration or (2.0 if quick else 8.0)
    top = args.max_concurrency or (4 if quick else 64)
    levels = [1 << n for n in range(top.bit_length()) if 1 << n <= top]
    databases = (args.databases or ("sqlite" if quick else "sqlite,postgresql")).split(",")
    workers = [int(w) for w in (args.workers or ("1" if quick else "1,2")).split(",")]
    docs = args.docs or (1000 if quick else 5000)
    skipped = []
    if "postgresql" in databases and not args.postgres_url:
        databases.remove("postgresql")
        skipped.append("postgresql (set --postgres-url or AMELIO_TEST_POSTGRES_URL)")

    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.jsonl"
        queries = query_pool(write_corpus(corpus, docs), args.queries)
        print(
            f"Load test of `amelio serve` over loopback, {os.cpu_count()} CPUs shared by "
            "the server, the driver, the fake LLM and PostgreSQL (load average before "
            f"the run: {os.getloadavg()[0]:.1f})."
        )
        print(
            f"Each step: N async httpx virtual users, requests back to back for {seconds:g} "
            f"s, after a warm-up that sends every kind to every worker; N doubles up to "
            f"{top} until throughput stops rising."
        )
        print(
            "Mix: 70 % POST /v1/search (a query drawn from "
            f"{len(queries):,} distinct ones over {docs:,} synthetic documents: mostly new "
            "queries, FTS5 BM25 + feedback score + impression write + token), 25 % POST "
            "/v1/feedback/events (click + dwell on a result of the user's last search, its "
            "real feedbackToken), 5 % POST /v1/chat (route, prompt, evals, record; fake "
            "OpenAI LLM answering at once)."
        )
        print(
            "req/s: answered (2xx) requests per second; latency: client-side, send to last "
            "byte, answered requests only; rate limits at their defaults; errors: failures "
            "other than 429; driver CPU: the share of one CPU the driver itself used."
        )
        results: list[Result] = []
        with fake_llm() as llm_url:
            for database in databases:
                for count in workers:
                    print(f"{database}, {count} worker(s)...", file=sys.stderr, flush=True)
                    result = run_configuration(
                        database,
                        count,
                        levels=levels,
                        seconds=seconds,
                        corpus=corpus,
                        queries=queries,
                        llm_url=llm_url,
                        postgres_url=args.postgres_url,
                    )
                    results.append(result)
                    print_result(result)
    print("\n## Summary\n")
    for result in results:
        print(f"- {summary_line(result)}")
    for what in skipped:
        print(f"- skipped: {what}")
    for result in results:
        target(
            f"{result.label}: events lost", len(result.lost), 0, "events", higher_is_better=False
        )
        target(
            f"{result.label}: errors other than 429",
            result.errors,
            0,
            "requests",
            higher_is_better=False,
        )
    return 0 if all(r.passed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
