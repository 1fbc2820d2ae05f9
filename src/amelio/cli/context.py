"""Prompts and learnings: ``amelio prompt``, ``amelio learnings`` (``amelio route`` is in
:mod:`amelio.cli.route`, which starts without the database layer)."""

from __future__ import annotations

from pathlib import Path

import click

from amelio.assistant import learnings
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


@main.command("prompt")
@click.argument("message")
@default_project_option
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
@default_project_option
@click.option("--skill", default=None, help="Only when this skill is hinted.")
@click.option("--source", type=click.Choice(learnings.SOURCES), default="manual", show_default=True)
@json_option
@click.pass_context
@handle_errors
def learnings_add(
    ctx: click.Context, rule: str, project: str, skill: str | None, source: str, as_json: bool
) -> None:
    """Add RULE, active at once (a person typed it), unless it looks like a secret or an
    injection. A paraphrase merges into the learning it repeats; a rule that
    contradicts an active one waits as a proposal to supersede it."""
    item, outcome = learnings.add_learning(
        workspace(ctx),
        rule,
        source=source,
        project=project,
        skill=skill,
        origin=learnings.Origin(author=cli_user(), reviewed=True),
    )
    if as_json:
        print_json(item.to_dict() | {"outcome": outcome})
    else:
        click.echo(f"Learning {item.id} {outcome}: {item.rule}")
        if item.held_reason:
            click.echo(f"  waits for review: {item.held_reason}")


@learnings_group.command("list")
@default_project_option
@click.option("--skill", default=None, help="This skill's learnings and the global ones.")
@click.option("--all", "include_retired", is_flag=True, help="Every state, retired included.")
@click.option(
    "--status", type=click.Choice(learnings.STATES), default=None, help="Only this state."
)
@json_option
@click.pass_context
@handle_errors
def learnings_list(
    ctx: click.Context,
    project: str,
    skill: str | None,
    include_retired: bool,
    status: str | None,
    as_json: bool,
) -> None:
    """List learnings, newest first (active ones unless --status or --all)."""
    items = learnings.list_learnings(
        workspace(ctx), project=project, skill=skill, include_retired=include_retired, status=status
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
@default_project_option
@click.pass_context
@handle_errors
def learnings_delete(ctx: click.Context, learning_id: int, project: str) -> None:
    """Retire learning LEARNING_ID (kept on record, out of prompts)."""
    item = learnings.delete_learning(workspace(ctx), learning_id, project=project)
    click.echo(f"Learning {item.id} retired.")


@learnings_group.command("sync")
@default_project_option
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


def _describe(item: learnings.Learning) -> str:
    what = (
        "retire proposal"
        if item.status == "active"
        else (f"supersede #{item.supersedes_id}" if item.supersedes_id else "candidate")
    )
    why = (
        (item.retire_proposal or {}).get("reason") if item.status == "active" else item.held_reason
    )
    return f"{what}: {why}" if why else what


@learnings_group.command("review")
@default_project_option
@json_option
@click.pass_context
@handle_errors
def learnings_review(ctx: click.Context, project: str, as_json: bool) -> None:
    """List what waits for a person: candidates, supersede and retire proposals."""
    from amelio.assistant.review import review_queue

    items = review_queue(workspace(ctx), project=project)
    if as_json:
        print_json([i.to_dict() for i in items])
        return
    if not items:
        click.echo("Nothing waits for review.")
        return
    table(
        ["id", "skill", "waits as", "rule"],
        [(i.id, i.skill or "-", short(_describe(i), 60), short(i.rule, 60)) for i in items],
    )


@learnings_group.command("approve")
@click.argument("learning_id", type=int)
@default_project_option
@click.option("--rule", default=None, help="Approve this wording instead (an edit).")
@json_option
@click.pass_context
@handle_errors
def learnings_approve(
    ctx: click.Context, learning_id: int, project: str, rule: str | None, as_json: bool
) -> None:
    """Approve what waits on LEARNING_ID: activate a candidate (superseding the learning it
    contradicts), or retire a learning whose retire proposal is pending."""
    from amelio.assistant.review import approve_learning

    item = approve_learning(
        workspace(ctx), learning_id, actor=cli_user(), project=project, rule=rule
    )
    if as_json:
        print_json(item.to_dict())
    else:
        click.echo(f"Learning {item.id} is {item.status}: {item.rule}")
        if item.supersedes_id is not None:
            click.echo(f"  learning {item.supersedes_id} is superseded.")


@learnings_group.command("reject")
@click.argument("learning_id", type=int)
@default_project_option
@click.option("--reason", default=None, help="Why (kept on record).")
@click.pass_context
@handle_errors
def learnings_reject(
    ctx: click.Context, learning_id: int, project: str, reason: str | None
) -> None:
    """Reject what waits on LEARNING_ID: a candidate is retired (and stays so when said
    again); a retire proposal is dropped and the learning stays active."""
    from amelio.assistant.review import reject_learning

    item = reject_learning(
        workspace(ctx), learning_id, actor=cli_user(), project=project, reason=reason
    )
    click.echo(f"Learning {item.id} rejected; it is {item.status}.")


@learnings_group.command("edit")
@click.argument("learning_id", type=int)
@click.argument("rule")
@default_project_option
@click.pass_context
@handle_errors
def learnings_edit(ctx: click.Context, learning_id: int, rule: str, project: str) -> None:
    """Reword a candidate or an active learning (a candidate still needs approving)."""
    from amelio.assistant.review import edit_learning

    item = edit_learning(workspace(ctx), learning_id, rule, actor=cli_user(), project=project)
    click.echo(f"Learning {item.id} ({item.status}): {item.rule}")


@learnings_group.command("show")
@click.argument("learning_id", type=int)
@default_project_option
@json_option
@click.pass_context
@handle_errors
def learnings_show(ctx: click.Context, learning_id: int, project: str, as_json: bool) -> None:
    """Show a learning: where it came from, who reviewed it, and how its skill's answers
    fared with it in the prompt and without it."""
    from amelio.assistant.review import show

    item, figures = show(workspace(ctx), learning_id, project=project)
    if as_json:
        print_json(item.to_dict() | {"usage": figures.to_dict()})
        return
    click.echo(f"Learning {item.id} ({item.status}, {item.source}, skill {item.skill or 'all'})")
    click.echo(f"  {item.rule}")
    click.echo(f"  taught {item.occurrences}× since {item.created_at:%Y-%m-%d %H:%M}")
    if item.author:
        click.echo(f"  written by {item.author}")
    if item.reviewed_by:
        click.echo(f"  reviewed by {item.reviewed_by} at {item.reviewed_at:%Y-%m-%d %H:%M}")
    for label, value in (
        ("waits", item.held_reason if item.status == "candidate" else None),
        ("supersedes", item.supersedes_id),
        ("superseded by", item.superseded_by),
        ("retired", item.retired_reason),
    ):
        if value:
            click.echo(f"  {label}: {value}")
    if item.retire_proposal:
        p = item.retire_proposal
        click.echo(f"  retire proposal ({p.get('status')}): {p.get('reason')}")
    click.echo("  sources:")
    for src in item.sources or ({"source": item.source},):
        parts = [src.get("source", "?")]
        parts += [f"{k} {src[k]}" for k in ("feedbackId", "interactionId", "author") if src.get(k)]
        click.echo(
            f"    - {', '.join(str(p) for p in parts)}"
            + (f" at {src['at']}" if src.get("at") else "")
        )

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:.0%}"

    click.echo(
        f"  answers with it: {figures.used} (pass {pct(figures.pass_with)}, "
        f"👎 {pct(figures.down_with)}); without: {figures.unused} "
        f"(pass {pct(figures.pass_without)}, 👎 {pct(figures.down_without)})"
    )


@learnings_group.command("audit")
@default_project_option
@json_option
@click.pass_context
@handle_errors
def learnings_audit(ctx: click.Context, project: str, as_json: bool) -> None:
    """List duplicates, conflicts, secrets, prompt injections, personal data and stale
    learnings; exit 1 when there is any."""
    from amelio.assistant.audit import audit

    found = audit(workspace(ctx), project=project)
    if as_json:
        print_json({"project": project, "findings": [f.to_dict() for f in found]})
    elif not found:
        click.echo("No findings.")
    else:
        table(
            ["kind", "learnings", "detail"],
            [(f.kind, ", ".join(map(str, f.learning_ids)), short(f.detail, 80)) for f in found],
        )
    if found:
        ctx.exit(1)


@learnings_group.command("export")
@click.option(
    "--format", "fmt", type=click.Choice(("agents", "claude")), default="agents", show_default=True
)
@click.option("--skill", default=None, help="Only this skill's learnings and the general ones.")
@default_project_option
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the section into this file (AGENTS.md, CLAUDE.md), replacing Amelio's "
    "previous section and keeping the rest; without it, print the section.",
)
@click.pass_context
@handle_errors
def learnings_export(
    ctx: click.Context, fmt: str, skill: str | None, project: str, out: Path | None
) -> None:
    """Write the active learnings as an AGENTS.md or CLAUDE.md section."""
    from amelio.assistant.export import render_section, write_section

    items = learnings.list_learnings(workspace(ctx), project=project, skill=skill)
    section = render_section(items, fmt=fmt, project=project)  # type: ignore[arg-type]
    if out is None:
        click.echo(section, nl=False)
    elif write_section(out, section):
        click.echo(f"{out}: {len(items)} learnings written.")
    else:
        click.echo(f"{out}: already up to date.")
