"""What ``search_min_actors`` costs the learning: the click simulation trains the
product's ``hybrid_with_feedback`` arm (interactions count once 3 people are
behind them) beside the same arm with ``search_min_actors = 1``, in one run per
data set and seed (same sessions, same evaluation users), and prints how much of
the bm25 → ideal gap each closed, in CTR@3 and NDCG@10, as the sessions grow.

Each run is ``amelio simulate``'s own code (:func:`amelio.search.simulate.simulate`,
PBM clicks, 20 evaluation sessions) with the two arms of
:data:`~amelio.search.simulate.ONE_ACTOR_ARM` and the product's. The guard must
cost at most 3 points of the CTR@3 gap at 25 sessions per query; the table says
so per data set, as the mean over the seeds, beside the seed-to-seed spread.

The data sets are BEIR-layout folders: ``../shared/data/cranfield`` (the default)
and the synthetic one ``benchmarks/relevance_data.py`` writes::

    python benchmarks/relevance_data.py
    python benchmarks/search_min_actors.py --dataset ../shared/data/cranfield \\
        ~/.cache/amelio-bench/relevance/synthetic-graded --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from amelio.search.simulate import ARMS, ONE_ACTOR_ARM, simulate

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "cranfield"
PRODUCT = ARMS[0]
#: The most the guard may cost, in points of the CTR@3 gap closed.
BUDGET_POINTS = 3.0


def one_run(dataset: Path, seed: int, sessions: int, rounds: int) -> dict[str, Any]:
    """Both arms' learning curves in one simulation."""
    started = time.process_time()
    result = simulate(
        dataset,
        sessions_per_query=sessions,
        rounds=rounds,
        seed=seed,
        arms=[PRODUCT, ONE_ACTOR_ARM],
    )
    return {
        "dataset": dataset.name,
        "seed": seed,
        "sessionsPerQuery": sessions,
        "curves": {
            arm.name: {metric: result.curve(arm.name, metric) for metric in ("ctr3", "ndcg10")}
            for arm in (PRODUCT, ONE_ACTOR_ARM)
        },
        "cpuSeconds": round(time.process_time() - started, 1),
        "record": result.to_dict(),
    }


def _points(runs: list[dict[str, Any]], arm: str, metric: str) -> dict[int, list[float]]:
    by_sessions: dict[int, list[float]] = {}
    for run in runs:
        for sessions, share in run["curves"][arm][metric]:
            by_sessions.setdefault(sessions, []).append(100 * share)
    return by_sessions


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dataset", type=Path, nargs="+", default=[DEFAULT_DATA])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--sessions-per-query", type=int, default=25)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None, help="a JSON-lines file of runs")
    args = parser.parse_args()
    runs: list[dict[str, Any]] = []
    for dataset in args.dataset:
        for seed in args.seeds:
            run = one_run(dataset, seed, args.sessions_per_query, args.rounds)
            runs.append(run)
            final = {a: run["curves"][a]["ctr3"][-1][1] for a in run["curves"]}
            print(
                f"{run['dataset']} seed {seed}: CTR@3 gap closed "
                + ", ".join(f"{a} {v:.1%}" for a, v in final.items())
                + f" ({run['cpuSeconds']:.0f} s CPU)",
                flush=True,
            )
            if args.out is not None:
                with args.out.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(run) + "\n")
    print()
    print(
        "Share of the bm25 → ideal gap closed (points; mean over seeds "
        f"{' '.join(map(str, args.seeds))}, spread in brackets), PBM clicks:"
    )
    print()
    print("| data set | metric | sessions/query | min_actors 1 | min_actors 3 (default) | cost |")
    print("|---|---|---|---|---|---|")
    verdicts = []
    for dataset in args.dataset:
        mine = [r for r in runs if r["dataset"] == dataset.name]
        for metric, label in (("ctr3", "CTR@3"), ("ndcg10", "NDCG@10")):
            one = _points(mine, ONE_ACTOR_ARM.name, metric)
            guarded = _points(mine, PRODUCT.name, metric)
            for sessions in sorted(one):
                if sessions == 0:
                    continue
                a, b = one[sessions], guarded[sessions]
                cost = statistics.mean(a) - statistics.mean(b)
                print(
                    f"| {dataset.name} | {label} | {sessions} "
                    f"| {statistics.mean(a):.1f} [{max(a) - min(a):.1f}] "
                    f"| {statistics.mean(b):.1f} [{max(b) - min(b):.1f}] | {cost:+.1f} |"
                )
                if metric == "ctr3" and sessions == args.sessions_per_query:
                    verdicts.append((dataset.name, cost))
    print()
    for name, cost in verdicts:
        held = "within" if cost <= BUDGET_POINTS else "OVER"
        print(
            f"{name}: the guard costs {cost:+.1f} points of the CTR@3 gap at "
            f"{args.sessions_per_query} sessions per query ({held} the {BUDGET_POINTS:g}-point "
            "budget)."
        )


if __name__ == "__main__":
    main()
