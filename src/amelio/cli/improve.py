"""The nightly loop and proposals: ``amelio improve``, ``amelio proposals``."""

from __future__ import annotations

from typing import IO

import click

from amelio.cli._common import (
    cli_user,
    handle_errors,
    json_option,
    main,
    print_json,
    short,
    table,
    workspace,
)
from amelio.improve import proposals as props
from amelio.workspace.projects import DEFAULT_PROJECT


@main.command("improve")
@click.option("--project", "-p", "project", default=None, help="One project.")
@click.option("--all", "all_projects", is_flag=True, help="Every project (the default).")
@click.option("--dry-run", is_flag=True, help="Report what would be proposed; write nothing.")
@click.option("--no-notify", is_flag=True, help="Do not send the report to the notifiers.")
@click.option(
    "--sage",
    "use_sage",
    is_flag=True,
    help="Sage (the LLM) writes the proposals instead of templates; each is benchmarked.",
)
@json_option
@click.pass_context
@handle_errors
def improve(
    ctx: click.Context,
    project: str | None,
    all_projects: bool,
    dry_run: bool,
    no_notify: bool,
    use_sage: bool,
    as_json: bool,
) -> None:
    """Find underperforming skills and propose improvements (run it nightly)."""
    from amelio.improve.nightly import run_improve

    if project and all_projects:
        raise click.UsageError("Give --project P or --all, not both.")
    ws = workspace(ctx)
    if use_sage:
        from amelio.improve.budget import Budget
        from amelio.improve.sage import estimate, improve_with_sage
        from amelio.workspace.projects import list_projects

        names = [project] if project else [p.name for p in list_projects(ws.engine)]
        planned = estimate(ws, projects=names, underperformers_only=True)
        budget = Budget(ws.settings.improve_budget_tokens)
        click.echo(planned.announce(budget.limit), err=True)
        report = improve_with_sage(
            ws,
            projects=[project] if project else None,
            dry_run=dry_run,
            notify=not no_notify,
            budget=budget,
        )
        click.echo(budget.describe(), err=True)
    else:
        click.echo("Estimate: no LLM calls (template proposals).", err=True)
        report = run_improve(
            ws, projects=[project] if project else None, dry_run=dry_run, notify=not no_notify
        )
    if as_json:
        print_json(report.to_dict() | {"files": report.files})
        return
    click.echo(report.markdown().rstrip())
    for path in report.files:
        click.echo(f"Report: {path}", err=True)
    for d in report.deliveries:
        state = "sent" if d["ok"] else f"FAILED ({d['error']})"
        click.echo(f"Notifier {d['notifier']}: {state}", err=True)


@main.group("proposals")
def proposals_group() -> None:
    """Review proposed skill changes: list, show, diff, approve, reject."""


@proposals_group.command("list")
@click.option("--status", type=click.Choice(props.STATUSES), default=None)
@click.option("--skill", default=None)
@click.option("--project", "-p", default=None)
@click.option(
    "--scope",
    type=click.Choice(props.SCOPES),
    default=None,
    help="new: proposals that create a skill (the generator's).",
)
@json_option
@click.pass_context
@handle_errors
def proposals_list(
    ctx: click.Context,
    status: str | None,
    skill: str | None,
    project: str | None,
    scope: str | None,
    as_json: bool,
) -> None:
    """Proposals, newest first."""
    found = props.list_proposals(
        workspace(ctx), status=status, skill=skill, project=project, scope=scope
    )
    if as_json:
        print_json([p.to_dict() for p in found])
        return
    table(
        ["id", "skill", "project", "status", "by", "base", "rationale"],
        [
            (
                p.id,
                p.skill,
                p.project,
                p.status,
                p.proposed_by,
                "new" if p.scope == "new" else f"v{p.base_version}",
                short(p.rationale, 60),
            )
            for p in found
        ],
    )


@proposals_group.command("show")
@click.argument("proposal_id", type=int)
@json_option
@click.pass_context
@handle_errors
def proposals_show(ctx: click.Context, proposal_id: int, as_json: bool) -> None:
    """A proposal: rationale, evidence and the proposed content."""
    p = props.get_proposal(workspace(ctx), proposal_id)
    if as_json:
        print_json(p.to_dict(with_content=True))
        return
    click.echo(f"Proposal #{p.id} for {p.skill} ({p.scope}, project {p.project}) — {p.status}")
    base = "as a new skill" if p.scope == "new" else f"on v{p.base_version}"
    click.echo(f"by {p.proposed_by} ({p.author}) {base}, {p.created_at:%Y-%m-%d}")
    if p.new_skill is not None:
        click.echo(f"description: {p.new_skill.get('description', '')}")
        click.echo(
            f"triggers: {', '.join(p.new_skill.get('triggers', []))}; keywords: "
            f"{', '.join(p.new_skill.get('keywords', []))}"
        )
    if p.decided_by:
        click.echo(f"decided by {p.decided_by}: {p.decision_reason or '-'}")
    for flag in props.review_flags(p):
        click.echo(f"! {flag}")
    click.echo(f"\n{p.rationale}\n")
    click.echo(p.proposed_content.rstrip())


@proposals_group.command("diff")
@click.argument("proposal_id", type=int)
@click.pass_context
@handle_errors
def proposals_diff(ctx: click.Context, proposal_id: int) -> None:
    """The unified diff a proposal would apply."""
    click.echo(props.get_proposal(workspace(ctx), proposal_id).diff().rstrip())


@proposals_group.command("approve")
@click.argument("proposal_id", type=int)
@click.option("--reason", "-m", default=None)
@click.option(
    "--canary",
    type=int,
    default=None,
    metavar="PCT",
    help="Live for PCT % of conversations first (1-99); amelio rollouts follows it.",
)
@click.pass_context
@handle_errors
def proposals_approve(
    ctx: click.Context, proposal_id: int, reason: str | None, canary: int | None
) -> None:
    """Make a proposal the skill's new version (for a share of conversations first,
    with --canary)."""
    p = props.approve_proposal(
        workspace(ctx), proposal_id, actor=cli_user(), reason=reason, canary=canary
    )
    if canary is None:
        click.echo(f"Approved #{p.id}: {p.skill} is now v{p.result_version}.")
        return
    click.echo(
        f"Approved #{p.id}: {p.skill} v{p.result_version} is live for {canary} % of "
        f"conversations, v{p.base_version} for the rest: amelio rollouts list"
    )


@proposals_group.command("reject")
@click.argument("proposal_id", type=int)
@click.option("--reason", "-m", default=None)
@click.pass_context
@handle_errors
def proposals_reject(ctx: click.Context, proposal_id: int, reason: str | None) -> None:
    """Reject a proposal (kept on record)."""
    p = props.reject_proposal(workspace(ctx), proposal_id, actor=cli_user(), reason=reason)
    click.echo(f"Rejected #{p.id} ({p.skill}).")


@proposals_group.command("create")
@click.argument("skill")
@click.argument("content_file", type=click.File("r", encoding="utf-8"))
@click.option("--rationale", "-m", required=True, help="Why this change.")
@click.option("--project", "-p", default=DEFAULT_PROJECT, show_default=True)
@click.pass_context
@handle_errors
def proposals_create(
    ctx: click.Context, skill: str, content_file: IO[str], rationale: str, project: str
) -> None:
    """Propose CONTENT_FILE (the new skill body) for SKILL, as a person."""
    p = props.create_proposal(
        workspace(ctx),
        skill,
        proposed_content=content_file.read(),
        rationale=rationale,
        proposed_by="human",
        author=cli_user(),
        project=project,
    )
    click.echo(f"Proposal #{p.id} created for {p.skill}.")
