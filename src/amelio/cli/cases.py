"""Pinned cases: ``amelio cases pin``, ``list`` and ``unpin``."""

from __future__ import annotations

import click

from amelio.cli._common import (
    cli_user,
    handle_errors,
    json_option,
    main,
    print_json,
    project_option,
    short,
    table,
    workspace,
)
from amelio.workspace.projects import DEFAULT_PROJECT


@main.group("cases")
def cases_group() -> None:
    """Pinned cases: answers a skill must keep passing when a proposal changes it."""


@cases_group.command("pin")
@click.argument("interaction_id", type=click.IntRange(1, 2**31 - 1))
@click.option("--note", default=None, help="Why this case matters (shown with it).")
@json_option
@click.pass_context
@handle_errors
def pin(ctx: click.Context, interaction_id: int, note: str | None, as_json: bool) -> None:
    """Pin interaction INTERACTION_ID for the skill that answered it: every benchmark of
    that skill re-answers its message, and a proposal under which it newly fails one of
    the skill's rules cannot pass."""
    from amelio.assistant import cases

    case, pinned = cases.pin_case(workspace(ctx), interaction_id, note=note, author=cli_user())
    if as_json:
        print_json(case.to_dict() | {"created": pinned})
        return
    what = "Pinned" if pinned else "Already pinned:"
    click.echo(
        f"{what} case {case.id} for {case.skill} (project {case.project}): "
        f"{short(case.message, 60)}"
    )


@cases_group.command("list")
@click.option("--skill", default=None, help="Only this skill's cases.")
@project_option
@click.option("--unpinned", is_flag=True, help="Also the cases unpinned since.")
@json_option
@click.pass_context
@handle_errors
def list_(
    ctx: click.Context, skill: str | None, project: str | None, unpinned: bool, as_json: bool
) -> None:
    """The pinned cases of a project, newest first."""
    from amelio.assistant import cases

    project = project or DEFAULT_PROJECT
    found = cases.list_cases(workspace(ctx), project=project, skill=skill, unpinned=unpinned)
    if as_json:
        print_json({"project": project, "skill": skill, "cases": [c.to_dict() for c in found]})
        return
    if not found:
        click.echo(
            f"No pinned cases in project {project}"
            + (f" for {skill}" if skill else "")
            + ": a 👍 pins an answer (pin_on_thumbs_up), or `amelio cases pin INTERACTION_ID`."
        )
        return
    headers = ["id", "skill", "source", "interaction", "message", "correction or note"]
    if unpinned:
        headers.append("unpinned")
    rows = []
    for c in found:
        row = [
            c.id,
            c.skill,
            c.source,
            c.interaction_id,
            short(c.message, 40),
            short(c.correction or c.note or "-", 40),
        ]
        if unpinned:
            row.append(f"{c.unpinned_at:%Y-%m-%d %H:%M}" if c.unpinned_at else "-")
        rows.append(row)
    table(headers, rows)


@cases_group.command("unpin")
@click.argument("case_id", type=click.IntRange(1, 2**31 - 1))
@project_option
@json_option
@click.pass_context
@handle_errors
def unpin(ctx: click.Context, case_id: int, project: str | None, as_json: bool) -> None:
    """Stop checking case CASE_ID; it stays listed with --unpinned, and a later 👍 on the
    same answer does not pin it again."""
    from amelio.assistant import cases

    case = cases.unpin_case(
        workspace(ctx), case_id, project=project or DEFAULT_PROJECT, author=cli_user()
    )
    if as_json:
        print_json(case.to_dict())
        return
    click.echo(f"Unpinned case {case.id} of {case.skill}: {short(case.message, 60)}")
