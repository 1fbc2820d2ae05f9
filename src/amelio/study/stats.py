"""Intervals over tasks: a held-out task is the unit the study samples.

Each figure (a pass rate, or the paired difference of two arms on the same tasks)
comes with a seeded percentile bootstrap interval that resamples tasks, so two
runs with the same seed print the same interval. A paired difference resamples
the per-task differences, not each side on its own: the tasks' own difficulty
cancels out, which is why it is narrower than the two intervals side by side.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from amelio.stats import bootstrap_mean

__all__ = ["Estimate", "estimate", "paired"]

Estimate = tuple[float, tuple[float, float]]


def estimate(values: Sequence[float], seed: int) -> Estimate:
    """The mean of ``values`` and its 95 % interval (zeros without values)."""
    mean, low, high = bootstrap_mean(values, seed=seed)
    return mean, (low, high)


def paired(a: Mapping[str, float], b: Mapping[str, float], seed: int) -> Estimate:
    """``a − b`` over the tasks both scored, with its interval."""
    shared = sorted(a.keys() & b.keys())
    return estimate([a[t] - b[t] for t in shared], seed)
