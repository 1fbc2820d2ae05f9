"""Before changing models, on real ones: the model check across the study's
development suite, Qwen2.5-Coder-0.5B-Instruct (the current model) against Gemma 3
270M base (the candidate), both run in process by llama.cpp.

The workspace holds the suite's six skills, each carrying its oracle rules as its
own eval rules (a deployment whose rules already say what its users want), and each
skill's train tasks pinned as cases (logged and pinned by hand: pinning a message
needs no answer). Then :func:`amelio.improve.model_check.compare_models`, what
``amelio bench --model`` runs, scores each skill by its rules on both models (no
judge: a 0.5B judge says little), at most ``--cases`` cases a skill, and Sage (the
current model) rewrites each regressed skill for the candidate; when Sage's answer
is not a whole skill (a 0.5B model's often is not), a template proposal stands in.

Whether a rewrite wins back part of the loss is measured here, not by a
benchmark run (its judge would be the same 0.5B model): the candidate answers the
same cases with the proposed rulebook, and the report gives the share of the
skill's rules it passes with the old rulebook and with the proposal's, per skill
(on the same cases the loss was measured on).

It needs the models and the runtime, which nothing fetches at test time:

    python benchmarks/local_model.py fetch qwen
    python benchmarks/local_model.py fetch gemma
    pip install 'amelio[local]'

Without them it says so and exits 0.

    python benchmarks/model_switch.py [--cases 5] [--max-tokens 256]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from benchlib import Clock
from local_model import runnable
from local_model import target as model_path

SUITE = Path(__file__).resolve().parent / "data" / "study"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--cases", type=int, default=5, help="pinned cases per skill, at most")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument(
        "--out", type=Path, default=None, help="keep the workspace here (its llm_cache)"
    )
    args = parser.parse_args()
    current, candidate_file = model_path("qwen"), model_path("gemma")
    if not runnable({"qwen": current, "gemma": candidate_file}):
        return 0
    os.environ |= {
        "AMELIO_LLM_PROVIDER": "local",
        "AMELIO_LLM_MODEL_PATH": str(current),
        "AMELIO_LLM_MAX_TOKENS": str(args.max_tokens),
    }
    from amelio import skills
    from amelio.assistant.cases import list_cases, pin_case
    from amelio.assistant.respond import answer_with, log_exchange
    from amelio.improve import model_check
    from amelio.improve.proposals import get_proposal
    from amelio.llm.cache import CachedProvider
    from amelio.study import load_suite
    from amelio.workspace.folder import init_workspace

    suite = load_suite(SUITE)
    with tempfile.TemporaryDirectory() as tmp:
        ws, _ = init_workspace(args.out or Path(tmp) / "ws")
        try:
            skills.import_skills(ws.engine, suite.skills_dir)
            for name in suite.skills:
                skills.update_skill(
                    ws.engine,
                    name,
                    author="bench",
                    reason="the oracle's rules as the skill's own",
                    rules=[r.to_dict() for r in suite.oracle[name]],
                )
            for task in suite.tasks:
                if task.split == "train":
                    logged = log_exchange(
                        ws, task.message, "-", project="default", skills=[task.skill]
                    )
                    pin_case(ws, logged.interaction_id, note=task.id)
            candidate = model_check.candidate_provider(ws.settings, str(candidate_file))
            with Clock() as clock:
                report = model_check.compare_models(
                    ws,
                    candidate,
                    candidate_name=candidate_file.stem,
                    project="default",
                    limit=args.cases,
                    use_judge=False,
                    propose=True,
                    bench=False,
                )
            print(report.markdown())
            print(f"model check: {clock}")
            runner = CachedProvider(candidate, ws.engine)
            print(
                f"\n{'regressed skill':<16} {'current':>8} {'candidate':>10} "
                f"{'with proposal':>14} {'loss won back':>14}  note"
            )
            for delta in report.regressed:
                if delta.proposal_id is None:
                    print(
                        f"{delta.skill:<16} {delta.pass_current:>8.0%} "
                        f"{delta.pass_candidate:>10.0%} {'-':>14} {'-':>14}  {delta.note}"
                    )
                    continue
                proposal = get_proposal(ws, delta.proposal_id)
                cases = list_cases(ws, skill=delta.skill)[: args.cases]
                shares = []
                for case in cases:
                    _, checked = answer_with(
                        ws,
                        case.message,
                        skill=delta.skill,
                        content=proposal.proposed_content,
                        provider=runner,
                    )
                    results = checked.results
                    shares.append(sum(r.passed for r in results) / len(results))
                rewritten = statistics.fmean(shares)
                lost = delta.pass_current - delta.pass_candidate
                back = (rewritten - delta.pass_candidate) / lost if lost > 0 else 0.0
                print(
                    f"{delta.skill:<16} {delta.pass_current:>8.0%} {delta.pass_candidate:>10.0%} "
                    f"{rewritten:>14.0%} {back:>14.0%}  #{proposal.id} ({proposal.proposed_by})"
                )
            print(f"\ntotal: {clock}")
        finally:
            ws.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
