"""What a study writes: ``study.json``, ``study.md``, ``study.png`` and
``answers.jsonl`` (every test answer with its score, to read what changed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from amelio.study.runner import StudyResult
from amelio.study.stats import estimate, paired

__all__ = [
    "comparisons",
    "gate_figures",
    "judge_figures",
    "to_dict",
    "to_markdown",
    "write_report",
]


def _ci(low_high: tuple[float, float]) -> list[float]:
    return [round(low_high[0], 4), round(low_high[1], 4)]


def _round_dict(result: StudyResult, r: Any) -> dict[str, Any]:
    seed = result.options.seed
    rate, ci = estimate(list(r.scores.values()), seed)
    all_pass, all_ci = estimate(list(r.all_pass.values()), seed)
    return {
        "arm": r.arm,
        "round": r.round,
        "passRate": round(rate, 4),
        "ci": _ci(ci),
        "allPass": round(all_pass, 4),
        "allPassCi": _ci(all_ci),
        "tasks": len(r.scores),
        "proposals": {"filed": r.filed, "approved": r.approved},
        "learnings": r.learnings,
        "llmCalls": r.llm_calls,
        "seconds": r.seconds,
        "phases": r.phases,
    }


def comparisons(result: StudyResult) -> list[dict[str, Any]]:
    """The paired differences the study is read by, each over the same test tasks;
    ``id`` names each for code (``what`` is for people)."""
    seed = result.options.seed
    first = {arm: result.round_of(arm, 0) for arm in result.options.arms}
    last = {arm: result.last(arm) for arm in result.options.arms}
    skills, told = first.get("skills"), first.get("told")
    wanted: list[tuple[str, str, Any, Any]] = [
        ("skills-bare", "skills − bare", skills, first.get("bare")),
        ("told-skills", "told − skills", told, skills),
    ]
    for arm in ("learnings", "loop"):
        end = last.get(arm)
        label = f"{arm} r{end.round if end else '?'} − skills"
        wanted.append((f"{arm}-skills", label, end, skills))
    wanted.append(
        ("loop-learnings", "loop − learnings (last round)", last.get("loop"), last.get("learnings"))
    )
    out: list[dict[str, Any]] = []
    means: dict[str, float] = {}
    for key, label, a, b in wanted:
        if a is None or b is None:
            continue
        diff, ci = paired(a.scores, b.scores, seed)
        means[key] = diff
        out.append(
            {
                "id": key,
                "what": label,
                "a": [a.arm, a.round],
                "b": [b.arm, b.round],
                "difference": round(diff, 4),
                "ci": _ci(ci),
                "above0": ci[0] > 0,
            }
        )
    if "told-skills" in means and "loop-skills" in means:
        gap = means["told-skills"]
        out.append(
            {
                "id": "gap-closed",
                "what": "share of the skills → told gap loop closed",
                "gapClosed": round(means["loop-skills"] / gap, 4) if gap > 0 else None,
            }
        )
    return out


def judge_figures(result: StudyResult) -> dict[str, Any]:
    """How far the benchmark's judge can be trusted, on the pairs it judged:
    ``agreementWithOracle`` over the pairs where the oracle prefers one side (a
    judge tie counts as not agreeing), ``positionConsistency`` over the pairs
    judged in both orders (a tie in both orders is consistent, so ``judgePrefers``
    says how often it preferred a side at all: a judge that always ties is
    consistent and says nothing)."""
    decided = [p for p in result.pairs if p.oracle != 0]
    swapped = [p for p in result.pairs if p.consistent is not None]
    return {
        "pairs": len(result.pairs),
        "oraclePrefers": len(decided),
        "judgePrefers": sum(p.judge != 0 for p in result.pairs),
        "agreementWithOracle": (
            round(sum(p.judge == p.oracle for p in decided) / len(decided), 4) if decided else None
        ),
        "positionConsistency": (
            round(sum(bool(p.consistent) for p in swapped) / len(swapped), 4) if swapped else None
        ),
    }


def _rate(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def gate_figures(result: StudyResult) -> dict[str, Any]:
    """How well the approval gate told good proposals from bad, in the loop arm.

    Planted proposals are harmful by construction: each one approved is a false
    approval. The loop's own proposals are judged by the oracle on their benchmark's
    scenarios: approving one the oracle finds worse is a false approval, rejecting
    one it finds better a false rejection (one it cannot tell apart counts in
    neither rate)."""
    planted = [d for d in result.decisions if d.planted]
    own = [d for d in result.decisions if not d.planted]
    worse = [d for d in own if d.oracle < 0]
    better = [d for d in own if d.oracle > 0]
    by_kind: dict[str, dict[str, int]] = {}
    for d in planted:
        counts = by_kind.setdefault(
            str(d.planted), {"total": 0, "blocked": 0, "rejected": 0, "approved": 0}
        )
        counts["total"] += 1
        counts[d.outcome] += 1
    return {
        "planted": {
            "total": len(planted),
            "blocked": sum(d.outcome == "blocked" for d in planted),
            "rejected": sum(d.outcome == "rejected" for d in planted),
            "approved": sum(d.outcome == "approved" for d in planted),
            "falseApproveRate": _rate(sum(d.outcome == "approved" for d in planted), len(planted)),
            "byKind": by_kind,
        },
        "own": {
            "total": len(own),
            "approved": sum(d.outcome == "approved" for d in own),
            "oracleBetter": len(better),
            "oracleWorse": len(worse),
            "falseApproveRate": _rate(sum(d.outcome == "approved" for d in worse), len(worse)),
            "falseRejectRate": _rate(sum(d.outcome == "rejected" for d in better), len(better)),
        },
        # Approved although the benchmark found pinned cases it breaks (the target: 0).
        "approvedWithRegressions": sum(
            d.outcome == "approved" and d.regressed > 0 for d in result.decisions
        ),
        "decisions": [
            {
                "round": d.round,
                "skill": d.skill,
                "proposalId": d.proposal_id,
                "planted": d.planted,
                "outcome": d.outcome,
                "verdict": d.verdict,
                "oracle": d.oracle,
                "regressed": d.regressed,
                "reason": d.reason,
            }
            for d in result.decisions
        ],
    }


def to_dict(result: StudyResult) -> dict[str, Any]:
    return {
        "suite": result.suite,
        "settings": result.options.to_dict() | {"model": result.model},
        "rounds": [_round_dict(result, r) for r in result.rounds],
        "comparisons": comparisons(result),
        "judge": judge_figures(result),
        "gate": gate_figures(result),
        "llm": {
            "calls": result.llm_calls,
            "reused": result.reused,
            "stored": result.stored,
            "seconds": result.llm_seconds,
            "inputTokens": result.input_tokens,
            "outputTokens": result.output_tokens,
        },
        "seconds": result.seconds,
        "error": result.error,
    }


def to_markdown(data: dict[str, Any]) -> str:
    lines = [
        f"# Study of `{data['suite']}` with {data['settings']['model'] or 'the configured model'}",
        "",
        "| arm | round | pass rate | 95 % interval | all pass | proposals filed / approved "
        "| learnings | LLM calls | seconds |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in data["rounds"]:
        lo, hi = r["ci"]
        lines.append(
            f"| {r['arm']} | {r['round']} | {r['passRate']:.3f} | {lo:.3f}–{hi:.3f} "
            f"| {r['allPass']:.3f} | {r['proposals']['filed']} / {r['proposals']['approved']} "
            f"| {r['learnings']} | {r['llmCalls']} | {r['seconds']:.0f} |"
        )
    lines += ["", "| paired difference | value | 95 % interval |", "|---|---|---|"]
    for c in data["comparisons"]:
        if "gapClosed" in c:
            closed = c["gapClosed"]
            lines.append(f"| {c['what']} | {'n/a' if closed is None else f'{closed:.2f}'} | |")
        else:
            lo, hi = c["ci"]
            lines.append(f"| {c['what']} | {c['difference']:+.3f} | {lo:+.3f} – {hi:+.3f} |")
    judge = data["judge"]
    lines += [
        "",
        f"Judge: {judge['pairs']} benchmark pairs, a side preferred in "
        f"{judge['judgePrefers']}; agreement with the oracle "
        f"{judge['agreementWithOracle']} on the {judge['oraclePrefers']} where the oracle "
        f"prefers a side; position consistency {judge['positionConsistency']}.",
        f"LLM: {data['llm']['calls']} calls ({data['llm']['seconds']:.0f} s), "
        f"{data['llm']['inputTokens']} tokens read and {data['llm']['outputTokens']} "
        f"written; {data['llm']['reused']} identical requests answered once; "
        f"the study took {data['seconds']:.0f} s.",
    ]
    if data["llm"].get("stored"):
        lines.append(
            f"{data['llm']['stored']} answers came from the answer store (an earlier "
            "study's): the seconds above are not what a cold run costs."
        )
    gate = data["gate"]
    own, planted = gate["own"], gate["planted"]
    if own["total"] or planted["total"]:
        lines.append(
            f"Gate: the loop's own {own['total']} proposals, {own['approved']} approved; the "
            f"oracle found {own['oracleBetter']} better and {own['oracleWorse']} worse "
            f"(false approvals {own['falseApproveRate']}, false rejections "
            f"{own['falseRejectRate']})."
        )
    if planted["total"]:
        lines.append(
            f"Planted harmful proposals: {planted['total']}, {planted['blocked']} stopped at "
            f"filing, {planted['rejected']} rejected, {planted['approved']} approved "
            f"(false approvals {planted['falseApproveRate']})."
        )
    if data["error"]:
        lines += ["", f"**Stopped:** {data['error']}"]
    return "\n".join(lines) + "\n"


#: One colour per arm, the same in every study (a level line must not look like another).
_COLORS = {
    "bare": "tab:gray",
    "skills": "tab:purple",
    "told": "tab:green",
    "learnings": "tab:blue",
    "loop": "tab:orange",
}


def _plot(data: dict[str, Any], path: Path) -> Path | None:
    try:
        import matplotlib  # type: ignore[import-not-found,unused-ignore]

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.8))
    arms = list(dict.fromkeys(r["arm"] for r in data["rounds"]))
    last = max((r["round"] for r in data["rounds"]), default=0)
    for arm in arms:
        rows = [r for r in data["rounds"] if r["arm"] == arm]
        xs = [r["round"] for r in rows]
        ys = [r["passRate"] for r in rows]
        errors = [
            [r["passRate"] - r["ci"][0] for r in rows],
            [r["ci"][1] - r["passRate"] for r in rows],
        ]
        if len(rows) == 1 and last > 0:  # an arm without rounds: a level to read against
            ax.axhline(
                ys[0], linestyle=":", linewidth=1.2, color=_COLORS[arm], label=f"{arm} (round 0)"
            )
            continue
        ax.errorbar(xs, ys, yerr=errors, marker="o", capsize=4, color=_COLORS[arm], label=arm)
    ax.set_xlabel("round (one cycle of feedback over the train tasks)")
    ax.set_ylabel("held-out pass rate (oracle rules)")
    ax.set_ylim(0, 1)
    ax.set_xticks(range(last + 1))
    ax.legend(loc="lower right")
    ax.set_title(f"{data['suite']}: {data['settings']['model'] or 'model'}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_report(result: StudyResult, out: Path) -> list[Path]:
    """study.json, study.md, answers.jsonl and, with matplotlib, study.png."""
    data = to_dict(result)
    written = [out / "study.json", out / "study.md", out / "answers.jsonl"]
    written[0].write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    written[1].write_text(to_markdown(data), encoding="utf-8")
    with written[2].open("w", encoding="utf-8") as f:
        for r in result.rounds:
            for task, answer in r.answers.items():
                row = {"arm": r.arm, "round": r.round, "task": task, "score": r.scores[task]}
                f.write(json.dumps(row | {"answer": answer}, ensure_ascii=False) + "\n")
    png = _plot(data, out / "study.png")
    if png is not None:
        written.append(png)
    return written
