"""The statistics judgment lists and offline evaluation share: agreement between two
graders (weighted Cohen's κ, Spearman's ρ) and a seeded percentile bootstrap.

Kept in ``amelio.search`` rather than borrowed from ``amelio.improve.stats``: search
sits below the improvement loop in the layers, so it may not import it, and the
few lines here are easier to read than a dependency turned upside down.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import NamedTuple

__all__ = [
    "RESAMPLES",
    "Interval",
    "average_ranks",
    "bootstrap_mean",
    "confusion",
    "spearman",
    "weighted_kappa",
]

#: Bootstrap resamples: enough for the 2.5 and 97.5 percentiles to settle to about
#: a hundredth of a point of NDCG on a few dozen queries, and fast in pure Python.
RESAMPLES = 1000


class Interval(NamedTuple):
    """A mean over queries and its 95 % percentile-bootstrap interval."""

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
    values: Sequence[float], *, seed: int = 0, resamples: int = RESAMPLES, level: float = 0.95
) -> Interval:
    """The mean of ``values`` with a percentile-bootstrap interval: the queries are
    drawn with replacement ``resamples`` times and the interval is the middle
    ``level`` of the resampled means.

    Seeded, so that one evaluation run twice gives the same interval; and for a
    paired comparison the caller passes the per-query *differences*, which is what
    makes the interval paired (a hard query is hard for both rankers)."""
    if not values:
        raise ValueError("no values to bootstrap")
    n = len(values)
    mean = sum(values) / n
    rng = random.Random(seed)  # noqa: S311 (resampling, not secrets)
    means = sorted(sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    tail = (1.0 - level) / 2.0
    low = means[min(math.floor(tail * resamples), resamples - 1)]
    high = means[min(math.ceil((1.0 - tail) * resamples) - 1, resamples - 1)]
    return Interval(mean, low, high)


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
