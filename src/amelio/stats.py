"""Small exact statistics shared by the loops: intervals, tests and agreement.

* :func:`bootstrap_mean` — a seeded percentile bootstrap of a mean (benchmark
  verdicts, the study's pass rates, offline relevance evaluation): the same seed
  gives the same interval, and a paired comparison passes the per-item
  *differences*, which makes the interval paired.
* :func:`wilcoxon_signed_rank` — the exact two-sided signed-rank p-value.
  Benchmarks have a handful of paired scores; a normal approximation would be
  wrong there, so it is computed exactly (a dynamic program over rank sums, fine
  up to hundreds of pairs). With three scenarios the smallest possible p is 0.25:
  three wins of three prove nothing, which is the point.
* :func:`weighted_kappa` and :func:`spearman` — how two graders agree (a judge
  against people, two judgment lists).

A foundation module: the skill loop and search both use it, so it imports nothing
of Amelio.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from statistics import fmean
from typing import NamedTuple

__all__ = [
    "RESAMPLES",
    "Interval",
    "average_ranks",
    "bootstrap_mean",
    "confusion",
    "min_scenarios",
    "spearman",
    "weighted_kappa",
    "wilcoxon_signed_rank",
]


#: Bootstrap resamples: enough for the 2.5th and 97.5th percentiles to settle to
#: about a hundredth of a point on a few dozen items, and fast in pure Python.
RESAMPLES = 2000


class Interval(NamedTuple):
    """A mean and its percentile-bootstrap interval."""

    value: float
    low: float
    high: float

    def to_dict(self) -> dict[str, float]:
        return {
            "value": round(self.value, 4),
            "low": round(self.low, 4),
            "high": round(self.high, 4),
        }


def bootstrap_mean(
    values: Sequence[float], *, confidence: float = 0.95, resamples: int = RESAMPLES, seed: int = 0
) -> Interval:
    """The mean of ``values`` and its percentile bootstrap interval: ``values`` drawn
    with replacement ``resamples`` times, the middle ``confidence`` of the resampled
    means (seeded: reproducible). No values: all zero."""
    if not values:
        return Interval(0.0, 0.0, 0.0)
    rng = random.Random(seed)  # noqa: S311 (statistics, not secrets)
    n = len(values)
    means = sorted(fmean(rng.choices(values, k=n)) for _ in range(resamples))
    low = means[int((1 - confidence) / 2 * resamples)]
    high = means[min(resamples - 1, int((1 + confidence) / 2 * resamples))]
    return Interval(fmean(values), low, high)


def wilcoxon_signed_rank(differences: Sequence[float]) -> float:
    """Exact two-sided p-value that the differences are symmetric around zero.

    Zeros are dropped (Wilcoxon's convention); tied magnitudes get average ranks.
    Returns 1.0 when nothing is left.
    """
    values = [d for d in differences if d != 0]
    n = len(values)
    if n == 0:
        return 1.0
    ranks = average_ranks([abs(v) for v in values])
    # Ranks are multiples of 0.5: count in half-units so the DP stays on integers.
    half = [round(2 * r) for r in ranks]
    w_plus = sum(h for h, v in zip(half, values, strict=True) if v > 0)
    total = sum(half)
    counts = [0] * (total + 1)
    counts[0] = 1
    for h in half:
        for s in range(total, h - 1, -1):
            counts[s] += counts[s - h]
    all_ways = 2**n
    tail = min(w_plus, total - w_plus)
    p = 2 * sum(counts[: tail + 1]) / all_ways
    return float(min(1.0, p))


def min_scenarios(confidence: float) -> int:
    """The fewest paired scores with which the exact two-sided signed-rank test can
    reach ``confidence`` at all: its smallest p with ``n`` non-zero differences is
    2 / 2**n (every one on the same side), so below that number even a clean
    sweep is not significant (6 at 95 %, 8 at 99 %)."""
    n = 1
    while 2.0 ** (1 - n) >= 1 - confidence:
        n += 1
    return n


def confusion(pairs: Sequence[tuple[int, int]], categories: int = 4) -> list[list[int]]:
    """``table[a][b]``: how many pairs the first grader graded ``a`` and the second ``b``."""
    table = [[0] * categories for _ in range(categories)]
    for a, b in pairs:
        table[a][b] += 1
    return table


def weighted_kappa(pairs: Sequence[tuple[int, int]], categories: int = 4) -> float | None:
    """Cohen's κ with quadratic weights, for grades ``0 … categories − 1``:

        κ = 1 − Σ w_ij O_ij / Σ w_ij E_ij,   w_ij = (i − j)² / (k − 1)²

    where O is the observed confusion table and E the table chance would give
    (each grader's own grade frequencies, independent). Quadratic weights make a
    3-against-0 disagreement count nine times a 3-against-2 one, as a grade scale
    should. None when it is undefined: no pairs, or no disagreement chance could
    produce (both graders gave one and the same grade throughout)."""
    if not pairs:
        return None
    n = len(pairs)
    table = confusion(pairs, categories)
    rows = [sum(row) for row in table]
    cols = [sum(table[i][j] for i in range(categories)) for j in range(categories)]
    scale = (categories - 1) ** 2
    observed = expected = 0.0
    for i in range(categories):
        for j in range(categories):
            w = (i - j) ** 2 / scale
            observed += w * table[i][j]
            expected += w * rows[i] * cols[j] / n
    if expected == 0:
        return None
    return 1.0 - observed / expected


def average_ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks of ``values``, ties sharing the average of the ranks they span."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for k in range(start, end + 1):
            ranks[order[k]] = (start + end) / 2.0 + 1.0
        start = end + 1
    return ranks


def spearman(pairs: Sequence[tuple[float, float]]) -> float | None:
    """Spearman's ρ: Pearson's correlation of the two graders' average ranks (the
    form that stays right with ties, which four grades always have). None with fewer
    than two pairs or when one grader gave a single grade throughout."""
    if len(pairs) < 2:
        return None
    xs = average_ranks([a for a, _ in pairs])
    ys = average_ranks([b for _, b in pairs])
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    if sxx == 0 or syy == 0:
        return None
    return sxy / math.sqrt(sxx * syy)
