"""Eval engine throughput: rule checks per second on one core (target ≥ 100,000).

A 2 KB answer against 10 and 100 mixed rules (every built-in type, regexes
included), several repeats; prints rules, checks/s (the median repeat, not the
best), p50/p95 µs per ``evaluate`` call, and wall-clock beside CPU time. The
outside reference is the cheapest check there is, Python's own ``in`` on the same
answer, to show what the engine adds per rule.
Run: ``python benchmarks/evals_throughput.py [--repeats N]``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from benchlib import Clock, median_of, percentile, target

from amelio.evals.engine import evaluate, parse_rules
from amelio.evals.rules import EvalRule

TARGET_CHECKS_PER_S = 100_000

_HEAD = "## Code review verdict\n\n"
_PROSE = (
    "The change adds a retry loop around the disk flush; RAM use stays flat and CPU load "
    "is unchanged. Error handling looks right, but the timeout should be configurable. "
)
_TAIL = '\n```json\n{"verdict": "approve", "score": 8}\n```\n'
ANSWER = _HEAD + (_PROSE * 20)[: 2048 - len(_HEAD) - len(_TAIL)] + _TAIL  # exactly 2 KB


def _mixed_rule(i: int) -> dict[str, Any]:
    """The i-th rule of a realistic mix: mostly string and length checks, some regex and JSON."""
    n = i // 15
    kinds: list[dict[str, Any]] = [
        {"type": "string_contains", "value": f"verdict{n or ''}"},
        {"type": "string_not_contains", "value": f"--force{n}"},
        {"type": "icontains", "value": f"DISK FLUSH{n or ''}"},
        {"type": "regex_match", "pattern": rf"(?:disk|ram|cpu)\s+\w+{n}?", "flags": "i"},
        {"type": "regex_not_match", "pattern": rf"console\.log\({n}"},
        {"type": "max_length", "value": 4000 + n},
        {"type": "min_length", "value": 200 + n},
        {"type": "word_count", "min": 20 + n, "max": 800},
        {"type": "contains_any", "values": ["approve", "reject", f"x{n}"]},
        {"type": "contains_all", "values": ["retry", "timeout", f"y{n}"], "case_sensitive": False},
        {"type": "starts_with", "value": f"## Code review{n or ''}"},
        {"type": "equals", "value": f"LGTM {n}"},
        {"type": "not_empty"},
        {"type": "is_json"},
        {
            "type": "json_schema",
            "schema": {"type": "object", "required": ["verdict"], "maxProperties": 10 + n},
        },
    ]
    return {"id": f"r{i:03d}", "severity": "warning", **kinds[i % len(kinds)]}


def _measure(rules: tuple[EvalRule, ...], calls: int, repeats: int) -> dict[str, float]:
    for _ in range(50):  # warm caches (casefold, regex DFA state) before timing
        evaluate(ANSWER, rules)
    latencies: list[float] = []
    rates: list[float] = []
    with Clock() as clock:
        for _ in range(repeats):
            started = time.perf_counter()
            for _ in range(calls):
                t0 = time.perf_counter()
                evaluate(ANSWER, rules)
                latencies.append(time.perf_counter() - t0)
            rates.append(calls * len(rules) / (time.perf_counter() - started))
    return {
        "rate": median_of(rates),
        "cpu_rate": repeats * calls * len(rules) / clock.cpu if clock.cpu else 0.0,
        "p50": percentile(latencies, 50) * 1e6,
        "p95": percentile(latencies, 95) * 1e6,
        "wall": clock.wall,
        "cpu": clock.cpu,
    }


def _floor(checks: int) -> float:
    """Substring tests per second with nothing around them: the engine's floor."""
    needles = [f"verdict{i}" for i in range(100)]
    started = time.perf_counter()
    done = 0
    while done < checks:
        for needle in needles:
            _ = needle in ANSWER
        done += len(needles)
    return done / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--checks",
        type=int,
        default=200_000,
        help="rule checks per repeat (split into evaluate calls)",
    )
    args = parser.parse_args()
    print(
        f"answer: {len(ANSWER):,} chars; repeats: {args.repeats} (checks/s is the median "
        "repeat; CPU checks/s divides by this process's CPU time)"
    )
    print(
        f"{'rules':>6} {'checks/s':>12} {'CPU checks/s':>13} {'p50 µs':>9} {'p95 µs':>9} "
        f"{'wall s':>7} {'CPU s':>6}"
    )
    slowest = float("inf")
    for count in (10, 100):
        rules = parse_rules([_mixed_rule(i) for i in range(count)])
        stats = _measure(rules, max(1, args.checks // count), args.repeats)
        slowest = min(slowest, stats["rate"])
        print(
            f"{count:>6} {stats['rate']:>12,.0f} {stats['cpu_rate']:>13,.0f} "
            f"{stats['p50']:>9.1f} {stats['p95']:>9.1f} {stats['wall']:>7.2f} "
            f"{stats['cpu']:>6.2f}"
        )
    floor = _floor(args.checks)
    print(
        f"floor: Python's `in` on the same answer, {floor:,.0f} tests/s "
        f"(the engine runs at {slowest / floor:.1%} of it with every rule type mixed in)"
    )
    target(
        "rule checks per second (median repeat, the slower rule set)",
        slowest,
        TARGET_CHECKS_PER_S,
        "checks/s",
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
