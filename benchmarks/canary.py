"""Canary rollouts: is the cohort the size asked, does the sequential test catch a real
regression and stay quiet on none, and what does a rollout add to each request?

Four parts, each through Amelio's own code:

1. **Cohorts.** A rollout at 10 % on a real workspace (SQLite), then 10,000
   requests of 10,000 users through :func:`amelio.assistant.prompt.build_prompt`,
   the function every answer path calls: the share on the new version, and the
   same 1,000 users asked again (stickiness).
2. **Power and false alarms.** Simulated answers (Bernoulli outcomes, seeded) at a
   10 % canary, checked every 50 answers of the new version by
   :func:`amelio.improve.rollouts.decide`, the function ``amelio rollouts check``
   runs: a 👎 rate of 15 % against 10 % must be caught within 2,000 answers of the
   new version in at least 80 % of runs; with equal rates (A/A) a false alarm in at
   most 5 % of runs, over 2,000 and over 10,000 answers. The baseline in the same
   run: a fixed-horizon two-proportion z-test peeked at every check, as a
   dashboard that re-reads a p-value would, to show what peeking costs. Fix-It
   (3 %) and rule failures (5 %) are equal in both arms: the three metrics share
   α = ``rollout_alpha`` (0.05).
3. **End to end.** A rollout at 10 % through :func:`~amelio.assistant.respond.respond`
   (a scripted model), real 👎 on 30 % of the new version's answers and 10 % of the
   old one's, ``check_rollouts`` every 50 requests: the rollout pauses, and
   everyone is then served the old version.
4. **Overhead.** ``build_prompt`` for the same message with no rollout and with a
   running one, interleaved, 3,000 requests each: the p95 difference.

    python benchmarks/canary.py [--runs 300]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchlib import Clock, percentile, target

from amelio import skills
from amelio.assistant.prompt import build_prompt
from amelio.assistant.quality import give_answer_feedback
from amelio.assistant.respond import respond
from amelio.improve import proposals as props
from amelio.improve import rollouts as ro
from amelio.llm.fake import ScriptedProvider
from amelio.workspace.folder import Workspace, init_workspace

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "skills"
MESSAGE = "git push rejected"
NEW = "# Git help\n\nAlways use --force-with-lease; never a plain force push.\n"
CHECK_EVERY = 50


def _workspace(tmp: str) -> Workspace:
    ws, _ = init_workspace(Path(tmp) / "ws")
    skills.import_skills(ws.engine, EXAMPLES)
    return ws


def _start(ws: Workspace, percent: int) -> ro.Rollout:
    made = props.create_proposal(ws, "git-help", proposed_content=NEW, rationale="r", author="b")
    props.approve_proposal(ws, made.id, actor="bench", canary=percent)
    return ro.list_rollouts(ws, status="running")[0]


def cohorts() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ws = _workspace(tmp)
        try:
            r = _start(ws, 10)
            first: dict[str, int] = {}
            with Clock() as clock:
                for i in range(10_000):
                    applied = build_prompt(ws, MESSAGE, unit=f"u:user{i}").applied
                    assert applied is not None
                    first[f"user{i}"] = applied.version
            share = sum(v == r.to_version for v in first.values()) / len(first)
            again = [f"user{i}" for i in range(0, 10_000, 10)]
            same = sum(
                (build_prompt(ws, MESSAGE, unit=f"u:{u}").applied.version == first[u])  # type: ignore[union-attr]
                for u in again
            ) / len(again)
            print(f"10,000 requests at 10 %: {share:.2%} on the new version ({clock})")
            target("cohort share's distance from 10 %", abs(share - 0.10) * 100, 1.0, "points",
                   higher_is_better=False)  # fmt: skip
            target("same version for a user asked again", same * 100, 100, "%")
        finally:
            ws.dispose()


def _z_crossed(new: dict[str, int], old: dict[str, int], alpha: float) -> bool:
    """The fixed-horizon test a dashboard re-reads: a two-sided z-test per metric at
    α/3, declared on any metric worse for the new version."""
    for m in ro.METRICS:
        n1, n0 = new["answers"], old["answers"]
        if n1 < ro.MIN_PER_ARM or n0 < ro.MIN_PER_ARM:
            return False
        p1, p0 = new[m] / n1, old[m] / n0
        pooled = (new[m] + old[m]) / (n1 + n0)
        se = math.sqrt(max(pooled * (1 - pooled) * (1 / n1 + 1 / n0), 1e-12))
        z = (p1 - p0) / se
        if z > statistics.NormalDist().inv_cdf(1 - alpha / len(ro.METRICS) / 2):
            return True
    return False


def _simulate(
    seed: int, down_new: float, horizon: int, alpha: float
) -> tuple[int | None, int | None]:
    """Answers arrive at a 10 % canary until ``horizon`` answers of the new version;
    every CHECK_EVERY of them both tests look. Returns the new version's answers at
    which each first raised the alarm (None: never)."""
    rng = random.Random(seed)
    arms = {"control": dict.fromkeys(("answers", *ro.METRICS), 0),
            "canary": dict.fromkeys(("answers", *ro.METRICS), 0)}  # fmt: skip
    rates = {"control": (0.10, 0.03, 0.05), "canary": (down_new, 0.03, 0.05)}
    caught: int | None = None
    peeked: int | None = None
    while arms["canary"]["answers"] < horizon:
        arm = "canary" if rng.random() < 0.10 else "control"
        counts = arms[arm]
        counts["answers"] += 1
        for metric, rate in zip(ro.METRICS, rates[arm], strict=True):
            counts[metric] += rng.random() < rate
        n = arms["canary"]["answers"]
        if arm == "canary" and n % CHECK_EVERY == 0:
            if caught is None and ro.decide(arms, alpha)["regressions"]:
                caught = n
            if peeked is None and _z_crossed(arms["canary"], arms["control"], alpha):
                peeked = n
            if caught is not None and peeked is not None:
                break
    return caught, peeked


def power(runs: int, alpha: float) -> None:
    print(f"\n{'scenario':<34} {'runs':>5} {'mSPRT alarms':>13} {'median at':>10} "
          f"{'peeked z-test alarms':>21}")  # fmt: skip
    rows = {}
    for name, down_new, horizon in (
        ("regression +5 pts, 2,000 answers", 0.15, 2000),
        ("A/A, 2,000 answers", 0.10, 2000),
        ("A/A, 10,000 answers", 0.10, 10_000),
    ):
        n = runs if horizon <= 2000 else max(runs // 3, 50)
        with Clock() as clock:
            found = [_simulate(seed, down_new, horizon, alpha) for seed in range(n)]
        caught = [c for c, _ in found if c is not None]
        peeked = sum(p is not None for _, p in found)
        rows[name] = (len(caught) / n, peeked / n)
        median = f"{statistics.median(caught):,.0f}" if caught else "-"
        print(f"{name:<34} {n:>5} {len(caught) / n:>13.1%} {median:>10} {peeked / n:>21.1%}"
              f"   ({clock.wall:.1f} s)")  # fmt: skip
    target("regression caught within 2,000 answers of the new version",
           rows["regression +5 pts, 2,000 answers"][0] * 100, 80, "% of runs")  # fmt: skip
    target("A/A false alarms over 2,000 answers", rows["A/A, 2,000 answers"][0] * 100, 5,
           "% of runs", higher_is_better=False)  # fmt: skip
    target("A/A false alarms over 10,000 answers", rows["A/A, 10,000 answers"][0] * 100, 5,
           "% of runs", higher_is_better=False)  # fmt: skip


def end_to_end(seed: int) -> None:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        ws = _workspace(tmp)
        try:
            r = _start(ws, 10)
            model = ScriptedProvider(default="Run git pull --rebase, then push.")
            paused_at = None
            with Clock() as clock:
                for i in range(6000):
                    reply = respond(ws, MESSAGE, user=f"user{i}", provider=model)
                    bad = 0.30 if reply.skill_version == r.to_version else 0.10
                    if rng.random() < bad:
                        give_answer_feedback(ws, reply.interaction_id, "down", user=f"user{i}")
                    if i % CHECK_EVERY == 0 and any(
                        c.action == "paused" for c in ro.check_rollouts(ws)
                    ):
                        paused_at = i
                        break
            done = ro.get_rollout(ws, r.id)
            after = {
                build_prompt(ws, MESSAGE, unit=f"u:user{i}").applied.version  # type: ignore[union-attr]
                for i in range(500)
            }
            arms = (done.last_check or {}).get("arms", {})
            print(
                f"\nend to end (respond, real 👎, check every {CHECK_EVERY} requests): paused "
                f"after {paused_at} requests, {arms.get('canary', {}).get('answers')} of them on "
                f"the new version ({clock}); then versions served: {sorted(after)}"
            )
            print(f"  why: {done.reason}")
            target("rollout paused by the regression", done.status == "paused", 1, "")
            target("everyone on the old version once paused", after == {r.from_version}, 1, "")
        finally:
            ws.dispose()


def overhead() -> None:
    with tempfile.TemporaryDirectory() as plain_tmp, tempfile.TemporaryDirectory() as tmp:
        plain, rolled = _workspace(plain_tmp), _workspace(tmp)
        try:
            _start(rolled, 50)
            for ws in (plain, rolled):  # warm: routing snapshot, compiled rules, the old spec
                for i in range(200):
                    build_prompt(ws, MESSAGE, unit=f"u:warm{i}")
            samples: dict[str, list[float]] = {"no rollout": [], "running rollout": []}
            for i in range(3000):
                for name, ws in (("no rollout", plain), ("running rollout", rolled)):
                    start = time.perf_counter()
                    build_prompt(ws, MESSAGE, unit=f"u:user{i}")
                    samples[name].append((time.perf_counter() - start) * 1000)
            print(f"\n{'build_prompt':<18} {'p50 ms':>8} {'p95 ms':>8}")
            for name, values in samples.items():
                print(f"{name:<18} {percentile(values, 50):>8.3f} {percentile(values, 95):>8.3f}")
            added = percentile(samples["running rollout"], 95) - percentile(
                samples["no rollout"], 95
            )
            target("p95 a running rollout adds to a request", added, 1.0, "ms",
                   higher_is_better=False)  # fmt: skip
        finally:
            plain.dispose()
            rolled.dispose()


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=300, help="seeded runs per scenario")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    cohorts()
    power(args.runs, alpha=0.05)
    end_to_end(args.seed)
    overhead()
    return 0


if __name__ == "__main__":
    sys.exit(main())
