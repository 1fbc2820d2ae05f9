"""Idle compute lent by browsers: how fast real browsers embed the search index with
amelio.js, and how much of the server's own CPU that saves.

Set-up: a workspace with ``--docs`` documents (Cranfield abstracts from
``../shared/data/cranfield``; without it, the demo's help-desk articles) imported
*without* vectors; ``amelio serve`` in its own process with ``contributions`` on and
CORS for the page's origin; a page on another origin that imports ``amelio.js`` from
the server, as a real integration does (the embedding worker then starts from a
same-origin module that imports the server's); Debian's Chromium driven by Playwright
with ``--clients`` browser contexts. Each context is a browser of its own (its own
localStorage, so its own client token) on a network of its own (its leases carry an
``X-Forwarded-For``, which uvicorn trusts from loopback, as from a reverse proxy),
with the person's compute consent, intensity "max" and idleness forced
(``idleAfterMs: 0``, no input ever), running the real worker
(``amelio/embed-worker.js``) in its real scheduling. They are independent visitors:
the key window (``contributions_related_seconds``, for identities one key mints
within minutes of each other) is off, since the contexts start together; new
identities' probation is on, so the server checks each browser's first results
itself (``benchmarks/compute_attack.py`` measures the defences).

* **browsers**: wall-clock from opening the pages (each then loads the model: its
  files are served by the server, cold cache) until every document has an accepted
  vector in the search store (read from its SQLite file). Per client: the tasks and
  documents it computed (a task is computed by two clients, since two agreeing
  results accept it, unless a new browser's result was checked by the server and
  accepted at once: about 2N/M documents each), documents per second of wall-clock
  until its last result, and per CPU-second it counted (what amelio.js charges
  against its hourly budget: the worker's model load, then the wall time of each
  task).
* **server, serving contributions**: ``amelio serve``'s user + system CPU seconds
  (``/proc``) over that span, less its idle CPU rate measured for 3 s before (the
  background aggregation): leases, results, verification (the spot-checks it embeds
  for: each new browser's first results, every disagreement,
  ``contributions_spot_check`` of agreements), writing the
  accepted vectors, and serving the model files once per browser.
* **server, embedding itself**: what the server does without browsers, in this
  process on a copy of the same workspace made before the run:
  ``DocumentStore.embed_missing`` (``amelio corpus embed``, and what an import or a
  semantic search does with ``contributions`` off) embeds every document without a
  vector with ``load_embedder("wordllama")`` (loaded and warmed first, not timed)
  and stores it; ``time.process_time``, the median of 3 runs on fresh copies. The
  bare ``embed()`` of the same texts is printed beside it.
* **saved per 1,000 documents**: the second less the first. Negative means serving
  the contributions costs the server more CPU than embedding the documents itself.

The vectors stored are checked against the server's own: the smallest cosine is a
target (≥ 0.9999, the protocol's tolerance).

Each result carries its vectors as one base64 string of the n×256 float32 matrix
(MartyContributionV1's ``result.vectors``); ``--batch`` sets ``contributions_batch``
(default: the server's), ``--per-lease`` amelio.js's ``tasksPerLease`` (default: its
own, which asks for up to 4 tasks a lease once a task has run; the server gives
⌊8 × trust⌋ at most).

    python benchmarks/client_compute.py [--docs 1000] [--clients 2] [--batch N]
        [--per-lease N] [--timeout 300]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from benchlib import load_line, median_of, target
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from amelio.embeddings import load_embedder
from amelio.search.engines.registry import workspace_corpus
from amelio.search.store import DocumentStore
from amelio.testing import ThreadedServer
from amelio.workspace import keys
from amelio.workspace.config import Settings, load_settings
from support.contributions import workspace_without_vectors
from support.processes import ServeProcess

HERE = Path(__file__).resolve().parent
CRANFIELD = HERE.parents[1] / "shared" / "data" / "cranfield" / "corpus.jsonl"
DEMO = HERE.parent / "examples" / "demo" / "corpus.jsonl"
MODEL = "wordllama"
IDLE_SAMPLE_S = 3.0

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Idle compute benchmark</title></head>
<body><script type="module">
import { Amelio } from "%(amelio)s/static/amelio.js";
const amelio = window.amelio = Amelio.init({
  endpoint: "%(amelio)s", key: "%(key)s",
  compute: { idleAfterMs: 0%(per_lease)s },
  onError: (e) => (window.errors = window.errors || []).push(e.message),
});
const compute = await amelio.loadCompute();
window.computed = 0;
window.lastAt = null;
compute.addEventListener("status", (e) => {
  if (e.detail.tasks.computed !== window.computed) {
    window.computed = e.detail.tasks.computed;
    window.lastAt = Date.now();
  }
});
compute.setPreferences({
  consent: { embed_documents: { search_index: "granted" } }, intensity: "max" });
compute.start();
document.body.dataset.ready = "1";
</script></body></html>"""


def documents(count: int) -> tuple[list[dict[str, Any]], str]:
    source = CRANFIELD if CRANFIELD.is_file() else DEMO
    docs = []
    with source.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                doc = json.loads(line)
                docs.append(
                    {
                        "_id": doc["_id"],
                        "title": doc.get("title") or "",
                        "text": doc.get("text") or "",
                    }
                )
            if len(docs) == count:
                break
    return docs, source.parent.name


def server_cpu(server: ServeProcess) -> float:
    cpu = server.cpu_seconds()
    if cpu is None:
        raise SystemExit("This benchmark reads the server's CPU from /proc (Linux only).")
    return cpu


def stored(store_path: Path) -> dict[str, np.ndarray]:
    with sqlite3.connect(store_path) as conn:
        rows = conn.execute(
            "SELECT d.doc_id, v.vec FROM vectors v JOIN docs d "
            "ON d.rowid = v.rowid WHERE v.model = ?",
            (MODEL,),
        ).fetchall()
    return {doc_id: np.frombuffer(vec, dtype=np.float32) for doc_id, vec in rows}


def corpus_of(root: Path) -> DocumentStore:
    """The search store of the workspace at ``root``, as the server without browsers
    opens it (``contributions`` off: a semantic search embeds what is missing)."""
    return workspace_corpus(load_settings(root, contributions=False))


def own_embedding(copy_of: Path, runs: int = 3) -> tuple[float, float, int]:
    """The server's own CPU seconds to embed and store every document of a copy of the
    workspace (median of ``runs`` fresh copies), the bare embed() of the same texts,
    and how many documents."""
    embedder = load_embedder(MODEL)
    embedder.embed(["warm up"])
    path_cpu, bare_cpu, count = [], [], 0
    for run in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "ws"
            shutil.copytree(copy_of, root)
            store = corpus_of(root)
            texts = [text for _, text in store.missing_vectors(MODEL)]
            count = len(texts)
            started = time.process_time()
            store.embed_missing(embedder)  # what `amelio corpus embed` does
            path_cpu.append(time.process_time() - started)
            assert not store.missing_vectors(MODEL)
            if run == 0:
                for _ in range(runs):
                    started = time.process_time()
                    for i in range(0, len(texts), 256):
                        embedder.embed(texts[i : i + 256])
                    bare_cpu.append(time.process_time() - started)
    return median_of(path_cpu), median_of(bare_cpu), count


@contextmanager
def page_site(cfg: dict[str, str]) -> Iterator[str]:
    async def page(_: Request) -> HTMLResponse:
        return HTMLResponse(PAGE % cfg)

    with ThreadedServer(Starlette(routes=[Route("/", page)])) as server:
        yield server.url


def from_network(n: int) -> Any:
    """A route handler that has a context's leases come from a network of its own."""

    def handle(route: Any) -> None:  # one parameter: Playwright passes only the route
        route.continue_(headers=route.request.headers | {"x-forwarded-for": f"198.51.{n}.7"})

    return handle


def chromium_path() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        raise SystemExit("Needs Debian's Chromium (apt-get install chromium).")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument(
        "--clients",
        type=int,
        default=2,
        help="browser contexts: distinct contributing clients (at least 2)",
    )
    parser.add_argument(
        "--batch",
        type=int,
        default=None,
        help="documents per task: the server's contributions_batch (1-256; "
        "default: the server's default)",
    )
    parser.add_argument(
        "--per-lease",
        type=int,
        default=None,
        help="amelio.js's tasksPerLease (1-8; default: amelio.js's default)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        help="seconds to wait for every document to be embedded",
    )
    args = parser.parse_args()
    if args.batch is None:
        args.batch = Settings.model_fields["contributions_batch"].default
    if args.clients < 2:
        parser.error("--clients: a task is accepted when two clients agree; at least 2")
    from playwright.sync_api import sync_playwright

    load_before = os.getloadavg()[0]
    docs, source = documents(args.docs)
    with tempfile.TemporaryDirectory() as tmp:
        ws, store = workspace_without_vectors(Path(tmp), docs)
        root = ws.root
        store_path = store.path
        _, client_key = keys.create_key(ws.engine, name="bench page", role="client")
        ws.dispose()
        pristine = Path(tmp) / "pristine"
        # For the server's own embedding, after the run. Copied before this process
        # reads the live store: closing a file drops every POSIX lock the process holds
        # on it, SQLite's too, so a copy made while a connection of ours was open let
        # the server reset the WAL under it, and every later connection of ours to the
        # live store saw no vectors at all (0 of 1,000 "embedded" while all were).
        shutil.copytree(root, pristine)
        # Exactly what the server would embed, read from the copy.
        texts = dict(corpus_of(pristine).missing_vectors(MODEL))

        cfg = {
            "amelio": "",
            "key": client_key,
            "per_lease": "" if args.per_lease is None else f", tasksPerLease: {args.per_lease}",
        }
        with page_site(cfg) as page_base:
            env = {
                **os.environ,
                "AMELIO_CONTRIBUTIONS": "1",
                "AMELIO_CORS_ORIGINS": page_base,
                "AMELIO_WARM_UP": "0",
                "AMELIO_CONTRIBUTIONS_BATCH": str(args.batch),
                "AMELIO_CONTRIBUTIONS_RELATED_SECONDS": "0",
            }
            env.pop("AMELIO_DATABASE_URL", None)
            with ServeProcess(root, env=env) as server:
                cfg["amelio"] = server.base
                assert httpx.get(f"{server.base}/v1/health").status_code == 200
                idle_before = server_cpu(server)
                time.sleep(IDLE_SAMPLE_S)
                idle_rate = (server_cpu(server) - idle_before) / IDLE_SAMPLE_S
                result = run_browsers(
                    sync_playwright, server, page_base, store_path, len(docs), args
                )
        own_cpu, bare_cpu, own_count = own_embedding(pristine)
    report(args, source, texts, idle_rate, result, own_cpu, bare_cpu, own_count, load_before)
    return 0


def run_browsers(
    sync_playwright: Any,
    server: ServeProcess,
    page_base: str,
    store_path: Path,
    count: int,
    args: argparse.Namespace,
) -> dict[str, Any]:
    sent: dict[int, int] = {}
    lock = threading.Lock()
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=chromium_path(),
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        contexts, pages = [], []
        cpu_before = server_cpu(server)
        started = time.perf_counter()
        started_ms = time.time() * 1000
        for i in range(args.clients):
            ctx = browser.new_context()
            ctx.set_default_timeout(30_000)

            def count_docs(request: Any, i: int = i) -> None:
                if request.method == "POST" and request.url.endswith("/v1/contributions"):
                    body = json.loads(request.post_data or "{}")
                    with lock:
                        sent[i] = sent.get(i, 0) + vector_count(body["result"])

            ctx.on("request", count_docs)
            ctx.route(lambda url: "/v1/contributions/tasks" in url, from_network(i + 1))
            page = ctx.new_page()
            page.goto(page_base)
            contexts.append(ctx)
            pages.append(page)
        deadline = time.monotonic() + args.timeout
        done = 0
        samples: list[tuple[int, float]] = []  # (documents stored, server CPU seconds)
        while time.monotonic() < deadline:
            done = len(stored(store_path))
            samples.append((done, server_cpu(server) - cpu_before))
            if done >= count:
                break
            pages[0].wait_for_timeout(100)  # Playwright delivers the request events here
        wall = time.perf_counter() - started
        cpu = server_cpu(server) - cpu_before
        clients = []
        for i, page in enumerate(pages):
            status = page.evaluate("amelio.compute.status()")
            last_at = page.evaluate("window.lastAt")
            clients.append(
                {
                    "status": status,
                    "docs": sent.get(i, 0),
                    "until_last_s": ((last_at - started_ms) / 1000) if last_at else None,
                    "errors": page.evaluate("window.errors || []"),
                }
            )
        for ctx in contexts:
            ctx.close()
        browser.close()
    vectors = stored(store_path)
    # Steady state: from a quarter of the documents stored (every browser has loaded
    # the model by then, and the server its spot-check embedder) to the end.
    quarter = next(((d, c) for d, c in samples if d >= count / 4), None)
    steady = None
    if quarter is not None and done > quarter[0]:
        steady = (cpu - quarter[1]) / (done - quarter[0])
    return {
        "wall": wall,
        "server_cpu": cpu,
        "done": done,
        "clients": clients,
        "vectors": vectors,
        "steady_per_doc": steady,
    }


def report(
    args: argparse.Namespace,
    source: str,
    texts: dict[str, str],
    idle_rate: float,
    r: dict[str, Any],
    own_cpu: float,
    bare_cpu: float,
    own_count: int,
    load_before: float,
) -> None:
    count = len(texts)
    per_k = 1000 / count
    net = max(0.0, r["server_cpu"] - idle_rate * r["wall"])
    per_lease = "amelio.js's default" if args.per_lease is None else args.per_lease
    print(
        f"Idle compute: {count} {source} documents in tasks of {args.batch}, "
        f"tasksPerLease {per_lease}, "
        f"{args.clients} Chromium contexts (distinct clients), intensity max, idle forced; "
        "amelio serve in its own process"
    )
    print(
        f"Every document stored with an accepted vector: {r['done']}/{count} in "
        f"{r['wall']:.1f} s wall-clock (model load included)"
    )
    print()
    print(
        f"{'client':>6} {'tier':>8} {'tasks':>6} {'docs':>6} {'docs/s wall':>12} "
        f"{'CPU-s counted':>14} {'docs/CPU-s':>11} {'accepted':>9} {'pending':>8} "
        f"{'rejected':>9}"
    )
    print("-" * 100)
    for i, c in enumerate(r["clients"]):
        s = c["status"]
        rate = c["docs"] / c["until_last_s"] if c["until_last_s"] else 0.0
        used = s["usedLastHour"]
        print(
            f"{i + 1:>6} {s['tier'] or '?':>8} {s['tasks']['computed']:>6} {c['docs']:>6} "
            f"{rate:>12.1f} {used:>14.2f} {c['docs'] / used if used else 0:>11.0f} "
            f"{s['tasks']['accepted']:>9} {s['tasks']['pending']:>8} "
            f"{s['tasks']['rejected']:>9}"
        )
        if c["errors"]:
            print(f"       errors: {c['errors'][:3]}")
    print()
    print(f"{'server CPU per 1,000 documents':44} {'CPU-s':>8}")
    print("-" * 53)
    print(f"{'serving contributions (gross, /proc)':44} {r['server_cpu'] * per_k:>8.3f}")
    print(f"{'  idle rate x wall-clock (background)':44} {idle_rate * r['wall'] * per_k:>8.3f}")
    print(f"{'  net':44} {net * per_k:>8.3f}")
    if r["steady_per_doc"] is not None:
        print(f"{'  steady state (from 25 % stored; gross)':44} {r['steady_per_doc'] * 1000:>8.3f}")
    own_k = own_cpu * 1000 / own_count if own_count else float("nan")
    bare_k = bare_cpu * 1000 / own_count if own_count else float("nan")
    print(f"{'embedding itself (embed_missing: + store)':44} {own_k:>8.3f}")
    print(f"{'  of which bare embed()':44} {bare_k:>8.3f}")
    print(f"{'saved (embedding itself - net serving)':44} {own_k - net * per_k:>8.3f}")
    if r["steady_per_doc"] is not None:
        print(f"{'saved in steady state':44} {own_k - r['steady_per_doc'] * 1000:>8.3f}")
    print()
    print(load_line(load_before))
    if r["done"] < count:
        print(f"Only {r['done']} of {count} documents were embedded within {args.timeout} s.")
    cos = min_cosine(r["vectors"], texts)
    target(
        "stored browser vectors vs the server's own, largest 1 - cosine",
        1 - cos,
        1e-4,
        "",
        higher_is_better=False,
    )
    target("documents embedded by browsers", r["done"], count, "docs")


def vector_count(result: dict[str, Any]) -> int:
    """How many vectors a result's base64 ``vectors`` holds (n of the n×d float32s)."""
    text = result["vectors"]
    return (len(text) * 3 // 4 - text[-2:].count("=")) // (4 * result["dimensions"])


def min_cosine(vectors: dict[str, np.ndarray], texts: dict[str, str]) -> float:
    """The smallest cosine between a stored vector and the server's own embedding of
    the same document's text (0 when none was stored)."""
    if not vectors:
        return 0.0
    ids = sorted(vectors)
    truth = load_embedder(MODEL).embed([texts[d] for d in ids])
    worst = 1.0
    for d, t in zip(ids, truth, strict=True):
        v, w = vectors[d], np.asarray(t, dtype=np.float32)
        worst = min(worst, float(v @ w / (np.linalg.norm(v) * np.linalg.norm(w))))
    return worst


if __name__ == "__main__":
    sys.exit(main())
