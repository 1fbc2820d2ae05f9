"""Findings: ``amelio findings update``, ``list``, ``show`` and ``close``."""

from __future__ import annotations

import click

from amelio.cli._common import (
    cli_user,
    default_project_option,
    handle_errors,
    json_option,
    main,
    print_json,
    short,
    table,
    workspace,
)


@main.group("findings")
def findings_group() -> None:
    """Failures grouped into named problems that keep their id (amelio[findings])."""


@findings_group.command("update")
@default_project_option
@json_option
@click.pass_context
@handle_errors
def update(ctx: click.Context, project: str, as_json: bool) -> None:
    """Match the window's new failures (answers and searches) to the findings, group
    the rest into new ones, reopen closed findings whose problem came back, and file
    each assistant finding's fix as a proposal."""
    from amelio.improve.findings import update_findings

    report = update_findings(workspace(ctx), project=project)
    if as_json:
        print_json(report.to_dict())
        return
    if report.evidence == 0:
        click.echo(
            f"No failures in project {project!r} in the last "
            f"{workspace(ctx).settings.findings_window_days} days: nothing to group."
        )
        return
    click.echo(
        f"{report.evidence} failures in the window ({report.search_evidence} from search): "
        f"{report.matched} new ones joined a finding, {len(report.created)} new finding(s), "
        f"{report.waiting} wait for more like them."
    )
    for fid in report.reopened:
        click.echo(f"Finding {fid} reopened: its problem came back.")
    for pid in report.proposals:
        click.echo(f"Proposal #{pid} filed with a finding's fix: amelio proposals show {pid}")
    for skipped in report.skipped:
        click.echo(f"Finding {skipped['finding']}: no proposal filed ({skipped['reason']}).")


@findings_group.command("list")
@default_project_option
@click.option(
    "--status",
    type=click.Choice(("open", "fixing", "closed", "reopened")),
    default=None,
    help="Only this status.",
)
@json_option
@click.pass_context
@handle_errors
def list_(ctx: click.Context, project: str, status: str | None, as_json: bool) -> None:
    """The project's findings, the largest share of their traffic first."""
    from amelio.improve.findings import list_findings

    found = list_findings(workspace(ctx), project=project, status=status)
    if as_json:
        print_json([f.to_dict() for f in found])
        return
    if not found:
        click.echo("No findings.")
        return
    table(
        ["id", "status", "share", "evidence", "skills", "title"],
        [
            (
                f.id,
                f.status,
                f"{f.share:.1%}",
                f.evidence_count,
                short(", ".join(f.skills) or "-", 30),
                short(f.title, 60),
            )
            for f in found
        ],
    )


@findings_group.command("show")
@click.argument("finding_id", type=click.IntRange(1, 2**31 - 1))
@default_project_option
@json_option
@click.pass_context
@handle_errors
def show(ctx: click.Context, finding_id: int, project: str, as_json: bool) -> None:
    """A finding and its evidence, newest first."""
    from amelio.improve.findings import describe_fix, get_finding

    found = get_finding(workspace(ctx), finding_id, project=project)
    if as_json:
        print_json(found.to_dict())
        return
    click.echo(f"Finding {found.id} ({found.status}, {found.kind}): {found.title}")
    traffic = "searches" if found.kind == "search" else "answers"
    click.echo(
        f"  skills: {', '.join(found.skills) or '-'}; {found.evidence_count} pieces of evidence, "
        f"{found.share:.1%} of the window's {traffic}; seen {found.first_seen:%Y-%m-%d} to "
        f"{found.last_seen:%Y-%m-%d}"
    )
    if found.closed_at:
        click.echo(f"  closed by {found.closed_by}: {found.close_reason or '-'}")
    if found.proposal_ids:
        click.echo(f"  proposals: {', '.join(f'#{p}' for p in found.proposal_ids)}")
    for line in describe_fix(found.fix):
        click.echo(f"  {line}")
    for e in found.evidence[:20]:
        click.echo(f"  - {e.ref} ({e.skill or '-'}): {short(e.text, 80)}")
    if len(found.evidence) > 20:
        click.echo(f"  … and {len(found.evidence) - 20} more")


@findings_group.command("close")
@click.argument("finding_id", type=click.IntRange(1, 2**31 - 1))
@default_project_option
@click.option("--reason", default=None, help="Why (kept on record).")
@click.pass_context
@handle_errors
def close(ctx: click.Context, finding_id: int, project: str, reason: str | None) -> None:
    """Close a finding; it reopens by itself when its problem comes back."""
    from amelio.improve.findings import close_finding

    found = close_finding(
        workspace(ctx), finding_id, actor=cli_user(), project=project, reason=reason
    )
    click.echo(f"Finding {found.id} closed.")
