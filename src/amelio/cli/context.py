"""Prompts and learnings: ``amelio prompt``, ``amelio learnings`` (``amelio route`` is in
:mod:`amelio.cli.route`, which starts without the database layer)."""

from __future__ import annotations

import click

from amelio.assistant import learnings
from amelio.cli._common import handle_errors, json_option, main, print_json, short, table, workspace
from amelio.workspace.projects import DEFAULT_PROJECT

project_option = click.option(
    "--project", "-p", default=DEFAULT_PROJECT, show_default=True, help="Project (tenant)."
)


@main.command("prompt")
@click.argument("message")
@project_option
@click.option("--scorer", default=None, help="Router scorer (default: setting router_scorer).")
@json_option
@click.pass_context
@handle_errors
def prompt_command(
    ctx: click.Context, message: str, project: str, scorer: str | None, as_json: bool
) -> None:
    """Print the full prompt Amelio would send for MESSAGE."""
    from amelio.assistant.prompt import build_prompt

    prompt = build_prompt(workspace(ctx), message, project=project, scorer=scorer)
    if as_json:
        print_json(prompt.to_dict())
    else:
        click.echo(prompt.text)


@main.group("learnings")
def learnings_group() -> None:
    """Rules learned from corrections, injected into prompts."""


@learnings_group.command("add")
@click.argument("rule")
@project_option
@click.option("--skill", default=None, help="Only when this skill is hinted.")
@click.option("--source", type=click.Choice(learnings.SOURCES), default="manual", show_default=True)
@json_option
@click.pass_context
@handle_errors
def learnings_add(
    ctx: click.Context, rule: str, project: str, skill: str | None, source: str, as_json: bool
) -> None:
    """Add RULE (a duplicate or near-duplicate merges into the existing learning)."""
    item, outcome = learnings.add_learning(
        workspace(ctx), rule, source=source, project=project, skill=skill
    )
    if as_json:
        print_json(item.to_dict() | {"outcome": outcome})
    else:
        click.echo(f"Learning {item.id} {outcome}: {item.rule}")


@learnings_group.command("list")
@project_option
@click.option("--skill", default=None, help="This skill's learnings and the global ones.")
@click.option("--all", "include_retired", is_flag=True, help="Include retired learnings.")
@json_option
@click.pass_context
@handle_errors
def learnings_list(
    ctx: click.Context, project: str, skill: str | None, include_retired: bool, as_json: bool
) -> None:
    """List learnings, newest first."""
    items = learnings.list_learnings(
        workspace(ctx), project=project, skill=skill, include_retired=include_retired
    )
    if as_json:
        print_json([i.to_dict() for i in items])
        return
    table(
        ["id", "source", "skill", "+", "-", "status", "rule"],
        [
            (i.id, i.source, i.skill or "-", i.helpful, i.harmful, i.status, short(i.rule, 70))
            for i in items
        ],
    )


@learnings_group.command("delete")
@click.argument("learning_id", type=int)
@project_option
@click.pass_context
@handle_errors
def learnings_delete(ctx: click.Context, learning_id: int, project: str) -> None:
    """Retire learning LEARNING_ID (kept on record, out of prompts)."""
    item = learnings.delete_learning(workspace(ctx), learning_id, project=project)
    click.echo(f"Learning {item.id} retired.")


@learnings_group.command("sync")
@project_option
@click.pass_context
@handle_errors
def learnings_sync(ctx: click.Context, project: str) -> None:
    """Read a hand-edited learnings.md back now, reporting unreadable lines."""
    ws = workspace(ctx)
    report = learnings.sync_file(ws, project)
    path = learnings.learnings_path(ws, project)
    if not report.changed:
        click.echo(f"{path}: no changes to read.")
    else:
        click.echo(f"{path}: {report.added} added, {report.retired} retired.")
    for error in report.errors:
        click.echo(f"  line {error.line}: {error.message}: {error.text.strip()}", err=True)
