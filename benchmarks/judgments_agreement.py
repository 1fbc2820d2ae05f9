"""Do judgments from clicks, from an LLM and from Cranfield's assessors agree?

Three judgment lists over one corpus, compared pairwise on the pairs both graded
(:func:`amelio.search.judgments.compare`: quadratic-weighted Cohen's κ, Spearman's ρ):

* **clicks** — ``amelio simulate``'s own code (:func:`amelio.search.simulate.simulate`,
  PBM clicks, the learning arm only) runs in ``--workdir``; its learning arm's
  workspace keeps the signals, and the clicks list is built from them
  (``amelio judgments build NAME --from clicks``).
* **llm** — the configured LLM (``--provider``, ``--model``; ``--model-path`` a GGUF
  file for the in-process ``local`` provider) grades each of the first
  ``--queries`` queries' top ``--depth`` documents by BM25 with the list's rubric.
* **qrels** — Cranfield's own judgments, imported (grades 1–4, a 4 clipped to 3).

The simulated users click according to the qrels themselves, so clicks–qrels says
how much of the truth the click model and the grading rule recover from clicks,
not whether clicks would agree with assessors in the wild; clicks–llm and
llm–qrels are the independent comparisons. The pairs differ too: a clicks list
grades what people were shown and examined enough, the LLM list the BM25 pool, and
the qrels what the assessors judged.

Never run in CI (minutes of simulation, and a real model). A second run with the
same ``--workdir`` reuses its simulation.

    python benchmarks/judgments_agreement.py [--dataset DIR] [--workdir DIR]
        [--sessions-per-query 100] [--queries 20] [--depth 5]
        [--provider local --model-path FILE.gguf] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from amelio.errors import InvalidInput
from amelio.llm import get_provider, settings_for_model
from amelio.search import Searcher
from amelio.search import judgment_lists as store
from amelio.search import judgments as jl
from amelio.search.engines.registry import open_engine
from amelio.search.relevance import load_dataset
from amelio.search.simulate import ARMS, simulate
from amelio.workspace.config import Settings
from amelio.workspace.folder import Workspace, open_workspace

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "cranfield"
ARM = "hybrid_with_feedback"


def learning_workspace(workdir: Path, settings: Settings) -> Workspace:
    """The learning arm's scratch workspace, as the simulation left it."""
    path = workdir / ARM
    return open_workspace(
        path,
        settings=settings.model_copy(
            update={
                "workspace": path,
                "database_url": f"sqlite:///{(path / '.amelio' / 'amelio.db').resolve()}",
            }
        ),
    )


def llm_settings(args: argparse.Namespace) -> Settings:
    base = Settings()  # AMELIO_LLM_* from the environment, unless the flags say otherwise
    if args.model_path:
        return settings_for_model(base, args.model_path, provider=args.provider or "local")
    if args.provider or args.model:
        update: dict[str, Any] = {}
        if args.provider:
            update["llm_provider"] = args.provider
        if args.model:
            update["llm_model"] = args.model
        return base.model_copy(update=update)
    return base


def summary(item: store.JudgmentList) -> str:
    grades = " ".join(f"{g}:{item.histogram.get(g, 0)}" for g in store.GRADES)
    return f"{item.pairs} pairs over {item.queries} queries, {item.graded} graded ({grades})"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--workdir", type=Path, default=None, help="kept between runs")
    parser.add_argument("--sessions-per-query", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--queries", type=int, default=20, help="queries the LLM grades")
    parser.add_argument("--depth", type=int, default=5, help="documents per query it grades")
    parser.add_argument("--provider", default=None, help="LLM provider (default: settings)")
    parser.add_argument("--model", default=None, help="the provider's model name")
    parser.add_argument("--model-path", default=None, help="a GGUF file (provider local)")
    parser.add_argument("--out", type=Path, default=None, help="write the record as JSON")
    args = parser.parse_args()

    scratch = None
    if args.workdir is None:
        scratch = tempfile.TemporaryDirectory(prefix="amelio-judgments-")
        args.workdir = Path(scratch.name)
    workdir: Path = args.workdir
    data = load_dataset(args.dataset)
    started = time.perf_counter()
    if not (workdir / ARM / ".amelio" / "amelio.db").exists():
        print(f"Simulating {args.sessions_per_query} sessions per query in {workdir}…", flush=True)
        simulate(
            args.dataset,
            sessions_per_query=args.sessions_per_query,
            seed=args.seed,
            workdir=workdir,
            arms=[a for a in ARMS if a.name == ARM],
            progress=lambda line: print(f"  {line}", flush=True),
        )
    simulated = time.perf_counter() - started
    settings = llm_settings(args)
    ws = learning_workspace(workdir, settings)
    corpus = open_engine(Settings().model_copy(update={"workspace": workdir}))
    searcher = Searcher(ws, engine=corpus, background_aggregation=False)
    record: dict[str, Any] = {"dataset": args.dataset.name, "simulationSeconds": round(simulated)}
    try:
        for name in ("clicks", "llm", "qrels"):
            if any(item.name == name for item in store.list_lists(ws)):
                store.delete_list(ws, name)
        clicks = jl.build(ws, "clicks", "clicks", created_by="benchmark")
        print(f"clicks: {summary(clicks.list)}; {clicks.too_little} pairs with too little evidence")

        texts = [data.queries[q] for q in sorted(data.queries, key=_numeric)][: args.queries]
        provider = get_provider(settings, purpose="The judgments benchmark")
        started = time.perf_counter()
        llm = jl.build(
            ws,
            "llm",
            "llm",
            queries=texts,
            depth=args.depth,
            provider=provider,
            searcher=searcher,
            created_by="benchmark",
        )
        seconds = time.perf_counter() - started
        print(
            f"llm ({provider.name} {provider.model}): {summary(llm.list)}; "
            f"{llm.unparsed} unparsed, {llm.failed} failed, {seconds:.0f} s"
        )
        qrels = jl.import_qrels(
            ws,
            "qrels",
            args.dataset / "qrels" / "test.tsv",
            args.dataset / "queries.jsonl",
            created_by="benchmark",
            searcher=searcher,
        )
        print(f"qrels: {summary(qrels.list)}")
        record["lists"] = {r.list.name: r.to_dict() for r in (clicks, llm, qrels)}
        record["llmSeconds"] = round(seconds)

        print()
        print("| lists | shared graded pairs | weighted κ | Spearman ρ | same grade |")
        print("|---|---|---|---|---|")
        record["agreement"] = []
        for a, b in (("clicks", "llm"), ("clicks", "qrels"), ("llm", "qrels")):
            try:
                found = jl.compare(ws, a, b)
            except InvalidInput as exc:
                print(f"| {a}–{b} | – | – | – | {exc.message} |")
                continue
            record["agreement"].append(found.to_dict())
            print(
                f"| {a}–{b} | {found.pairs} | {_fmt(found.kappa)} | {_fmt(found.rho)} "
                f"| {found.exact / found.pairs:.0%} |"
            )
    finally:
        ws.dispose()
        if scratch is not None:
            scratch.cleanup()
    if args.out is not None:
        args.out.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def _numeric(query_id: str) -> tuple[int, str]:
    return (int(query_id), "") if query_id.isdigit() else (1 << 62, query_id)


def _fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"


if __name__ == "__main__":
    main()
