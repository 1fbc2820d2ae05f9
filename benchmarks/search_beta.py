"""Tune ``search_beta`` (the feedback score's weight against the first phase) with
the click simulation, on several data sets and seeds, and say whether one value
beats another by more than the seed-to-seed noise.

Each run is ``amelio simulate``'s own code (:func:`amelio.search.simulate.simulate`,
PBM clicks, ``--sessions-per-query`` sessions per query, 10 rounds, 20
evaluation sessions) with one learning arm trained (``--arm``, by default
``hybrid_with_feedback``; ``naive_ctr`` checks that the product stays ahead of
smoothed click counting at the same ``beta``): training both would double the
cost of a sweep. The
table gives, per data set and ``beta``, the final NDCG@10 of each seed, their
mean and their spread (largest minus smallest); a difference between two values
of ``beta`` counts when it is larger than both spreads. ``--out`` keeps one JSON
line per run (the settings and the simulation's record).

The data sets are BEIR-layout folders: ``../shared/data/cranfield`` (the default)
and the synthetic one ``benchmarks/relevance_data.py`` writes. A run at 100
sessions per query takes about 1.5 minutes of CPU on Cranfield (225 queries).

    python benchmarks/search_beta.py --dataset DIR [DIR ...] --beta 0.5 1 2 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from amelio.search.simulate import ARMS, simulate

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "cranfield"


def one_run(
    dataset: Path, beta: float, seed: int, sessions: int, engine: str | None, arm: str
) -> dict[str, Any]:
    """One simulation's settings and final figures."""
    started = time.process_time()
    result = simulate(
        dataset,
        sessions_per_query=sessions,
        seed=seed,
        beta=beta,
        engine=engine,
        arms=[a for a in ARMS if a.name == arm],
    )
    return {
        "dataset": dataset.name,
        "arm": arm,
        "beta": beta,
        "seed": seed,
        "sessionsPerQuery": sessions,
        "engine": result.settings.get("engine"),
        "bm25": result.final("bm25", "ndcg10"),
        "ndcg10": result.final(arm, "ndcg10"),
        "gapClosed": result.gap_closed(arm),
        "ctr3": result.final(arm, "ctr3"),
        "cpuSeconds": round(time.process_time() - started, 1),
        "record": result.to_dict(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dataset", type=Path, nargs="+", default=[DEFAULT_DATA])
    parser.add_argument("--beta", type=float, nargs="+", default=[1.0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--sessions-per-query", type=int, default=100)
    parser.add_argument("--engine", default=None, help="embedded, tantivy or fts5")
    parser.add_argument(
        "--arm",
        choices=[a.name for a in ARMS],
        default="hybrid_with_feedback",
        help="the learning arm to train (the naive one to check the product stays ahead)",
    )
    parser.add_argument("--out", type=Path, default=None, help="a JSON-lines file of runs")
    args = parser.parse_args()
    runs: list[dict[str, Any]] = []
    for dataset in args.dataset:
        for beta in args.beta:
            for seed in args.seeds:
                run = one_run(dataset, beta, seed, args.sessions_per_query, args.engine, args.arm)
                runs.append(run)
                print(
                    f"{run['dataset']} {args.arm} beta {beta:g} seed {seed}: "
                    f"NDCG@10 {run['ndcg10']:.4f} "
                    f"(bm25 {run['bm25']:.4f}, gap {run['gapClosed']:.0%}; "
                    f"{run['cpuSeconds']:.0f} s CPU)",
                    flush=True,
                )
                if args.out is not None:
                    with args.out.open("a", encoding="utf-8") as f:
                        f.write(json.dumps(run) + "\n")
    print()
    print("| data set | beta | NDCG@10 per seed | mean | spread |")
    print("|---|---|---|---|---|")
    for dataset in args.dataset:
        for beta in args.beta:
            values = [
                r["ndcg10"] for r in runs if r["dataset"] == dataset.name and r["beta"] == beta
            ]
            print(
                f"| {dataset.name} | {beta:g} | {' '.join(f'{v:.3f}' for v in values)} "
                f"| {statistics.mean(values):.4f} | {max(values) - min(values):.4f} |"
            )


if __name__ == "__main__":
    main()
