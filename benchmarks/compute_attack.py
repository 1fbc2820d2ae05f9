"""Idle compute under attack: what one party posing as several browsers gets into the
search index, whether honest browsers still get the work, and what the defences cost
honest browsers' throughput.

Each scenario gets a fresh workspace of ``--docs`` documents (``--corpus``, by default
Cranfield abstracts from ``../shared/data/cranfield``, else the demo's help-desk
articles) imported without vectors, and ``amelio serve`` in its own process with
``contributions`` on and one client key, as a page would have. The clients speak the
HTTP protocol from this process (httpx), each from a network of its own choosing: its
requests carry an ``X-Forwarded-For``, which uvicorn takes for the remote address from
loopback, as from a reverse proxy it trusts. Honest clients embed with the real
WordLlama (what amelio.js's worker computes, to 1e-7) and report the CPU time it took;
forgers send one unit vector for every text (stored, it made every document score 1.0
for any query) and report ``computeMs: 0``.

* **forgery**: two identities leasing all they can and forging every task until
  neither gets one; the documents stored with a forged vector. *One network*: minted
  back to back by the key from one IPv4 /24, the review's reproduction. *One key at
  once*: the same from two networks. *Patient*: two networks, minted more than the key
  window apart, honest through their probation, then forging every task they hold
  together: the documented limit, where only the random spot-check stands.
* **queue**: the one-network pair leases all it can and holds it; the tasks an
  honest browser of another network then gets.
* **budget**: a LOW client reporting 0 CPU leases ``--budget-tasks`` tasks; the
  CPU-seconds the server charged it.
* **honest**: ``--clients`` honest browsers of distinct networks, minted
  ``--window`` + 0.5 s apart, each leasing up to 4 tasks (as amelio.js does) and
  polling every 0.2 s when given none, embed every document. From the first lease
  until every document has a vector: wall-clock, documents per second, and the
  server's CPU seconds per 1,000 documents (``/proc``: user + system), the median of
  ``--runs`` fresh runs. Before the clients start, one semantic search loads the
  server's embedding model, as a serving instance has it.

``contributions_related_seconds`` (the key window, 120 s by default) is scaled down
to ``--window`` seconds so that clients minted apart need not wait minutes; the pairs
minted "at once" are minted milliseconds apart. Run it on the code before a change
and after (same machine, same arguments) to compare: settings an older server does
not know are ignored.

    python benchmarks/compute_attack.py [--docs 1000] [--batch 64] [--clients 2]
        [--runs 5] [--window 2] [--budget-tasks 10] [--corpus PATH] [--only attacks|honest]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from benchlib import load_line, target

from amelio.embeddings import Embedder, load_embedder
from amelio.workspace import keys
from support.contributions import contribution_body, workspace_without_vectors
from support.processes import ServeProcess

HERE = Path(__file__).resolve().parent
CRANFIELD = HERE.parents[1] / "shared" / "data" / "cranfield" / "corpus.jsonl"
DEMO = HERE.parent / "examples" / "demo" / "corpus.jsonl"
MODEL = "wordllama"
TASKS, SEND = "/v1/contributions/tasks", "/v1/contributions"


def documents(count: int, corpus: Path | None) -> tuple[list[dict[str, Any]], str]:
    source = corpus or (CRANFIELD if CRANFIELD.is_file() else DEMO)
    docs = []
    with source.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                doc = json.loads(line)
                docs.append(
                    {"_id": doc["_id"], "title": doc.get("title") or "", "text": doc.get("text")}
                )
            if len(docs) == count:
                break
    return docs, source.parent.name


@dataclass
class Site:
    """One fresh server: its address, keys and search store file."""

    base: str
    client_key: str
    bot_key: str
    store: Path
    server: ServeProcess
    count: int

    def vectors(self) -> dict[str, np.ndarray]:
        with sqlite3.connect(self.store) as conn:
            rows = conn.execute(
                "SELECT d.doc_id, v.vec FROM vectors v JOIN docs d "
                "ON d.rowid = v.rowid WHERE v.model = ?",
                (MODEL,),
            ).fetchall()
        return {doc_id: np.frombuffer(vec, dtype=np.float32) for doc_id, vec in rows}

    def stored(self) -> int:
        with sqlite3.connect(self.store) as conn:
            (found,) = conn.execute(
                "SELECT count(*) FROM vectors WHERE model = ?", (MODEL,)
            ).fetchone()
        return int(found)


@contextmanager
def open_site(docs: list[dict[str, Any]], args: argparse.Namespace) -> Iterator[Site]:
    with tempfile.TemporaryDirectory() as tmp:
        ws, store = workspace_without_vectors(Path(tmp), docs)
        root = ws.root
        _, client_key = keys.create_key(ws.engine, name="page", role="client")
        _, bot_key = keys.create_key(ws.engine, name="search", role="bot")
        path = store.path
        ws.dispose()
        env = {
            **os.environ,
            "AMELIO_CONTRIBUTIONS": "1",
            "AMELIO_WARM_UP": "0",
            "AMELIO_CONTRIBUTIONS_BATCH": str(args.batch),
            "AMELIO_CONTRIBUTIONS_RELATED_SECONDS": str(args.window),
        }
        env.pop("AMELIO_DATABASE_URL", None)
        with ServeProcess(root, env=env) as server:
            yield Site(server.base, client_key, bot_key, path, server, len(docs))


class Client:
    """One browser identity, from ``network`` (an address in it)."""

    def __init__(self, site: Site, network: str, tier: str = "HIGH") -> None:
        self.tier = tier
        self.token: str | None = None
        self.http = httpx.Client(
            base_url=site.base,
            headers={"Authorization": f"Bearer {site.client_key}", "X-Forwarded-For": network},
            timeout=120,
        )
        self.used = 0.0

    def lease(self, n: int, **params: Any) -> dict[str, Any]:
        query: dict[str, Any] = {"tier": self.tier, "purposes": "search_index", "max": n}
        if self.token:
            query["clientToken"] = self.token
        r = self.http.get(TASKS, params=query | params)
        r.raise_for_status()
        body: dict[str, Any] = r.json()
        self.token = body["clientToken"] or self.token
        self.used = float(body["budget"]["usedLastHour"])
        return body

    def send(self, task: dict[str, Any], vectors: Any, compute_ms: float) -> str:
        r = self.http.post(
            SEND,
            json=contribution_body(
                task,
                vectors,
                client_token=self.token,
                tier=self.tier,
                compute_ms=compute_ms,
                client_version="bench/1",
            ),
        )
        if r.status_code == 409:  # the lease ran out
            return "expired"
        r.raise_for_status()
        return str(r.json()["status"])


def forged(task: dict[str, Any]) -> np.ndarray:
    vectors = np.zeros((len(task["input"]["texts"]), task["dimensions"]), dtype=np.float32)
    vectors[:, 0] = 1.0
    return vectors


def honest(
    embedder: Embedder, lock: threading.Lock
) -> Callable[[dict[str, Any]], tuple[Any, float]]:
    """What an honest browser computes for a task: its vectors and CPU milliseconds."""

    def compute(task: dict[str, Any]) -> tuple[Any, float]:
        with lock:  # one model, shared by the clients' threads
            started = time.process_time()
            vectors = embedder.embed(task["input"]["texts"])
            return vectors, (time.process_time() - started) * 1000

    return compute


def forged_docs(site: Site) -> int:
    """Documents stored with a forged vector (nearly the first axis)."""
    return sum(1 for v in site.vectors().values() if v[0] > 0.99)


def forge_all(clients: list[Client], statuses: Counter[str], rounds: int = 30) -> None:
    """Each client leases all it can and forges every task, until none gets any."""
    for _ in range(rounds):
        got = 0
        for c in clients:
            for task in c.lease(8)["tasks"]:
                statuses[c.send(task, forged(task), 0.0)] += 1
                got += 1
        if not got:
            return


@dataclass
class Row:
    scenario: str
    forged: int
    statuses: Counter[str] = field(default_factory=Counter)
    note: str = ""


def forgery(docs: list[dict[str, Any]], args: argparse.Namespace, kind: str) -> Row:
    with open_site(docs, args) as site:
        statuses: Counter[str] = Counter()
        if kind == "one network":
            pair = [Client(site, "203.0.113.10"), Client(site, "203.0.113.200")]
        else:
            pair = [Client(site, "203.0.113.10"), Client(site, "192.0.2.10")]
        if kind == "patient":
            pair[0].lease(1, purposes="none")  # minted (no task), the second a window later
            time.sleep(args.window + 0.5)
            compute = honest(load_embedder(MODEL), threading.Lock())
            for c in pair:  # honest through probation (3 results checked by the server)
                for _ in range(3):
                    for task in c.lease(1)["tasks"]:
                        vectors, ms = compute(task)
                        statuses["honest " + c.send(task, vectors, ms)] += 1
        forge_all(pair, statuses)
        return Row(f"forgery, {kind}", forged_docs(site), statuses)


def queue(docs: list[dict[str, Any]], args: argparse.Namespace) -> tuple[int, int]:
    """Tasks the one-network pair holds, and tasks an honest browser then gets."""
    with open_site(docs, args) as site:
        pair = [Client(site, "203.0.113.10"), Client(site, "203.0.113.200")]
        held = {t["taskId"] for _ in range(4) for c in pair for t in c.lease(8)["tasks"]}
        time.sleep(args.window + 0.5)  # a later visitor
        got = Client(site, "198.18.0.1").lease(8)["tasks"]
        return len(held), len(got)


def budget(docs: list[dict[str, Any]], args: argparse.Namespace) -> tuple[int, float]:
    """Tasks a LOW client reporting no CPU got, and the CPU-seconds it was charged."""
    with open_site(docs, args) as site:
        liar = Client(site, "203.0.113.10", tier="LOW")
        compute = honest(load_embedder(MODEL), threading.Lock())
        tasks = 0
        for _ in range(args.budget_tasks):
            body = liar.lease(1, cpuSecondsLastHour=0)
            for task in body["tasks"]:
                vectors, _ = compute(task)
                liar.send(task, vectors, 0.0)
                tasks += 1
        liar.lease(1, cpuSecondsLastHour=0)
        return tasks, liar.used


@dataclass
class Run:
    """One honest run: wall-clock from the first lease and from the last client's
    start, the server's CPU seconds, documents stored, results by status."""

    wall: float
    joined: float
    server_cpu: float
    done: int
    statuses: Counter[str]


def honest_run(docs: list[dict[str, Any]], args: argparse.Namespace, model: Embedder) -> Run:
    with open_site(docs, args) as site:
        warm = httpx.post(
            f"{site.base}/v1/search",
            json={"query": "warm up", "rankProfile": "semantic"},
            headers={"Authorization": f"Bearer {site.bot_key}"},
            timeout=120,
        )
        warm.raise_for_status()
        compute = honest(model, threading.Lock())
        stop = threading.Event()
        statuses: Counter[str] = Counter()
        lock = threading.Lock()
        errors: list[BaseException] = []

        def work(c: Client) -> None:
            try:
                while not stop.is_set():
                    tasks = c.lease(4)["tasks"]
                    if not tasks:
                        stop.wait(0.2)
                        continue
                    for task in tasks:
                        vectors, ms = compute(task)
                        status = c.send(task, vectors, ms)
                        with lock:
                            statuses[status] += 1
            except BaseException as exc:  # reported after the run
                errors.append(exc)

        cpu_before = site.server.cpu_seconds() or 0.0
        started = time.perf_counter()
        threads = []
        for i in range(args.clients):
            if i:
                time.sleep(args.window + 0.5)
            thread = threading.Thread(target=work, args=(Client(site, f"198.51.{i + 1}.7"),))
            thread.start()
            threads.append(thread)
        joined = time.perf_counter()
        deadline = time.monotonic() + args.timeout
        done = 0
        while time.monotonic() < deadline and not errors:
            done = site.stored()
            if done >= site.count:
                break
            time.sleep(0.05)
        ended = time.perf_counter()
        cpu = (site.server.cpu_seconds() or 0.0) - cpu_before
        stop.set()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        return Run(ended - started, ended - joined, cpu, done, statuses)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=64, help="contributions_batch")
    parser.add_argument("--clients", type=int, default=2, help="honest browsers (2 or more)")
    parser.add_argument("--runs", type=int, default=5, help="honest runs (the median)")
    parser.add_argument("--window", type=float, default=2.0, help="key window, seconds")
    parser.add_argument("--budget-tasks", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument(
        "--corpus", type=Path, default=None, help="a BEIR corpus.jsonl (default: Cranfield's)"
    )
    parser.add_argument(
        "--only", choices=("attacks", "honest"), default=None, help="run one half only"
    )
    args = parser.parse_args()
    args.window = max(1, round(args.window))  # the setting is whole seconds
    load_before = os.getloadavg()[0]
    docs, source = documents(args.docs, args.corpus)
    print(
        f"Idle compute under attack: {len(docs)} {source} documents in tasks of "
        f"{args.batch}; amelio serve in its own process; key window {args.window} s"
    )
    forged_total = 0
    if args.only != "honest":
        rows = [forgery(docs, args, kind) for kind in ("one network", "one key at once")]
        patient = forgery(docs, args, "patient")
        held, got = queue(docs, args)
        tasks, charged = budget(docs, args)
        print()
        print(f"{'scenario':34} {'forged docs accepted':>21}  results")
        print("-" * 100)
        for row in [*rows, patient]:
            results = ", ".join(f"{k} {v}" for k, v in sorted(row.statuses.items()))
            print(f"{row.scenario:34} {row.forged:>21}  {results}")
        print()
        print(f"queue: the one-network pair holds {held} tasks; an honest browser then got {got}")
        print(
            f"budget: a LOW client reporting computeMs 0 got {tasks} tasks and was charged "
            f"{charged:.3f} CPU-s"
        )
        forged_total = sum(row.forged for row in rows)
    if args.only != "attacks":
        model = load_embedder(MODEL)
        model.embed(["warm up"])
        runs = []
        cpu_before = time.process_time()
        for _ in range(args.runs):
            runs.append(honest_run(docs, args, model))
        bench_cpu = time.process_time() - cpu_before
        print()
        print(
            f"honest: {args.clients} browsers of distinct networks, minted "
            f"{args.window + 0.5:.1f} s apart, {args.runs} runs"
        )
        print(
            f"{'run':>6} {'stored':>7} {'wall s':>7} {'docs/s':>7} {'all joined s':>13} "
            f"{'docs/s':>7} {'server CPU-s/1k':>16}  results"
        )
        print("-" * 100)
        for i, r in enumerate(runs):
            results = ", ".join(f"{k} {v}" for k, v in sorted(r.statuses.items()))
            print(
                f"{i + 1:>6} {r.done:>7} {r.wall:>7.2f} {r.done / r.wall:>7.1f} "
                f"{r.joined:>13.2f} {r.done / r.joined:>7.1f} "
                f"{r.server_cpu * 1000 / max(r.done, 1):>16.3f}  {results}"
            )
        rate = statistics.median(r.done / r.wall for r in runs)
        joined = statistics.median(r.done / r.joined for r in runs)
        cpu_k = statistics.median(r.server_cpu * 1000 / max(r.done, 1) for r in runs)
        print(f"{'median':>6} {'':>7} {'':>7} {rate:>7.1f} {'':>13} {joined:>7.1f} {cpu_k:>16.3f}")
        print(f"this process (the clients' embedding): {bench_cpu:.1f} CPU-s in all")
        target("honest documents stored", min(r.done for r in runs), len(docs), "docs")
    print()
    print(load_line(load_before))
    if args.only != "honest":
        target(
            "forged documents accepted (one key)", forged_total, 0, "docs", higher_is_better=False
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
