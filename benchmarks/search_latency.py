"""Search latency of a new query and of a repeated one on each embedded engine, in
process and over HTTP, beside an in-memory BM25 engine (bm25s) asked the same new
queries.

Synthetic help-desk-like documents (words drawn from a Zipf-shaped vocabulary of
5,000 words; titles of 4–8 words, bodies of 40–120) at 10k and 100k documents,
and 1M when the machine has 8 GB of memory available (there only the engines
are compared: no bm25s, hybrid or HTTP rows). Queries are 2–4 title words, no
two with the same set of words, and each "new" row draws its own from that pool
(the engines alone and bm25s are asked the same ones as the in-process rows they
are set beside).

* **builds**: the same documents indexed by tantivy (the default ``embedded``
  engine) and by FTS5, each into a store of its own, timed to a searchable
  index; the notes give each index's size on disk beside the documents', and
  the process's peak memory after each size.
* **new query**: the first time the searching process sees this query text, so
  neither the ranking cache nor the candidate cache can hold it: BM25 over the
  candidates, the feedback score, the impression write, the token. This is what
  a person typing a query nobody typed before waits for. (The OS's page cache
  is warm, as in a running service: the index was just written.) Measured with
  a searcher on each engine.
* **candidates alone**: the engine's ``lexical`` on the same new queries (it has
  no cache): the part of a new query the index itself costs.
* **repeated query**: the same queries again, served from the cache: the
  ranking cache, except in the share of responses that explore by Thompson
  sampling (``search_thompson``, default 0.2), which are re-scored from the
  cached candidates; "no exploration" is the ranking cache alone. Half of the
  queries have clicks aggregated, so the feedback score has signals to read.
* **bm25s**: an outside in-memory BM25 (``pip install bm25s``), indexed on the same
  documents (title and body) before the clock starts, asked the same new queries
  for the same 100 candidates; the query's tokenization is timed with it.
* **hybrid 0.5**: adds the semantic score (``amelio[semantic]``; skipped, and said
  so, without it): a query embedding and a dot product over every document vector.
* **HTTP**: ``amelio serve`` in its own process on a free port, against the same
  workspace (tantivy); new queries from one client, then ``--clients`` concurrent
  clients repeat them. The server aggregates signals every few seconds, each of
  which retires its cached rankings (not its candidates), as in production.

Each row prints its wall-clock and CPU seconds (``benchlib.Clock``; over HTTP the
server's CPU too, read from ``/proc``): CPU well under wall-clock in process means
the machine was busy and the figures are pessimistic.

Targets, at 100k documents: a new query p95 ≤ 30 ms in process on the default
engine, and at most bm25s's p95 on the same queries in the same run (the bm25s
row is measured right after ours, so both see the same machine); a repeated
query p95 ≤ 20 ms in process (DESIGN.md's "≤ 20 ms warm"); a new query p95 ≤
1.2 s over HTTP (the seed's cold floor) and a repeated one ≤ 350 ms (the seed's
warm floor). The ratio of FTS5 to tantivy is printed without a target.

    python benchmarks/search_latency.py [--sizes 10000 100000 1000000] [--clients 8]
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import random
import resource
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import httpx
from benchlib import Clock, load_line, median_of, percentile, target

from amelio.embeddings import optional_embedder
from amelio.feedback import Collector
from amelio.search import Document, Fts5Engine, Searcher, aggregate
from amelio.search.engines.tantivy import TantivyEngine
from amelio.search.simulate import click_events
from amelio.workspace import keys
from amelio.workspace.folder import Workspace, init_workspace
from support.processes import ServeProcess

#: DESIGN.md's targets are stated at this corpus size.
TARGET_DOCS = 100_000
#: The engines alone are compared at this size too, when the memory allows.
BIG_DOCS = 1_000_000
BIG_MEMORY_GB = 8
#: Candidates a search fetches (``search_candidates``'s default); bm25s is asked as many.
CANDIDATES = 100


def available_gb() -> float:
    """Memory available to a new process (Linux), else 0: the 1M row is then skipped."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    return 0.0


class Stats(NamedTuple):
    p50: float
    p95: float
    p99: float

    @classmethod
    def of(cls, samples: Sequence[float]) -> Stats:
        return cls(*(percentile(samples, q) for q in (50, 95, 99)))

    @classmethod
    def median(cls, runs: Sequence[Stats]) -> Stats:
        """Each percentile's median over ``runs``."""
        return cls(*(median_of(values) for values in zip(*runs, strict=True)))


def vocabulary(rng: random.Random, size: int = 5000) -> tuple[list[str], list[float]]:
    """Random words and their cumulative Zipf weights (computed once: ``choices``
    with plain weights sums all 5,000 of them again on every call)."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = sorted(
        {"".join(rng.choice(letters) for _ in range(rng.randint(3, 9))) for _ in range(size * 2)}
    )[:size]
    rng.shuffle(words)
    return words, list(itertools.accumulate(1.0 / (i + 1) for i in range(len(words))))


def documents(count: int, rng: random.Random) -> list[Document]:
    words, cum = vocabulary(rng)
    return [
        Document(
            f"doc-{i}",
            " ".join(rng.choices(words, cum_weights=cum, k=rng.randint(4, 8))),
            " ".join(rng.choices(words, cum_weights=cum, k=rng.randint(40, 120))),
        )
        for i in range(count)
    ]


def query_pool(docs: Sequence[Document], rng: random.Random, count: int) -> list[str]:
    """``count`` queries of 2–4 title words, no two with the same set of words: a
    reordered query would be a new text to the caches but the same work to the index."""
    words = [w for d in docs[:2000] for w in d.title.split()]
    seen: set[frozenset[str]] = set()
    pool: list[str] = []
    while len(pool) < count:
        chosen = rng.sample(words, rng.randint(2, 4))
        if len(set(chosen)) == len(chosen) and frozenset(chosen) not in seen:
            seen.add(frozenset(chosen))
            pool.append(" ".join(chosen))
    return pool


class Table:
    """The printed table; each row is one measured phase."""

    def __init__(self) -> None:
        print(
            f"| {'docs':>7} | {'query':<8} | {'path':<40} | {'p50 ms':>7} | {'p95 ms':>7} "
            f"| {'p99 ms':>7} | {'target':<10} | {'wall s':>6} | {'CPU s':<18} |",
            flush=True,
        )
        print(
            f"|{'-' * 9}|{'-' * 10}|{'-' * 42}|{'-' * 9}|{'-' * 9}|{'-' * 9}|{'-' * 12}"
            f"|{'-' * 8}|{'-' * 20}|",
            flush=True,
        )

    @staticmethod
    def row(
        size: int,
        query: str,
        path: str,
        samples: Sequence[float] | Stats,
        clock: Clock,
        goal: str = "",
        cpu: str = "",
    ) -> Stats:
        s = samples if isinstance(samples, Stats) else Stats.of(samples)
        cpu = cpu or f"{clock.cpu:.1f}"
        print(
            f"| {size:>7,} | {query:<8} | {path:<40} | {s.p50:7.2f} | {s.p95:7.2f} "
            f"| {s.p99:7.2f} | {goal:<10} | {clock.wall:6.1f} | {cpu:<18} |",
            flush=True,
        )
        return s


def measure(call: Callable[[str], object], queries: Iterable[str]) -> tuple[list[float], Clock]:
    """Milliseconds per call, and the phase's wall-clock and CPU time."""
    samples: list[float] = []
    with Clock() as clock:
        for q in queries:
            start = time.perf_counter()
            call(q)
            samples.append((time.perf_counter() - start) * 1000)
    return samples, clock


def searched(searcher: Searcher, query: str, **options: Any) -> Callable[[str], object]:
    """``searcher.search`` that checks each response against what the row claims
    (``query`` is "new" or "repeated"): a new query served from the ranking cache,
    or a repeated one computed again without exploring, would make the row a lie."""

    def call(text: str) -> object:
        response = searcher.search(text, **options)
        hit = response.cached or response.explored  # explored: sampled, or a swap
        if (query == "new" and response.cached) or (query == "repeated" and not hit):
            raise SystemExit(
                f"{text!r} as a {query} query: cached={response.cached}; "
                "the row would not measure what it says"
            )
        return response

    return call


def teach(ws: Workspace, searcher: Searcher, queries: Sequence[str]) -> int:
    """Clicks on the second result of every other query, through the collector."""
    events = []
    for n, q in enumerate(queries[::2]):
        response = searcher.search(q)
        if len(response.results) >= 2:
            events += click_events(response, 2, f"bench-{n}", 20_000, int(time.time() * 1000))
    Collector(ws).ingest(events, rate_limit=False)
    return aggregate(ws).events


class Bm25s:
    """bm25s over the same documents, title and body as one field (it has no fields),
    no stop words (the vocabulary is synthetic) and no stemming."""

    def __init__(self, docs: Sequence[Document]) -> None:
        import bm25s  # type: ignore[import-untyped]  # here: load.py imports this module

        logging.getLogger("bm25s").setLevel(logging.WARNING)  # its import sets DEBUG
        self.bm25s = bm25s
        texts = [f"{d.title}\n{d.body}" for d in docs]
        tokens = bm25s.tokenize(texts, stopwords=None, show_progress=False)
        self.retriever = bm25s.BM25()
        self.retriever.index(tokens, show_progress=False)

    def search(self, query: str) -> object:
        tokens = self.bm25s.tokenize([query], stopwords=None, return_ids=False, show_progress=False)
        return self.retriever.retrieve(tokens, k=CANDIDATES, show_progress=False)


# -- HTTP: `amelio serve` in a process of its own ----------------------------------------


def poster(client: httpx.Client) -> Callable[[str], object]:
    return lambda query: client.post("/v1/search", json={"query": query}).raise_for_status()


def concurrently(
    base: str, headers: dict[str, str], queries: Sequence[str], clients: int, rounds: int
) -> list[float]:
    """``clients`` threads, each with its own connection, repeat ``queries``
    ``rounds`` times between them, each starting at a different place in the list."""
    samples: list[float] = []
    lock = threading.Lock()
    start_together = threading.Barrier(clients)
    share = rounds * len(queries) // clients

    def client(offset: int) -> None:
        mine = [queries[(i + offset) % len(queries)] for i in range(share)]
        with httpx.Client(base_url=base, headers=headers) as h:
            start_together.wait()
            found, _ = measure(poster(h), mine)
        with lock:
            samples.extend(found)

    threads = [threading.Thread(target=client, args=(n * 7,)) for n in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return samples


def cpu_cell(clock: Clock, server_before: float | None, server_after: float | None) -> str:
    """This process's CPU seconds and the server's."""
    if server_before is None or server_after is None:
        return f"{clock.cpu:.1f} + server ?"
    return f"{clock.cpu:.1f} + server {server_after - server_before:.1f}"


def over_http(
    ws: Workspace,
    table: Table,
    size: int,
    queries: Sequence[str],
    clients: int,
    rounds: int,
    notes: list[str],
) -> tuple[Stats, Stats]:
    """New queries from one client, then the same queries repeated by ``clients``."""
    _, key = keys.create_key(ws.engine, name=f"bench-{size}", role="bot")
    aggregate(ws)  # the in-process searches' impressions: no backlog for the server
    headers = {"Authorization": f"Bearer {key}"}
    goal = size == TARGET_DOCS
    with (
        ServeProcess(ws.root, log=ws.settings.data_dir / "serve.log") as server,
        httpx.Client(base_url=server.base, headers=headers) as h,
    ):
        # Untimed: the server builds its searcher on its first search (start-up, not a
        # query); this text is in no pool.
        poster(h)("start up the server process")
        start = server.cpu_seconds()
        new, clock = measure(poster(h), queries)
        middle = server.cpu_seconds()
        fresh = table.row(
            size,
            "new",
            "HTTP, amelio serve process, 1 client",
            new,
            clock,
            "p95 ≤ 1200" if goal else "",
            cpu_cell(clock, start, middle),
        )
        with Clock() as clock:
            repeated = concurrently(server.base, headers, queries, clients, rounds)
        again = table.row(
            size,
            "repeated",
            f"HTTP, amelio serve process, {clients} clients",
            repeated,
            clock,
            "p95 ≤ 350" if goal else "",
            cpu_cell(clock, middle, server.cpu_seconds()),
        )
    notes.append(
        f"{size:,}: over HTTP, {len(repeated) / clock.wall:,.0f} repeated searches/s "
        f"from {clients} clients"
    )
    return fresh, again


def disk_mb(*paths: Path) -> float:
    """Megabytes on disk under ``paths`` (files, or folders walked)."""
    total = 0
    for path in paths:
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        total += sum(p.stat().st_size for p in files)
    return total / 1e6


def peak_rss_mb() -> float:
    """This process's peak resident memory so far (Linux reports kilobytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def one_size(
    size: int, args: argparse.Namespace, rng: random.Random, table: Table, notes: list[str]
) -> dict[str, Stats]:
    """Every row at ``size`` documents; the figures the targets read, by name. Past
    the target size only the engines are compared (no bm25s, hybrid or HTTP)."""
    n = args.queries
    found: dict[str, Stats] = {}
    goal = size == TARGET_DOCS
    full = size <= TARGET_DOCS
    with Clock() as clock:
        docs = documents(size, rng)
        pool = query_pool(docs, rng, 3 * n)
    lexical_new, hybrid_new, http_new = pool[:n], pool[n : 2 * n], pool[2 * n :]
    notes.append(f"{size:,}: documents and {len(pool)} distinct queries generated: {clock}")
    with tempfile.TemporaryDirectory() as tmp:
        ws, _ = init_workspace(Path(tmp) / "ws")
        try:
            # The workspace's default engine (tantivy), and FTS5 on a store of its own:
            # each build is timed from the same documents to a searchable index.
            corpus = TantivyEngine.for_workspace(ws.settings.data_dir)
            with Clock() as clock:
                corpus.apply(docs)
            docs_mb = disk_mb(corpus.path)
            notes.append(
                f"{size:,}: tantivy build {clock}; on disk: index "
                f"{disk_mb(corpus.index_dir):,.0f} MB + documents {docs_mb:,.0f} MB"
            )
            fts5 = Fts5Engine(Path(tmp) / "fts5" / "corpus.db")
            with Clock() as clock:
                fts5.apply(docs)
            fts5_mb = disk_mb(fts5.path)
            notes.append(
                f"{size:,}: FTS5 build {clock}; on disk: index "
                f"{fts5_mb - docs_mb:,.0f} MB + documents {docs_mb:,.0f} MB "
                "(one file)"
            )
            searcher = Searcher(ws, engine=corpus, background_aggregation=False)
            searcher.search("start up the searcher")  # untimed; in no pool
            samples, clock = measure(searched(searcher, "new"), lexical_new)
            found["new"] = table.row(
                size,
                "new",
                "in process, lexical, tantivy (default)",
                samples,
                clock,
                "p95 ≤ 30" if goal else "",
            )
            samples, clock = measure(lambda q: corpus.lexical(q, CANDIDATES), lexical_new)
            alone = table.row(
                size, "new", "tantivy candidates alone (same queries)", samples, clock
            )
            if full:
                with Clock() as clock:
                    engine = Bm25s(docs)
                notes.append(f"{size:,}: bm25s indexing: {clock}")
                # It has no cache, so the same queries again are new to it: the median of
                # 3 passes, each percentile apart, steadies a denominator measured in ms.
                with Clock() as clock:
                    passes = [Stats.of(measure(engine.search, lexical_new)[0]) for _ in range(3)]
                found["bm25s new"] = bm = table.row(
                    size,
                    "new",
                    "bm25s, in memory (same queries, median 3)",
                    Stats.median(passes),
                    clock,
                )
                del engine
                notes.append(
                    f"{size:,}: new query p95 / bm25s p95 = "
                    f"{found['new'].p95 / bm.p95:.2f}× (tantivy candidates alone: "
                    f"{alone.p95 / bm.p95:.2f}×)"
                )
            old = Searcher(ws, engine=fts5, background_aggregation=False)
            old.search("start up the searcher")
            samples, clock = measure(searched(old, "new"), lexical_new)
            found["fts5 new"] = table.row(size, "new", "in process, lexical, FTS5", samples, clock)
            samples, clock = measure(lambda q: fts5.lexical(q, CANDIDATES), lexical_new)
            fts = table.row(size, "new", "FTS5 candidates alone (same queries)", samples, clock)
            del old
            notes.append(
                f"{size:,}: new query p95, FTS5 / tantivy = "
                f"{found['fts5 new'].p95 / found['new'].p95:.0f}× in process, "
                f"{fts.p95 / alone.p95:.0f}× for the candidates alone"
            )
            notes.append(f"{size:,}: {teach(ws, searcher, lexical_new)} feedback events aggregated")
            for q in lexical_new:  # cache the new signals version's ranking (a search
                searcher.rank(q)  # that explored would not have cached it)
            samples, clock = measure(searched(searcher, "repeated"), lexical_new * 3)
            found["repeated"] = table.row(
                size,
                "repeated",
                "in process, lexical, 20 % exploring",
                samples,
                clock,
                "p95 ≤ 20" if goal else "",
            )
            searcher.settings = ws.settings.model_copy(update={"search_thompson": 0.0})
            samples, clock = measure(searched(searcher, "repeated"), lexical_new * 3)
            table.row(size, "repeated", "in process, lexical, no exploration", samples, clock)
            searcher.settings = ws.settings
            if full:
                hybrid_rows(ws, corpus, searcher, size, hybrid_new, table, found, notes)
                found["http new"], found["http repeated"] = over_http(
                    ws, table, size, http_new, args.clients, args.rounds, notes
                )
            notes.append(f"{size:,}: peak memory of this process so far: {peak_rss_mb():,.0f} MB")
        finally:
            ws.dispose()
    return found


def hybrid_rows(
    ws: Workspace,
    corpus: TantivyEngine,
    searcher: Searcher,
    size: int,
    queries: Sequence[str],
    table: Table,
    found: dict[str, Stats],
    notes: list[str],
) -> None:
    """The hybrid 0.5 rows, when ``amelio[semantic]`` is installed."""
    goal = size == TARGET_DOCS
    embedder = optional_embedder(ws.settings)
    if embedder is None:
        notes.append("hybrid alpha 0.5: skipped (pip install 'amelio[semantic]')")
        return
    with Clock() as clock:
        corpus.apply([], embedder=embedder)
    notes.append(f"{size:,}: embedding ({embedder.model}): {clock}")
    hybrid: dict[str, Any] = {"profile": "hybrid_with_feedback", "alpha": 0.5}
    searcher.search("start up the vectors", **hybrid)  # untimed: loads the matrix
    samples, clock = measure(searched(searcher, "new", **hybrid), queries)
    found["hybrid new"] = table.row(
        size, "new", "in process, hybrid 0.5", samples, clock, "p95 ≤ 1200" if goal else ""
    )
    for q in queries:
        searcher.rank(q, **hybrid)
    samples, clock = measure(searched(searcher, "repeated", **hybrid), list(queries) * 3)
    found["hybrid repeated"] = table.row(
        size,
        "repeated",
        "in process, hybrid 0.5, 20 % exploring",
        samples,
        clock,
        "p95 ≤ 20" if goal else "",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=None,
        help="Corpus sizes (default: 10k, 100k, and 1M when the machine "
        f"has {BIG_MEMORY_GB} GB of memory available).",
    )
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument(
        "--queries", type=int, default=200, help="New queries per row (each row draws its own)."
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="Times the repeated rows repeat their queries."
    )
    args = parser.parse_args()
    # Warnings only: configured first, so the logging.basicConfig(level=INFO) that
    # importing wordllama runs is a no-op; httpx logs one INFO line per request.
    logging.basicConfig(level=logging.WARNING)
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)
    if args.sizes is None:
        args.sizes = [10_000, TARGET_DOCS]
        if available_gb() >= BIG_MEMORY_GB:
            args.sizes.append(BIG_DOCS)
    rng = random.Random(7)
    notes: list[str] = []
    load = os.getloadavg()[0]
    table = Table()
    results = {size: one_size(size, args, rng, table, notes) for size in args.sizes}
    print()
    for note in notes:
        print(note)
    print(load_line(load))
    print("CPU s: this process; over HTTP, plus the server process's.")
    print()
    at = results.get(TARGET_DOCS)
    if at is None:
        print(f"No targets checked: they are stated at {TARGET_DOCS:,} documents.")
        return
    docs = f"{TARGET_DOCS // 1000}k docs"
    checks = [
        ("new", f"search p95, new query, {docs}, in process", 30.0),
        ("repeated", f"search p95, repeated query, {docs}, in process", 20.0),
        ("hybrid new", f"hybrid 0.5 p95, new query, {docs}, in process", 1200.0),
        ("hybrid repeated", f"hybrid 0.5 p95, repeated query, {docs}, in process", 20.0),
        ("http new", f"search p95, new query, {docs}, HTTP 1 client", 1200.0),
        (
            "http repeated",
            f"search p95, repeated query, {docs}, HTTP {args.clients} clients",
            350.0,
        ),
    ]
    for key, name, goal in checks:
        if key in at:
            target(name, at[key].p95, goal, "ms", higher_is_better=False)
    if "bm25s new" in at:
        target(
            f"search p95, new query, {docs}, in process, at most bm25s's p95 (same run)",
            at["new"].p95,
            at["bm25s new"].p95,
            "ms",
            higher_is_better=False,
        )


if __name__ == "__main__":
    main()
