"""Run every benchmark, even after one misses its target or fails, then print one
table of every target met or missed; exit 1 if any was missed or any benchmark
failed. This is `make bench`.

    python benchmarks/run_all.py [--only NAME ...] [-- extra args for each]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import RESULTS_ENV, Target

HERE = Path(__file__).resolve().parent
#: In the order they run: cheap and self-contained first.
BENCHMARKS = (
    "cli_startup",
    "evals_throughput",
    "router_accuracy",
    "respond_overhead",
    "learnings",
    "findings",
    "telegram_overhead",
    "proxy_overhead",
    "feedback_ingest",
    "search_latency",
    "interleaving",
    "client_compute",
    "compute_attack",
    "evals_vs_promptfoo",
    "load",
    "efficacy",
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=BENCHMARKS, help="Run only these.")
    args = parser.parse_args()
    chosen = args.only or BENCHMARKS
    failed: list[str] = []
    times: dict[str, float] = {}
    with tempfile.NamedTemporaryFile("r", suffix=".jsonl", delete=False) as results:
        env = os.environ | {RESULTS_ENV: results.name}
        for name in chosen:
            print(f"\n=== benchmarks/{name}.py ===", flush=True)
            start = time.perf_counter()
            done = subprocess.run([sys.executable, str(HERE / f"{name}.py")], env=env, check=False)
            times[name] = time.perf_counter() - start
            if done.returncode != 0:
                failed.append(name)
        targets = [
            Target(**json.loads(line))
            for line in Path(results.name).read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]
    Path(results.name).unlink(missing_ok=True)
    print("\n=== summary ===")
    width = max([len(f"{t.benchmark}: {t.name}") for t in targets] + [20])
    print(f"{'target':<{width}}  {'measured':>12}  {'goal':>14}  verdict")
    for t in targets:
        sign = "≥" if t.higher_is_better else "≤"
        print(
            f"{t.benchmark + ': ' + t.name:<{width}}  {t.measured:>12,.3f}  "
            f"{sign} {t.goal:>12,.3f}  {'met' if t.met else 'MISSED'}  {t.unit}"
        )
    for name in chosen:
        state = "FAILED (exit status non-zero)" if name in failed else "ran"
        print(f"{name}: {state} in {times[name]:.0f} s")
    missed = [t for t in targets if not t.met]
    if missed or failed:
        print(f"\n{len(missed)} target(s) missed, {len(failed)} benchmark(s) failed.")
        return 1
    print(f"\nAll {len(targets)} targets met.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
