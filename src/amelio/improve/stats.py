"""Small exact statistics for verdicts: the signed-rank test and a paired bootstrap.

Benchmarks have a handful of paired scores; a normal approximation would be
wrong there, so the Wilcoxon signed-rank p-value is computed exactly (a dynamic
program over rank sums, fine up to hundreds of pairs). With three scenarios the
smallest possible two-sided p is 0.25: three wins of three prove nothing, which
is the point.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence

__all__ = ["bootstrap_mean_ci", "min_scenarios", "wilcoxon_signed_rank"]


def wilcoxon_signed_rank(differences: Sequence[float]) -> float:
    """Exact two-sided p-value that the differences are symmetric around zero.

    Zeros are dropped (Wilcoxon's convention); tied magnitudes get average ranks.
    Returns 1.0 when nothing is left.
    """
    values = [d for d in differences if d != 0]
    n = len(values)
    if n == 0:
        return 1.0
    order = sorted(range(n), key=lambda i: abs(values[i]))
    ranks = [0.0] * n
    i = 0
    while i < n:
        j = i
        while j + 1 < n and abs(values[order[j + 1]]) == abs(values[order[i]]):
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
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


def bootstrap_mean_ci(
    differences: Sequence[float], *, confidence: float = 0.95, resamples: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean difference (seeded: reproducible)."""
    if not differences:
        return 0.0, 0.0
    rng = random.Random(seed)  # noqa: S311 (statistics, not secrets)
    n = len(differences)
    means = sorted(statistics.fmean(rng.choices(differences, k=n)) for _ in range(resamples))
    low = means[int((1 - confidence) / 2 * resamples)]
    high = means[min(resamples - 1, int((1 + confidence) / 2 * resamples))]
    return low, high


def min_scenarios(confidence: float) -> int:
    """The fewest paired scores with which the exact two-sided signed-rank test can
    reach ``confidence`` at all: its smallest p with ``n`` non-zero differences is
    2 / 2**n (every one on the same side), so below that number even a clean
    sweep is not significant (6 at 95 %, 8 at 99 %)."""
    n = 1
    while 2.0 ** (1 - n) >= 1 - confidence:
        n += 1
    return n
