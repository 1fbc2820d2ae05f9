"""What every benchmark shares: targets recorded as met or missed, and wall-clock time
printed beside CPU time so that a busy machine shows in the figures.

A benchmark calls :func:`target` for each goal it measures; the line it prints
says met or MISSED, and when ``AMELIO_BENCH_RESULTS`` names a file (as
``run_all.py`` sets it) the verdict is appended there as one JSON line, so the
runner can print one summary table and exit non-zero if any target was missed.
:class:`Clock` measures a block in wall-clock and in this process's CPU seconds:
when CPU is much lower than wall-clock, the machine (or another process, such as a
database server) was busy, and the figure says less about Amelio.

Importing it also puts the repository's ``tests/`` folder on ``sys.path``: the
benchmarks share the test suite's kit (``support.processes``, ``fakes``), which is
repository plumbing and does not ship in the wheel.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

__all__ = ["RESULTS_ENV", "Clock", "Target", "load_line", "median_of", "percentile", "target"]

RESULTS_ENV = "AMELIO_BENCH_RESULTS"

_TESTS = str(Path(__file__).resolve().parent.parent / "tests")
if _TESTS not in sys.path:
    sys.path.append(_TESTS)


@dataclass(frozen=True)
class Target:
    """One goal and what was measured against it."""

    benchmark: str
    name: str
    measured: float
    goal: float
    unit: str
    higher_is_better: bool = True

    @property
    def met(self) -> bool:
        return self.measured >= self.goal if self.higher_is_better else self.measured <= self.goal

    def line(self) -> str:
        sign = "≥" if self.higher_is_better else "≤"
        verdict = "met" if self.met else "MISSED"
        return (
            f"target {self.name}: {_fmt(self.measured)} {self.unit} "
            f"(goal {sign} {_fmt(self.goal)} {self.unit}): {verdict}"
        )


def _fmt(value: float) -> str:
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"


def target(
    name: str, measured: float, goal: float, unit: str, *, higher_is_better: bool = True
) -> Target:
    """Print and record whether ``measured`` meets ``goal``."""
    found = Target(
        Path(sys.argv[0]).stem, name, float(measured), float(goal), unit, higher_is_better
    )
    print(found.line())
    results = os.environ.get(RESULTS_ENV)
    if results:
        with open(results, "a", encoding="utf-8") as f:
            f.write(json.dumps(asdict(found)) + "\n")
    return found


class Clock:
    """Wall-clock and process CPU seconds of a ``with`` block."""

    wall: float = 0.0
    cpu: float = 0.0

    def __enter__(self) -> Self:
        self._wall = time.perf_counter()
        self._cpu = time.process_time()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.wall = time.perf_counter() - self._wall
        self.cpu = time.process_time() - self._cpu

    def __str__(self) -> str:
        share = self.cpu / self.wall if self.wall else 0.0
        return f"wall {self.wall:.2f} s, CPU {self.cpu:.2f} s ({share:.0%} of one core)"


def load_line(before: float) -> str:
    """The machine's 1-minute load average before and now, and whether other work
    competed for the CPUs (the wall-clock figures are then low)."""
    after, cpus = os.getloadavg()[0], os.cpu_count() or 1
    busy = max(before, after) > cpus
    return f"Load average (1 min): {before:.1f} before, {after:.1f} after, on {cpus} CPUs" + (
        ": above the CPU count, other work was waiting for them, so wall-clock figures are low."
        if busy
        else "."
    )


def percentile(samples: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation, as numpy's default."""
    ordered = sorted(samples)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q / 100
    low = int(k)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


def median_of(values: Sequence[float]) -> float:
    """The median of repeated runs: unlike the best, it does not reward luck."""
    return float(statistics.median(values))
