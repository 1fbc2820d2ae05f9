"""Router accuracy and latency per scorer, on public routing data and the example skills.

Data: ``../shared/data/routing-clinc150`` (CLINC150: 150 skills, 4,500 in-scope
test queries, 1,000 out-of-scope ones) and ``benchmarks/data/example_routing.jsonl``
(hand-labelled messages for ``examples/skills``). Reports top-1 and top-5
accuracy on in-scope queries, the out-of-scope rejection rate (no skill scores
above the threshold) and the routing latency per message on 200 skills.

    python benchmarks/router_accuracy.py [--data ../shared/data] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

from amelio.router import Router, scorers
from amelio.skills import read_skills
from amelio.skills.model import SkillSpec

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def load_queries(path: Path) -> list[tuple[str, str | None]]:
    with path.open(encoding="utf-8") as f:
        return [(q["text"], q["skill"]) for q in map(json.loads, f) if q.get("text")]


def accuracy(router: Router, queries: list[tuple[str, str | None]],
             min_score: float | None = None) -> dict[str, float]:
    top1 = top5 = inscope = oos = rejected = 0
    for text, expected in queries:
        names = router.route(text, limit=5, min_score=min_score).names
        if expected is None:
            oos += 1
            rejected += not names
            continue
        inscope += 1
        top1 += bool(names) and names[0] == expected
        top5 += expected in names
    return {
        "top1": top1 / inscope if inscope else 0.0,
        "top5": top5 / inscope if inscope else 0.0,
        "oos_rejected": rejected / oos if oos else float("nan"),
    }


def latency_us(router: Router, messages: list[str], repeats: int) -> tuple[float, float]:
    samples: list[float] = []
    for _ in range(repeats):
        for text in messages:
            start = time.perf_counter()
            router.route(text)
            samples.append((time.perf_counter() - start) * 1e6)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.95)]


def two_hundred(skills: list[SkillSpec]) -> list[SkillSpec]:
    """Pad a skill set to 200 with renamed copies, for the latency target."""
    out = list(skills)
    i = 0
    while len(out) < 200:
        base = skills[i % len(skills)]
        out.append(replace(base, name=f"copy-{i}-{base.name}"))
        i += 1
    return out[:200]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    clinc_dir = args.data / "routing-clinc150"
    if not clinc_dir.is_dir():
        print(f"routing data not found at {clinc_dir}; pass --data", file=sys.stderr)
        return 2
    clinc_skills = read_skills(clinc_dir / "skills")
    clinc_queries = load_queries(clinc_dir / "queries.jsonl")
    example_skills = read_skills(ROOT / "examples" / "skills")
    example_queries = load_queries(HERE / "data" / "example_routing.jsonl")
    big = two_hundred(clinc_skills)
    messages = [t for t, _ in clinc_queries[:: max(1, len(clinc_queries) // 1000)]]

    print(f"CLINC150: {len(clinc_skills)} skills, "
          f"{sum(e is not None for _, e in clinc_queries)} in-scope + "
          f"{sum(e is None for _, e in clinc_queries)} out-of-scope queries; "
          f"examples: {len(example_skills)} skills, {len(example_queries)} queries; "
          f"latency: {len(big)} skills x {len(messages)} messages x {args.repeats}")
    header = (f"{'scorer':10} {'min score':>9} {'data':9} {'top-1':>7} {'top-5':>7} "
              f"{'OOS rej.':>9} {'p50 µs':>8} {'p95 µs':>8}")
    print(header)
    print("-" * len(header))
    for name, scorer in scorers().items():
        p50, p95 = latency_us(Router(big, name), messages, args.repeats)
        for threshold in sorted({0.0, scorer.min_score}):
            clinc = accuracy(Router(clinc_skills, name), clinc_queries, threshold)
            ex = accuracy(Router(example_skills, name), example_queries, threshold)
            print(f"{name:10} {threshold:9.2f} {'clinc150':9} {clinc['top1']:7.1%} "
                  f"{clinc['top5']:7.1%} {clinc['oos_rejected']:9.1%} {p50:8.1f} {p95:8.1f}")
            print(f"{name:10} {threshold:9.2f} {'examples':9} {ex['top1']:7.1%} "
                  f"{ex['top5']:7.1%} {ex['oos_rejected']:9.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
