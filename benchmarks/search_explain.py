"""What ``"explain": true`` adds to a cached query, in process.

A workspace of ``--docs`` synthetic documents (``search_latency.py``'s generator)
on the default engine, with clicks taught on half the queries so the feedback
part has evidence to read. Every query is searched once to warm the ranking
cache; then each round searches the pool twice, once plain and once with
``explain``, in alternating order, with :meth:`Searcher.search` (the full path:
the cached ranking, the impression written, the token signed). Each call is
checked to be a cache hit, so the rows measure what they say. The added p95 is
the explain row's p95 minus the plain row's.

Target: explain adds at most 1 ms p95 to a cached query.

    python benchmarks/search_explain.py [--docs 20000] [--queries 300] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from pathlib import Path

from benchlib import Clock, load_line, percentile, target
from search_latency import documents, query_pool, teach

from amelio.search import Searcher
from amelio.search.engines.registry import workspace_corpus
from amelio.workspace.folder import init_workspace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=20_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rng = random.Random(11)
    before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="amelio-explain-") as tmp:
        ws, _ = init_workspace(Path(tmp) / "ws")
        docs = documents(args.docs, rng)
        workspace_corpus(ws.settings).apply(docs)
        searcher = Searcher(ws, background_aggregation=False, rng=random.Random(0))
        searcher.settings = ws.settings.model_copy(  # no exploration: every call a cache hit
            update={"search_thompson": 0.0, "search_exploration": 0.0}
        )
        queries = query_pool(docs, rng, args.queries)
        teach(ws, searcher, queries)
        for q in queries:  # the signals version moved: rank each query once more
            searcher.search(q)
        samples: dict[bool, list[float]] = {False: [], True: []}
        with Clock() as clock:
            for round_no in range(args.rounds):
                for i, q in enumerate(queries):
                    order = (False, True) if (i + round_no) % 2 == 0 else (True, False)
                    for explain in order:
                        start = time.perf_counter()
                        response = searcher.search(q, explain=explain)
                        samples[explain].append((time.perf_counter() - start) * 1000)
                        if not response.cached:
                            raise SystemExit(f"{q!r} was not a cache hit: the row would lie")
        ws.dispose()
    print(load_line(before))
    print(f"| {'path':<28} | {'p50 ms':>7} | {'p95 ms':>7} | {'p99 ms':>7} |")
    print(f"|{'-' * 30}|{'-' * 9}|{'-' * 9}|{'-' * 9}|")
    for explain, label in ((False, "cached query"), (True, 'cached query, "explain"')):
        s = samples[explain]
        print(
            f"| {label:<28} | {percentile(s, 50):7.2f} | {percentile(s, 95):7.2f} "
            f"| {percentile(s, 99):7.2f} |"
        )
    print(f"{args.docs:,} documents, {len(queries)} queries × {args.rounds} rounds; {clock}")
    added = percentile(samples[True], 95) - percentile(samples[False], 95)
    target("explain adds to a cached query's p95", added, 1.0, "ms", higher_is_better=False)


if __name__ == "__main__":
    main()
