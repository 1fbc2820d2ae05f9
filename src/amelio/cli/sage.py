"""Sage and benchmarks: ``amelio sage analyze``, ``amelio bench``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from amelio.cli._common import handle_errors, json_option, main, print_json, short, table, workspace
from amelio.workspace.projects import DEFAULT_PROJECT

if TYPE_CHECKING:
    from amelio.improve.bench import BenchmarkReport


def print_report(report: BenchmarkReport) -> None:
    from amelio.improve.bench import agreement_note, held_out_note, pinned_note, stopped_note

    s = report.summary
    improvement = "n/a" if report.improvement_pct is None else f"{report.improvement_pct:+.1f}%"
    click.echo(
        f"Benchmark {report.run_id} of proposal #{report.proposal_id}: {report.verdict} "
        f"({improvement}); wins {s['wins']}, losses {s['losses']}, ties {s['ties']}"
        + (f", errors {s['errors']}" if s["errors"] else "")
    )
    click.echo(
        f"mean difference {s['meanDiff']:+.2f} (CI {s['ci'][0]:+.2f} to {s['ci'][1]:+.2f},"
        f" p = {s['pValue']:.3g}); old {s['oldAvg']}, new {s['newAvg']} out of 10"
        + ("; judge only: the skill has no eval rules" if s["judgeOnly"] else "")
    )
    if s["positionConsistency"] is not None:
        click.echo(f"judge position consistency {s['positionConsistency']:.0%}")
    if s.get("scoreShare"):
        click.echo(
            f"the differences came {s['scoreShare']['rules']:.0%} from the rules and "
            f"{s['scoreShare']['judge']:.0%} from the judge"
        )
    if s.get("judgeRepeats", 1) > 1 and s.get("repeatAgreement") is not None:
        click.echo(
            f"judge: {s['judgeRepeats']} draws per order, agreeing in {s['repeatAgreement']:.0%}"
        )
    noise = s.get("noise") or {}
    if noise.get("floor") is not None:
        click.echo(
            f"noise floor {noise['floor']:+.2f}: the old version against itself, mean "
            f"{noise['meanDiff']:+.2f} (CI {noise['ci'][0]:+.2f} to {noise['ci'][1]:+.2f}) "
            f"over {noise['scenarios']} scenarios"
        )
    if s.get("floorNote"):
        click.echo(s["floorNote"])
    if agreement := agreement_note(s):
        click.echo(agreement)
    if s.get("judgeNote"):
        click.echo(s["judgeNote"])
    if s.get("stoppedEarly"):
        click.echo(stopped_note(s))
    planned = s.get("plannedScenarios", s["scenarioCount"])
    if planned < s["minScenarios"]:
        click.echo(
            f"Not significant with {planned} scenarios: even a clean sweep "
            f"cannot reach {s['confidence']:.0%}; run at least {s['minScenarios']} "
            f"(--scenarios {s['minScenarios']})."
        )
    if held_out := held_out_note(s):
        click.echo(held_out)
    pinned = s.get("pinnedCases") or {}
    if pinned.get("note"):
        click.echo(pinned["note"])
    elif pinned.get("pinned"):
        click.echo(
            f"Pinned cases: {pinned['checked']} of {pinned['pinned']} checked, "
            f"{pinned['regressed']} regressed"
        )
    if regressed := pinned_note(s):
        click.echo(regressed)
    click.echo(
        f"{s['llmCalls']} LLM calls ({s['cachedCalls']} cached), "
        f"{s['inputTokens']} + {s['outputTokens']} tokens, ${s['costUsd']}"
    )
    click.echo("")
    table(
        ["#", "source", "winner", "old", "new", "message", "judge's reason"],
        [
            (
                r["position"] + 1,
                r["source"],
                "★ new"
                if r.get("winner") == "new"
                else "★ old"
                if r.get("winner") == "old"
                else r.get("winner") or "error",
                r.get("oldScore", "-"),
                r.get("newScore", "-"),
                short(r["message"], 40),
                short(r.get("reason") or r.get("error", ""), 60),
            )
            for r in report.scenarios
        ],
    )
    regressions = [r for r in report.pinned if r["regressions"]]
    if regressions:
        click.echo("")
        table(
            ["case", "message", "rules newly failed", "new answer"],
            [
                (
                    r["caseId"],
                    short(r["message"], 40),
                    ", ".join(f"{x['ruleId']} {x['name']}" for x in r["regressions"]),
                    short(r["newOutput"], 60),
                )
                for r in regressions
            ],
        )


@main.command("bench")
@click.argument("proposal_id", type=int, required=False)
@click.option(
    "--scenarios", default=None, help="N, generated:N, replay:N or both:N (default: settings)."
)
@click.option("--no-swap", is_flag=True, help="The seed's single random A/B order.")
@click.option("--seed", type=int, default=None, help="Seed of the A/B order (reproducible).")
@click.option(
    "--model",
    default=None,
    metavar="NAME",
    help="Instead of a proposal: every skill's cases on model NAME against the current one.",
)
@click.option("--provider", "provider_name", default=None, help="With --model: NAME's provider.")
@click.option("--base-url", default=None, help="With --model: where NAME is served.")
@click.option(
    "--project", default=DEFAULT_PROJECT, show_default=True, help="With --model: the project."
)
@click.option("--skill", "skills", multiple=True, help="With --model: only these skills.")
@click.option(
    "--cases",
    type=click.IntRange(1, 500),
    default=20,
    show_default=True,
    help="With --model: pinned and 👍 cases per skill, at most.",
)
@click.option(
    "--generate",
    type=click.IntRange(0, 100),
    default=0,
    show_default=True,
    help="With --model: generated scenarios per skill too.",
)
@click.option(
    "--shadow", is_flag=True, help="With --model: compare NAME's stored shadow answers instead."
)
@click.option("--no-judge", is_flag=True, help="With --model: score by the skills' rules alone.")
@click.option(
    "--propose/--no-propose",
    default=True,
    help="With --model: Sage rewrites each regressed skill for NAME (needs an LLM).",
)
@click.option(
    "--markdown",
    "markdown_out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="With --model: also write the report as Markdown to this file.",
)
@json_option
@click.pass_context
@handle_errors
def bench(
    ctx: click.Context,
    proposal_id: int | None,
    scenarios: str | None,
    no_swap: bool,
    seed: int | None,
    model: str | None,
    provider_name: str | None,
    base_url: str | None,
    project: str,
    skills: tuple[str, ...],
    cases: int,
    generate: int,
    shadow: bool,
    no_judge: bool,
    propose: bool,
    markdown_out: Path | None,
    as_json: bool,
) -> None:
    """A/B benchmark of a proposal: old vs new skill, eval rules and an LLM judge.

    With --model NAME instead: every skill's pinned and 👍 cases answered by the
    current model and by NAME, the change per skill with its interval, most
    regressed first, and a Sage proposal for each that regresses, benchmarked on
    NAME. Exits 1 when a skill regresses, so it can gate a deployment."""
    if model is None:
        if proposal_id is None:
            raise click.UsageError("Give a PROPOSAL_ID, or --model NAME to check a model.")
        from amelio.improve.bench import run_benchmark

        report = run_benchmark(
            workspace(ctx),
            proposal_id,
            scenarios=scenarios,
            swap=False if no_swap else None,
            seed=seed,
        )
        if as_json:
            print_json(report.to_dict())
        else:
            print_report(report)
        return
    if proposal_id is not None:
        raise click.UsageError("--model checks every skill: give no PROPOSAL_ID with it.")
    from amelio.improve import model_check

    ws = workspace(ctx)
    if shadow:
        checked = model_check.compare_shadow(ws, model, project=project)
    else:
        candidate = model_check.candidate_provider(
            ws.settings, model, provider=provider_name, base_url=base_url
        )
        checked = model_check.compare_models(
            ws,
            candidate,
            candidate_name=model,
            project=project,
            skills=skills or None,
            limit=cases,
            generated=generate,
            use_judge=not no_judge,
            propose=propose,
        )
    if markdown_out is not None:
        markdown_out.write_text(checked.markdown(), encoding="utf-8")
    if as_json:
        print_json(checked.to_dict())
    else:
        click.echo(checked.markdown().rstrip())
    if checked.regressed:
        ctx.exit(1)


@main.group("sage")
def sage_group() -> None:
    """Sage: LLM-written skill updates from the evidence."""


@sage_group.command("analyze")
@click.option("--project", "-p", default=DEFAULT_PROJECT, show_default=True)
@click.option("--skill", "skills", multiple=True, help="Only these skills (repeatable).")
@click.option("--no-bench", is_flag=True, help="Do not benchmark the proposals.")
@json_option
@click.pass_context
@handle_errors
def sage_analyze(
    ctx: click.Context, project: str, skills: tuple[str, ...], no_bench: bool, as_json: bool
) -> None:
    """Rewrite the weakest skills (underperformers first) as benchmarked proposals.

    An estimate of the calls and tokens is printed (on stderr) before the first call;
    improve_budget_tokens stops the run at that many tokens."""
    from amelio.improve.budget import Budget
    from amelio.improve.sage import analyze, estimate

    ws = workspace(ctx)
    planned = estimate(ws, projects=[project], skills=skills or None, benchmark=not no_bench)
    budget = Budget(ws.settings.improve_budget_tokens)
    click.echo(planned.announce(budget.limit), err=True)
    results = analyze(
        ws, project=project, skills=skills or None, benchmark=not no_bench, budget=budget
    )
    click.echo(budget.describe(), err=True)
    if as_json:
        print_json([r.to_dict() for r in results])
        return
    if not results:
        click.echo("Nothing to analyze: no skill has been used yet.")
    for r in results:
        line = f"{r.skill}: {r.outcome}"
        if r.proposal_id:
            line += f" → proposal #{r.proposal_id}"
        if r.benchmark:
            line += (
                f", benchmark {r.benchmark.get('verdict')} ({r.benchmark.get('improvementPct')}%)"
                if "verdict" in r.benchmark
                else f", benchmark failed: {r.benchmark.get('error')}"
            )
        click.echo(line)
        if r.outcome in ("rejected", "error", "skipped"):
            click.echo(f"  {r.reason}")
