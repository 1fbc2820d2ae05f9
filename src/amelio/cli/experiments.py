"""Interleaving experiments: ``amelio experiments create``, ``list``, ``show`` and
``stop``."""

from __future__ import annotations

import click

from amelio.cli._common import (
    cli_user,
    handle_errors,
    json_option,
    main,
    print_json,
    table,
    workspace,
)
from amelio.search import experiments as ex
from amelio.search.interleave import METHODS, MIN_SESSIONS


@main.group("experiments")
def experiments_group() -> None:
    """Interleaving experiments: two rankers compared on a share of live sessions."""


@experiments_group.command("create")
@click.argument("name")
@click.option("--a", "a", required=True, help="Ranker A: PROFILE[:key=value,...], e.g. bm25.")
@click.option(
    "--b", "b", required=True, help="Ranker B, e.g. hybrid_with_feedback:beta=1.5,exploration=0."
)
@click.option("--project", default="default", show_default=True, help="Whose searches.")
@click.option(
    "--share",
    type=float,
    default=0.2,
    show_default=True,
    help="The part of sessions served the interleaved list.",
)
@click.option("--method", type=click.Choice(METHODS), default="team-draft", show_default=True)
@json_option
@click.pass_context
@handle_errors
def create(
    ctx: click.Context,
    name: str,
    a: str,
    b: str,
    project: str,
    share: float,
    method: str,
    as_json: bool,
) -> None:
    """Start interleaving A and B for a share of PROJECT's sessions (one experiment
    runs per project; a session stays in or out of it)."""
    made = ex.create_experiment(
        workspace(ctx), name, a, b, project=project, share=share, method=method, by=cli_user()
    )
    if as_json:
        print_json(made.to_dict())
        return
    click.echo(
        f"Experiment {made.name!r} runs on project {made.project!r}: {made.share:.0%} of "
        f"sessions see {made.a.label()} (A) and {made.b.label()} (B) interleaved "
        f"({made.method}). `amelio experiments show {made.name}` gives the verdict."
    )


@experiments_group.command("list")
@click.option("--project", default=None, help="Only this project's experiments.")
@click.option("--status", type=click.Choice(ex.STATUSES), default=None, help="Only this status.")
@json_option
@click.pass_context
@handle_errors
def list_(ctx: click.Context, project: str | None, status: str | None, as_json: bool) -> None:
    """Experiments, newest first."""
    found = ex.list_experiments(workspace(ctx), project=project, status=status)
    if as_json:
        print_json([e.to_dict() for e in found])
        return
    if not found:
        click.echo("No experiments: `amelio experiments create NAME --a P --b Q` starts one.")
        return
    table(
        ["name", "project", "A", "B", "share", "method", "status"],
        [
            (e.name, e.project, e.a.label(), e.b.label(), f"{e.share:.0%}", e.method, e.status)
            for e in found
        ],
    )


def _say_results(r: ex.ExperimentResults) -> None:
    e, p = r.experiment, r.preference
    click.echo(f"{e.name} ({e.status}, project {e.project}, {e.method}, {e.share:.0%} of sessions)")
    click.echo(f"  A: {e.a.label()}")
    click.echo(f"  B: {e.b.label()}")
    click.echo(
        f"  {r.impressions} responses in {r.sessions} sessions; "
        f"{r.competitive_sessions} sessions competitive ({r.competitive_share:.0%}: the "
        "two lists differed)"
    )
    click.echo(f"  credit: A {r.credit_a:g}, B {r.credit_b:g} (dwell-weighted clicks; bounces 0)")
    low, high = p.interval
    click.echo(
        f"  {p.sessions} sessions with a credited click: A won {p.wins_a}, B won "
        f"{p.wins_b}, {p.ties} tied"
    )
    click.echo(f"  margin {p.margin:+.3f} (95 % {low:+.3f} to {high:+.3f})")
    if p.verdict == "undecided":
        why = (
            f"needs {MIN_SESSIONS} sessions with a credited click"
            if p.sessions < MIN_SESSIONS
            else "the interval includes 0"
        )
        click.echo(f"  verdict: undecided ({why})")
    else:
        label = e.a.label() if p.verdict == "A" else e.b.label()
        click.echo(f"  verdict: {p.verdict} is preferred ({label})")


@experiments_group.command("show")
@click.argument("name")
@json_option
@click.pass_context
@handle_errors
def show(ctx: click.Context, name: str, as_json: bool) -> None:
    """One experiment's results: credit, preference margin with its interval, the
    share of competitive sessions, and the verdict once the interval excludes 0."""
    found = ex.experiment_results(workspace(ctx), name)
    if as_json:
        print_json(found.to_dict())
        return
    _say_results(found)


@experiments_group.command("stop")
@click.argument("name")
@json_option
@click.pass_context
@handle_errors
def stop(ctx: click.Context, name: str, as_json: bool) -> None:
    """Stop serving NAME (within a second in running servers); its results stay."""
    ws = workspace(ctx)
    ex.stop_experiment(ws, name)
    found = ex.experiment_results(ws, name)
    if as_json:
        print_json(found.to_dict())
        return
    _say_results(found)
