"""Search latency: p50/p95/p99, cold and warm, in process and over HTTP.

Synthetic help-desk-like documents (words drawn from a Zipf-shaped vocabulary of
5,000 words; titles of 4–8 words, bodies of 40–120) at 10k and 100k documents,
200 distinct queries of 2–4 words, half of which then get clicks (real events
through the collector, aggregated) so the feedback score has signals to read.

* "cold" is each query's first search on a fresh searcher (FTS5 BM25 over the
  candidates, the feedback score, the impression write, the token);
* "warm" repeats them: the ranking comes from the cache (the impression is still
  written and the token still signed), except in the share of responses that
  explore by Thompson sampling (``search_thompson``, default 0.2), which are
  computed — so "warm, default" mixes both, and "warm, no exploration" is the
  cache path alone;
* "hybrid alpha 0.5" adds the semantic score (``amelio[semantic]``; skipped,
  and said so, without it): a query embedding and a dot product over every
  document vector;
* "HTTP" runs ``create_app`` on a real loopback port: each query once from one
  client (cold), then the warm queries from ``--clients`` concurrent clients.

Targets: p95 ≤ 20 ms warm at 100k in process; 350 ms warm and 1.2 s cold over
HTTP are the seed's floor.

    python benchmarks/search_latency.py [--sizes 10000 100000] [--clients 8]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import httpx

from amelio import keys
from amelio.feedback import Collector
from amelio.search import Corpus, Document, Searcher, aggregate, optional_embedder
from amelio.search.simulate import click_events
from amelio.server import create_app
from amelio.testing import LiveServer
from amelio.workspace import Workspace, init_workspace


def vocabulary(rng: random.Random, size: int = 5000) -> tuple[list[str], list[float]]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = sorted({"".join(rng.choice(letters) for _ in range(rng.randint(3, 9)))
                    for _ in range(size * 2)})[:size]
    rng.shuffle(words)
    return words, [1.0 / (i + 1) for i in range(len(words))]


def documents(count: int, rng: random.Random) -> list[Document]:
    words, weights = vocabulary(rng)
    return [Document(f"doc-{i}", " ".join(rng.choices(words, weights, k=rng.randint(4, 8))),
                     " ".join(rng.choices(words, weights, k=rng.randint(40, 120))))
            for i in range(count)]


def percentiles(samples: Sequence[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(samples, n=100, method="inclusive")
    return q[49], q[94], q[98]


def row(size: int, path: str, samples: Sequence[float], target: str = "") -> None:
    p50, p95, p99 = percentiles(samples)
    print(f"| {size:>7,} | {path:<34} | {p50:8.2f} | {p95:8.2f} | {p99:8.2f} | {target:<9} |")


def teach(ws: Workspace, searcher: Searcher, queries: list[str]) -> int:
    """Clicks on the second result of every other query, through the collector."""
    events = []
    for n, q in enumerate(queries[::2]):
        response = searcher.search(q)
        if len(response.results) >= 2:
            events += click_events(response, 2, f"bench-{n}", 20_000, int(time.time() * 1000))
    Collector(ws).ingest(events, rate_limit=False)
    return aggregate(ws).events


def timed(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1000


def post(client: httpx.Client, query: str) -> None:
    client.post("/v1/search", json={"query": query}).raise_for_status()


def over_http(ws: Workspace, queries: list[str], clients: int, rounds: int
              ) -> tuple[list[float], list[float]]:
    """Cold: each query once from one client, on a fresh app. Warm: then ``clients``
    concurrent clients repeat them ``rounds`` times."""
    _, key = keys.create_key(ws.engine, name="bench", role="bot")
    warm: list[float] = []
    lock = threading.Lock()
    headers = {"Authorization": f"Bearer {key}"}
    with LiveServer(create_app(ws)) as base:
        with httpx.Client(base_url=base, headers=headers) as h:
            cold = [timed(partial(post, h, q)) for q in queries]

        def client(offset: int) -> None:
            with httpx.Client(base_url=base, headers=headers) as h:
                mine: list[float] = []
                for i in range(rounds * len(queries) // clients):
                    q = queries[(i + offset) % len(queries)]
                    mine.append(timed(partial(post, h, q)))
                with lock:
                    warm.extend(mine)
        threads = [threading.Thread(target=client, args=(n * 7,)) for n in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return cold, warm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    rng = random.Random(7)
    print(f"| {'docs':>7} | {'path':<34} | {'p50 ms':>8} | {'p95 ms':>8} | {'p99 ms':>8} "
          f"| {'target':<9} |")
    print(f"|{'-' * 9}|{'-' * 36}|{'-' * 10}|{'-' * 10}|{'-' * 10}|{'-' * 11}|")
    notes: list[str] = []
    for size in args.sizes:
        with tempfile.TemporaryDirectory() as tmp:
            ws, _ = init_workspace(Path(tmp) / "ws")
            corpus = Corpus.for_workspace(ws.settings.data_dir)
            docs = documents(size, rng)
            start = time.perf_counter()
            corpus.apply(docs)
            notes.append(f"{size:,} documents indexed (FTS5) in "
                         f"{time.perf_counter() - start:.1f} s")
            words = [w for d in docs[:2000] for w in d.title.split()]
            queries = [" ".join(rng.sample(words, rng.randint(2, 4)))
                       for _ in range(args.queries)]
            searcher = Searcher(ws, corpus=corpus, background_aggregation=False)
            row(size, "in process, cold", [timed(partial(searcher.search, q)) for q in queries])
            notes.append(f"{size:,}: {teach(ws, searcher, queries)} feedback events aggregated")
            [searcher.search(q) for q in queries]  # the new signals version: warm it
            row(size, "in process, warm, default", [timed(partial(searcher.search, q))
                                                     for q in queries * 3], "p95 ≤ 20")
            searcher.settings = ws.settings.model_copy(update={"search_thompson": 0.0})
            row(size, "in process, warm, no exploration",
                [timed(partial(searcher.search, q)) for q in queries * 3], "p95 ≤ 20")
            embedder = optional_embedder(ws.settings)
            if embedder is None:
                notes.append("hybrid alpha 0.5: skipped (pip install 'amelio[semantic]')")
            else:
                start = time.perf_counter()
                corpus.apply([], embedder=embedder)
                notes.append(f"{size:,} documents embedded ({embedder.model}) in "
                             f"{time.perf_counter() - start:.1f} s")
                hybrid = partial(searcher.search, profile="hybrid_with_feedback", alpha=0.5)
                row(size, "hybrid 0.5, cold, no exploration",
                    [timed(partial(hybrid, q)) for q in queries])
                row(size, "hybrid 0.5, warm, no exploration", [timed(partial(hybrid, q))
                                                     for q in queries * 3], "p95 ≤ 20")
            cold, warm = over_http(ws, queries, args.clients, 3)
            row(size, "HTTP, cold, 1 client", cold, "p95 ≤ 1200")
            row(size, f"HTTP, warm, {args.clients} clients", warm, "p95 ≤ 350")
            ws.dispose()
    print()
    for note in notes:
        print(note)


if __name__ == "__main__":
    main()
