"""Interleaving against an A/B test: how many sessions each needs to detect a ranker
about 3 % better in NDCG@10, on Cranfield and the synthetic graded set.

For each data set the better ranker is the product's own feedback profile after
``--train`` sessions per query of simulated clicks, ``hybrid_with_feedback`` with
a small ``beta`` chosen from a grid so that its NDCG@10 is about 3 % above BM25's
(the grid value closest to +3 %; the table gives the gain measured); the other
is ``bm25``. Then :func:`amelio.search.interleaving_simulation.simulate_interleaving`
(``amelio simulate --interleave``'s code) runs ``--sessions`` interleaved
sessions per query for each method and says how many sessions each design
needs for 80 % power at 5 %: interleaving by resampling its sessions through
the production verdict, A/B by the normal formula on the exact means and
variances of satisfied clicks per session under the same click model.

Target: interleaving needs at most 10 % of the sessions the A/B test needs, at
80 % power or more. Run::

    python benchmarks/relevance_data.py     # the synthetic set, once
    python benchmarks/interleaving.py [--dataset DIR ...] [--sessions 40]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from benchlib import target

from amelio.search.interleaving_simulation import simulate_interleaving
from amelio.search.profiles import ProfileSpec

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA = [
    ROOT / "shared" / "data" / "cranfield",
    Path.home() / ".cache" / "amelio-bench" / "relevance" / "synthetic-graded",
]
BETAS = (0.01, 0.02, 0.03, 0.05, 0.08, 0.12, 0.2, 0.3, 0.5, 1.0)
GAIN = 0.03
SHARE_GOAL = 0.10


def better(beta: float) -> ProfileSpec:
    return ProfileSpec("hybrid_with_feedback", alpha=0.0, beta=beta, exploration=0.0)


def pick_beta(dataset: Path, train: int, seed: int) -> tuple[float, float]:
    """The grid's beta whose NDCG@10 gain over bm25 is closest to +3 %."""
    found: list[tuple[float, float]] = []
    for beta in BETAS:
        quick = simulate_interleaving(
            dataset,
            better(beta),
            ProfileSpec("bm25"),
            sessions_per_query=1,
            train_sessions=train,
            seed=seed,
            replicates=10,
        )
        found.append((beta, quick.ndcg["relativeDifference"]))
    return min(found, key=lambda x: abs(x[1] - GAIN))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, nargs="+", default=DEFAULT_DATA)
    parser.add_argument("--sessions", type=int, default=40, help="Sessions per query.")
    parser.add_argument("--train", type=int, default=5, help="Training sessions per query.")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rows: list[tuple[str, ...]] = []
    for dataset in args.dataset:
        if not (dataset / "corpus.jsonl").is_file():
            print(f"skipped {dataset}: not found (benchmarks/relevance_data.py writes the set)")
            continue
        started = time.perf_counter()
        beta, gain = pick_beta(dataset, args.train, args.seed)
        for method in ("team-draft", "balanced"):
            found = simulate_interleaving(
                dataset,
                better(beta),
                ProfileSpec("bm25"),
                sessions_per_query=args.sessions,
                train_sessions=args.train,
                method=method,
                seed=args.seed,
            )
            il, ab = found.interleaving, found.ab
            share = found.ratio
            rows.append(
                (
                    dataset.name,
                    method,
                    f"beta={beta:g}",
                    f"{found.ndcg['a']:.4f} vs {found.ndcg['b']:.4f} ({gain:+.1%})",
                    str(il["sessionsNeeded"]),
                    f"{il['powerThere']:.2f}",
                    str(ab["sessionsNeeded"]),
                    f"{share:.1%}",
                    "yes" if il["agreesWithNdcg"] else "NO",
                )
            )
            target(
                f"{dataset.name} {method}: interleaving sessions / A-B sessions",
                share * 100,
                SHARE_GOAL * 100,
                "%",
                higher_is_better=False,
            )
            target(
                f"{dataset.name} {method}: power at that size",
                il["powerThere"],
                0.8,
                "",
            )
        print(f"{dataset.name}: {time.perf_counter() - started:.0f} s")
    headers = (
        "data set",
        "method",
        "better ranker",
        "NDCG@10 (vs bm25)",
        "interleaving sessions",
        "power",
        "A/B sessions",
        "share",
        "agrees with NDCG",
    )
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))


if __name__ == "__main__":
    main()
