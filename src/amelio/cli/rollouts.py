"""Canary rollouts: ``amelio rollouts list``, ``show``, ``check``, ``pause``, ``promote``
and ``abort``."""

from __future__ import annotations

from typing import Any

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
from amelio.improve import rollouts as ro


@main.group("rollouts")
def rollouts_group() -> None:
    """Canary rollouts of approved versions (amelio proposals approve ID --canary PCT)."""


def _arms(check: dict[str, Any] | None) -> str:
    if not check:
        return "not checked yet"
    new, old = check["arms"]["canary"], check["arms"]["control"]

    def rate(arm: dict[str, int]) -> str:
        return f"{arm['down'] / arm['answers']:.1%}" if arm["answers"] else "-"

    return (
        f"new {new['answers']} answers, 👎 {rate(new)}; "
        f"old {old['answers']} answers, 👎 {rate(old)}"
    )


@rollouts_group.command("list")
@click.option("--project", default=None, help="Only rollouts of this project's skills.")
@click.option("--status", type=click.Choice(ro.STATUSES), default=None, help="Only this status.")
@json_option
@click.pass_context
@handle_errors
def list_(ctx: click.Context, project: str | None, status: str | None, as_json: bool) -> None:
    """Rollouts, newest first."""
    found = ro.list_rollouts(workspace(ctx), project=project, status=status)
    if as_json:
        print_json([r.to_dict() for r in found])
        return
    if not found:
        click.echo("No rollouts: amelio proposals approve ID --canary PCT starts one.")
        return
    table(
        ["id", "skill", "versions", "share", "status", "figures"],
        [
            (
                r.id,
                r.skill,
                f"v{r.from_version} → v{r.to_version}",
                f"{r.percent} %",
                r.status,
                _arms(r.last_check),
            )
            for r in found
        ],
    )


@rollouts_group.command("show")
@click.argument("rollout_id", type=click.IntRange(1, 2**31 - 1))
@json_option
@click.pass_context
@handle_errors
def show(ctx: click.Context, rollout_id: int, as_json: bool) -> None:
    """A rollout: its stage, each arm's figures and tests, and its history."""
    r = ro.get_rollout(workspace(ctx), rollout_id)
    if as_json:
        print_json(r.to_dict())
        return
    click.echo(
        f"Rollout {r.id} of {r.skill} ({r.project}): v{r.from_version} → v{r.to_version}, "
        f"{r.percent} % on the new version, {r.status}"
    )
    if r.reason:
        click.echo(f"  why: {r.reason}")
    check = r.last_check
    if check:
        for name, arm in (("new", check["arms"]["canary"]), ("old", check["arms"]["control"])):
            click.echo(
                f"  {name}: {arm['answers']} answers, 👎 {arm['down']}, Fix It {arm['fixit']}, "
                f"failed a rule {arm['failed']}"
            )
        for metric, test in check["tests"].items():
            if test["interval"] is None:
                click.echo(f"  {metric}: too few answers to test yet")
                continue
            low, high = test["interval"]
            click.echo(
                f"  {metric}: new − old {test['diff'] * 100:+.1f} points, always-valid interval "
                f"{low * 100:+.1f} to {high * 100:+.1f}, Λ {test['lambda']:.3g}"
                + (" (crossed)" if test["crossed"] else "")
            )
        click.echo(f"  this stage: {check.get('stageAnswers', 0)} answers of the new version")
    for event in r.history:
        click.echo(f"  {event['at'][:19]} {event['percent']} % {event['status']}: {event['why']}")


@rollouts_group.command("check")
@click.option("--project", default=None, help="Only rollouts of this project's skills.")
@json_option
@click.pass_context
@handle_errors
def check(ctx: click.Context, project: str | None, as_json: bool) -> None:
    """Test every running rollout now (amelio serve does it at rollouts_schedule):
    pause on a regression, move on after a stage that passed."""
    done = ro.check_rollouts(workspace(ctx), project=project)
    if as_json:
        print_json([c.to_dict() for c in done])
        return
    if not done:
        click.echo("No running rollouts.")
    for c in done:
        click.echo(f"Rollout {c.rollout_id}: {c.action}" + (f" ({c.reason})" if c.reason else ""))


@rollouts_group.command("pause")
@click.argument("rollout_id", type=click.IntRange(1, 2**31 - 1))
@click.option("--reason", "-m", default=None)
@click.pass_context
@handle_errors
def pause(ctx: click.Context, rollout_id: int, reason: str | None) -> None:
    """Put everyone back on the old version (until it is aborted)."""
    r = ro.pause_rollout(workspace(ctx), rollout_id, actor=cli_user(), reason=reason)
    click.echo(f"Rollout {r.id} paused: everyone is on v{r.from_version}.")


@rollouts_group.command("promote")
@click.argument("rollout_id", type=click.IntRange(1, 2**31 - 1))
@click.pass_context
@handle_errors
def promote(ctx: click.Context, rollout_id: int) -> None:
    """Move a running rollout to its next stage (its share → 50 % → 100 %)."""
    r = ro.promote_rollout(workspace(ctx), rollout_id, actor=cli_user())
    if r.status == "done":
        click.echo(f"Rollout {r.id} done: everyone is on v{r.to_version}.")
    else:
        click.echo(f"Rollout {r.id} promoted: {r.percent} % on v{r.to_version}.")


@rollouts_group.command("abort")
@click.argument("rollout_id", type=click.IntRange(1, 2**31 - 1))
@click.option("--reason", "-m", default=None)
@click.pass_context
@handle_errors
def abort(ctx: click.Context, rollout_id: int, reason: str | None) -> None:
    """End the rollout and roll the skill back to the old version."""
    r = ro.abort_rollout(workspace(ctx), rollout_id, actor=cli_user(), reason=reason)
    click.echo(f"Rollout {r.id} aborted: {r.skill} is back on v{r.from_version}'s content.")
