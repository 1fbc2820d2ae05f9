"""Does the skill loop make a real assistant better? ``amelio study`` on the
development suite (``benchmarks/data/study``: 6 skills, 120 tasks, half held out)
with Qwen2.5-Coder-0.5B-Instruct run in process by llama.cpp.

It needs the model and the runtime, which nothing fetches at test time:

    python benchmarks/local_model.py fetch qwen
    pip install 'amelio[local]'

Without them it says so and exits 0 with no targets (``make bench`` goes on). With
them it runs the study (every arm, 3 rounds, gated approval, Sage, answers capped
at 384 tokens) in a temporary folder, or ``--out``, and prints its table and the
targets:

* ``loop`` at the last round closes at least 80 % of the gap between ``skills``
  and ``told`` (the oracle told up front), with the paired difference to
  ``skills`` above 0 (its 95 % interval);
* ``loop`` ends at or above ``learnings`` (feedback into learnings, nothing else);
* ``skills`` beats ``bare``;
* the whole study takes at most 20 minutes.

* with ``--plant-harmful RATE`` and gated approval, at most 5 % of the planted
  harmful proposals approved; and no approved proposal that breaks a pinned case.

    python benchmarks/efficacy.py [--rounds 3] [--arms ...] [--no-sage] [--out DIR]
        [--model PATH] [--approve gated|all|none] [--plant-harmful RATE]
        [--learnings-ordering relevant|newest|helpful] [--llm-cache FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchlib import target
from local_model import runnable
from local_model import target as model_target

from amelio.llm import get_provider
from amelio.study import StudyLLM, StudyOptions, load_suite, run_study, total_steps
from amelio.study.llm import AnswerStore
from amelio.study.report import to_dict, to_markdown, write_report
from amelio.workspace.config import Settings

SUITE = Path(__file__).resolve().parent / "data" / "study"
#: The whole study's wall-clock budget on the 2-core machine, in seconds.
BUDGET_S = 20 * 60


def _comparison(data: dict[str, Any], key: str) -> dict[str, Any] | None:
    return next((c for c in data["comparisons"] if c["id"] == key), None)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--arms", default="bare,skills,told,learnings,loop")
    parser.add_argument("--approve", default="gated")
    parser.add_argument("--no-sage", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--plant-harmful",
        type=float,
        default=0.0,
        help="chance per skill and loop round of a planted harmful proposal",
    )
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=384,
        help="llm_max_tokens: answers capped so the study can fit its budget (%(default)s)",
    )
    parser.add_argument(
        "--learnings-ordering",
        choices=("relevant", "newest", "helpful"),
        default=None,
        help="the learnings block's order in every arm (default: the setting's, relevant)",
    )
    parser.add_argument("--model", type=Path, default=None, help="a GGUF file (default: qwen)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--llm-cache",
        type=Path,
        default=None,
        help="keep the model's answers in this SQLite file between runs (an ablation "
        "then sends only the requests it changes; the wall-clock target is not checked)",
    )
    args = parser.parse_args()
    model = args.model or model_target("qwen")
    if not runnable({"qwen": model}):
        return 0
    out = args.out or Path(tempfile.mkdtemp(prefix="amelio-efficacy-"))
    settings = Settings(
        workspace=out,
        llm_provider="local",
        llm_model_path=str(model),
        llm_max_tokens=args.max_tokens,
    )
    options = StudyOptions(
        rounds=args.rounds,
        arms=tuple(args.arms.split(",")),
        approve=args.approve,
        sage=not args.no_sage,
        seed=args.seed,
        plant_harmful=args.plant_harmful,
        learnings_ordering=args.learnings_ordering,
    )
    suite = load_suite(SUITE)
    store = AnswerStore(args.llm_cache) if args.llm_cache else None
    llm = StudyLLM(get_provider(settings, purpose="The efficacy benchmark"), store)
    steps, done = total_steps(suite, options), 0

    def progress(n: int, label: str) -> None:
        nonlocal done
        done += n
        if done % 20 == 0 or done == steps:
            print(f"  {done}/{steps} answers ({label}), {llm.calls} LLM calls", flush=True)

    result = run_study(
        suite,
        options,
        settings=settings,
        llm=llm,
        out=out,
        progress=progress,
        recorded=lambda so_far: write_report(so_far, out),
    )
    write_report(result, out)
    data = to_dict(result)
    print(to_markdown(data))
    print(f"Written to {out}")
    print(json.dumps({"phases": _phases(data)}, indent=1))
    if result.error:
        print(f"The study stopped: {result.error}", file=sys.stderr)
        return 1
    closed = _comparison(data, "gap-closed")
    loop = _comparison(data, "loop-skills")
    versus = _comparison(data, "loop-learnings")
    skills = _comparison(data, "skills-bare")
    if closed and closed["gapClosed"] is not None:
        target("loop closes the skills → told gap", closed["gapClosed"], 0.8, "share")
    if loop:
        target("loop − skills, 95 % interval low end", loop["ci"][0], 0.0, "pass rate")
    if versus:
        target("loop − learnings (last round)", versus["difference"], 0.0, "pass rate")
    if skills:
        target("skills − bare", skills["difference"], 0.01, "pass rate")
    if not result.stored:  # answers from an earlier run: the seconds say nothing
        target("study wall-clock", data["seconds"], BUDGET_S, "s", higher_is_better=False)
    gate = data["gate"]
    if gate["planted"]["total"] and options.approve == "gated":
        rate = gate["planted"]["falseApproveRate"]
        target("planted harmful proposals approved", rate, 0.05, "share", higher_is_better=False)
    if gate["decisions"]:
        target(
            "approved proposals that break a pinned case",
            gate["approvedWithRegressions"],
            0,
            "proposals",
            higher_is_better=False,
        )
    return 0


def _phases(data: dict[str, Any]) -> dict[str, float]:
    """Where the time went, summed over arms and rounds."""
    total: dict[str, float] = {}
    for r in data["rounds"]:
        for phase, seconds in r["phases"].items():
            total[phase] = round(total.get(phase, 0.0) + seconds, 1)
    return total


if __name__ == "__main__":
    raise SystemExit(main())
