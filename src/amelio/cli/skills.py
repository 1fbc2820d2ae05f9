"""Import, list, show, export, roll back and sync skills."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

import click

from amelio import skills
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
from amelio.workspace import projects

if TYPE_CHECKING:
    from amelio.skills import sync as skill_sync

# -- skills -----------------------------------------------------------------------------


@main.group("skills")
def skills_group() -> None:
    """Import, list, show, export and sync skills."""


@skills_group.command("import")
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@project_option
@json_option
@click.pass_context
@handle_errors
def skills_import(ctx: click.Context, path: Path, project: str | None, as_json: bool) -> None:
    """Import skills from PATH (a skills folder, one skill folder or a SKILL.md).

    All or nothing: one malformed file aborts the import and stores nothing.
    With --project the skills become that project's forks.
    """
    report = skills.import_skills(workspace(ctx).engine, path, project=project)
    if as_json:
        print_json(report.to_dict())
        return
    scope = f"project {project}" if project else "global"
    click.echo(
        f"Imported into {scope}: {len(report.created)} new, {len(report.updated)} "
        f"updated, {len(report.unchanged)} unchanged."
    )
    for label, names in (("new", report.created), ("updated", report.updated)):
        for name in names:
            click.echo(f"  {label:8} {name} (v{report.details[name]})")


@skills_group.command("list")
@project_option
@json_option
@click.pass_context
@handle_errors
def skills_list(ctx: click.Context, project: str | None, as_json: bool) -> None:
    """List the skills a project sees (its forks first, then global skills)."""
    found = skills.list_skills(workspace(ctx).engine, project or projects.DEFAULT_PROJECT)
    if as_json:
        print_json([s.to_dict(with_content=False) for s in found])
        return
    table(
        ["name", "scope", "version", "rules", "description"],
        [
            (s.name, s.scope, s.version, len(s.spec.evals or ()), short(s.spec.description))
            for s in found
        ],
    )


@skills_group.command("show")
@click.argument("name")
@click.option(
    "--version", "version", type=click.IntRange(min=1), default=None, help="Show an older version."
)
@project_option
@json_option
@click.pass_context
@handle_errors
def skills_show(
    ctx: click.Context, name: str, version: int | None, project: str | None, as_json: bool
) -> None:
    """Show skill NAME: metadata, content, eval rules and history."""
    engine = workspace(ctx).engine
    skill = skills.get_skill(engine, name, project or projects.DEFAULT_PROJECT)
    history = skills.list_versions(engine, name, project or projects.DEFAULT_PROJECT)
    spec = skill.spec
    if version is not None:
        match = [v for v in history if v.version == version]
        if not match:
            raise click.BadParameter(
                f"{name} has versions 1 to {skill.version}", param_hint="--version"
            )
        spec = match[0].spec
    if as_json:
        data = skill.to_dict()
        data |= {
            "version": version or skill.version,
            "content": spec.content,
            "evals": None if spec.evals is None else [dict(r) for r in spec.evals],
            "versions": [v.to_dict() for v in history],
        }
        print_json(data)
        return
    click.echo(
        f"{spec.name}  v{version or skill.version} of {skill.version}  ({skill.scope}"
        f"{' ' + skill.project if skill.project else ''})"
    )
    click.echo(f"description: {spec.description}")
    click.echo(f"triggers:    {', '.join(spec.triggers) or '-'}")
    click.echo(f"keywords:    {', '.join(spec.keywords) or '-'}")
    click.echo("")
    click.echo(spec.content.rstrip())
    click.echo("")
    if spec.evals:
        click.echo("eval rules:")
        for rule in spec.evals:
            click.echo(
                f"  {rule['id']:10} {rule.get('severity', 'warning'):8} "
                f"{rule['type']:20} {rule.get('name', '')}"
            )
    click.echo("history:")
    for v in history:
        click.echo(f"  v{v.version}  {v.created_at:%Y-%m-%d %H:%M}  {v.author}: {v.reason}")


@skills_group.command("export")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@project_option
@click.pass_context
@handle_errors
def skills_export(ctx: click.Context, directory: Path, project: str | None) -> None:
    """Write skills back as files (global ones, or --project's forks)."""
    written = skills.export_skills(workspace(ctx).engine, directory, project=project)
    click.echo(f"Wrote {len(written)} files to {directory}.")


@skills_group.command("rollback")
@click.argument("name")
@click.option(
    "--to", "version", type=click.IntRange(min=1), required=True, help="The version to restore."
)
@project_option
@click.pass_context
@handle_errors
def skills_rollback(ctx: click.Context, name: str, version: int, project: str | None) -> None:
    """Restore version --to of skill NAME, as a new version (history only grows)."""
    skill = skills.rollback_skill(
        workspace(ctx).engine, name, version, project=project, author=cli_user()
    )
    click.echo(f"{name} is now v{skill.version} (content of v{version}).")


@skills_group.command("log")
@click.argument("name")
@project_option
@json_option
@click.pass_context
@handle_errors
def skills_log(ctx: click.Context, name: str, project: str | None, as_json: bool) -> None:
    """The evolution log of skill NAME: every change and decision, who, when and why."""
    events = skills.skill_log(workspace(ctx).engine, name, project or projects.DEFAULT_PROJECT)
    if as_json:
        print_json([e.to_dict() for e in events])
        return
    table(
        ["when", "what", "version", "proposal", "who", "why"],
        [
            (
                f"{e.created_at:%Y-%m-%d %H:%M}",
                e.kind,
                e.version or "-",
                f"#{e.proposal_id}" if e.proposal_id else "-",
                e.actor,
                short(e.reason, 60),
            )
            for e in events
        ],
    )


# -- routing examples and suggested triggers ----------------------------------------------

#: How an example is named on the command line: its id, or md<N> for a SKILL.md one
#: (ASCII digits only, and few enough that any database can look the id up).
_EXAMPLE_REF = re.compile(r"(md)?[0-9]{1,18}")


@skills_group.group("examples")
def examples_group() -> None:
    """The examples the learned router learns a skill from: list, add, remove."""


@examples_group.command("list")
@click.argument("name")
@project_option
@click.option("--removed", is_flag=True, help="Also the removed ones.")
@json_option
@click.pass_context
@handle_errors
def examples_list(
    ctx: click.Context, name: str, project: str | None, removed: bool, as_json: bool
) -> None:
    """The routing examples of skill NAME: SKILL.md's (md1, md2…), then logged and added
    ones by id, newest first."""
    from amelio.routing import examples as routing_examples

    project = project or projects.DEFAULT_PROJECT
    found = routing_examples.list_examples(workspace(ctx), name, project=project, removed=removed)
    if as_json:
        print_json({"skill": name, "project": project, "examples": [e.to_dict() for e in found]})
        return
    headers = ["ref", "source", "text", "author", "created"]
    rows = [
        [
            e.ref,
            e.source,
            short(e.text, 60),
            e.author or "-",
            f"{e.created_at:%Y-%m-%d %H:%M}" if e.created_at else "-",
        ]
        for e in found
    ]
    if removed:
        headers.append("removed")
        for row, e in zip(rows, found, strict=True):
            row.append(
                f"{e.removed_at:%Y-%m-%d %H:%M} by {e.removed_by or '-'}" if e.removed_at else "-"
            )
    if not found:
        click.echo(
            f"{name} has no routing examples in project {project}: kept answers add "
            f"them, or `amelio skills examples add {name} TEXT`."
        )
        return
    table(headers, rows)


@examples_group.command("add")
@click.argument("name")
@click.argument("text")
@project_option
@json_option
@click.pass_context
@handle_errors
def examples_add(
    ctx: click.Context, name: str, text: str, project: str | None, as_json: bool
) -> None:
    """Teach the router that TEXT is a message for skill NAME."""
    from amelio.routing import examples as routing_examples

    example = routing_examples.add_example(
        workspace(ctx), name, text, project=project or projects.DEFAULT_PROJECT, author=cli_user()
    )
    if as_json:
        print_json(example.to_dict())
        return
    click.echo(
        f"Example {example.ref} added to {name} (project {example.project}): "
        f"{short(example.text, 60)}"
    )


@examples_group.command("remove")
@click.argument("name")
@click.argument("ref")
@project_option
@json_option
@click.pass_context
@handle_errors
def examples_remove(
    ctx: click.Context, name: str, ref: str, project: str | None, as_json: bool
) -> None:
    """Remove example REF (an id, or md<N>: a SKILL.md one) of skill NAME.

    A logged one is kept as removed, so the same answer is not learned again;
    removing a SKILL.md one writes a new version of the skill.
    """
    from amelio.errors import InvalidInput
    from amelio.routing import examples as routing_examples

    if not _EXAMPLE_REF.fullmatch(ref.strip()):
        raise InvalidInput(
            f"{ref!r} names no example: use a number or md<N> from "
            f"`amelio skills examples list {name}`.",
            field="ref",
        )
    ws = workspace(ctx)
    project = project or projects.DEFAULT_PROJECT
    example = routing_examples.remove(ws, name, ref, project=project, author=cli_user())
    if as_json:
        print_json(example.to_dict())
        return
    if example.source == "skill":
        version = skills.get_skill(ws.engine, name, project).version
        click.echo(
            f"Removed {example.ref} from {name}'s SKILL.md examples (now v{version}): "
            f"{short(example.text, 60)}"
        )
    else:
        click.echo(f"Removed example {example.ref} of {name}: {short(example.text, 60)}")


@skills_group.command("suggest-triggers")
@click.argument("name")
@project_option
@click.option("--dry-run", is_flag=True, help="Show the terms; propose nothing.")
@click.option(
    "--max-triggers",
    type=click.IntRange(min=0),
    default=3,
    show_default=True,
    help="At most this many new triggers (word pairs).",
)
@click.option(
    "--max-keywords",
    type=click.IntRange(min=0),
    default=10,
    show_default=True,
    help="At most this many new keywords (words).",
)
@json_option
@click.pass_context
@handle_errors
def skills_suggest_triggers(
    ctx: click.Context,
    name: str,
    project: str | None,
    dry_run: bool,
    max_triggers: int,
    max_keywords: int,
    as_json: bool,
) -> None:
    """Mine skill NAME's routing examples for triggers and keywords, as a proposal.

    Terms many of its examples use and few other skills' do; nothing changes until
    a person approves the proposal (`amelio proposals approve ID`).
    """
    from amelio.improve.triggers import suggest_triggers

    suggestion = suggest_triggers(
        workspace(ctx),
        name,
        project=project or projects.DEFAULT_PROJECT,
        author=cli_user(),
        max_triggers=max_triggers,
        max_keywords=max_keywords,
        propose=not dry_run,
    )
    if as_json:
        print_json(suggestion.to_dict())
        return
    s = suggestion
    click.echo(f"{s.skill}: {s.examples} routing examples in project {s.project}.")
    if not s.terms:
        click.echo("Nothing to add: no word or pair is common in its examples and rare elsewhere.")
        return
    table(
        ["kind", "term", "in examples", "elsewhere"],
        [(t.kind, t.term, f"{t.in_examples} of {t.examples}", t.elsewhere) for t in s.terms],
    )
    click.echo(
        f"On metadata alone, {s.routed_before} of {s.examples} examples route to "
        f"{s.skill} first now, {s.routed_after} with these terms."
    )
    if s.proposal is not None:
        click.echo(
            f"Proposal #{s.proposal.id} filed: review it with `amelio proposals diff "
            f"{s.proposal.id}`, approve with `amelio proposals approve "
            f"{s.proposal.id}`."
        )
    else:
        click.echo("Dry run: nothing proposed.")


@skills_group.command("sync")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--watch", is_flag=True, help="Keep syncing on every change (Ctrl-C stops).")
@click.option("--dry-run", is_flag=True, help="Show what would change; write nothing.")
@project_option
@json_option
@click.pass_context
@handle_errors
def skills_sync(
    ctx: click.Context,
    directory: Path,
    watch: bool,
    dry_run: bool,
    project: str | None,
    as_json: bool,
) -> None:
    """Keep the Agent Skills folder DIRECTORY in step with the registry.

    Approved versions are written out (the version replaced kept as SKILL.v<N>.md,
    the 3 newest); a hand edit becomes a pending proposal and the file is kept as
    written; a new folder is proposed as a new skill; a deleted one is reported.
    Exit 1 when a file could not be read or proposed (a malformed file, a link out
    of DIRECTORY, an edit made on a version the registry has moved past).
    """
    from amelio.skills import sync as skill_sync

    if watch and dry_run:
        raise click.UsageError("--watch and --dry-run do not go together.")
    ws = workspace(ctx)
    author = f"{cli_user()} via skills sync {directory.resolve()}"
    if not watch:
        report = skill_sync.sync_skills(
            ws, directory, project=project, author=author, dry_run=dry_run
        )
        if as_json:
            print_json(report.to_dict())
        else:
            _show_sync(report, quiet=False, seen={})
        if report.failures:
            ctx.exit(1)
        return
    seen: dict[str, tuple[str, str]] = {}

    def show(report: skill_sync.SyncReport) -> None:
        if as_json:  # one JSON object a line, only what changed since the last pass
            for item in report.items:
                if seen.get(item.skill) != (item.action, item.detail):
                    seen[item.skill] = (item.action, item.detail)
                    click.echo(json.dumps(item.to_dict(), ensure_ascii=False))
            return
        _show_sync(report, quiet=True, seen=seen)

    if not as_json:
        click.echo(f"Syncing {directory.resolve()} (Ctrl-C stops).")
    skill_sync.watch_skills(ws, directory, project=project, author=author, on_report=show)


def _show_sync(
    report: skill_sync.SyncReport, *, quiet: bool, seen: dict[str, tuple[str, str]]
) -> None:
    """One line per skill; ``quiet`` (watching) prints only what changed since last time."""
    for item in report.items:
        if quiet and (
            item.action == "unchanged" or seen.get(item.skill) == (item.action, item.detail)
        ):
            seen[item.skill] = (item.action, item.detail)
            continue
        seen[item.skill] = (item.action, item.detail)
        where = (
            f" [{item.file}{', ' + item.field if item.field else ''}]"
            if item.action in ("error", "stale") and item.file
            else ""
        )
        click.echo(
            f"  {item.action:9} {item.skill}  {item.detail}{where}".rstrip(),
            err=item.action in ("error", "stale"),
        )
    if not quiet:
        verb = "Would sync" if report.dry_run else "Synced"
        failed = len(report.failures)
        done = f"{len(report.items) - failed} of " if failed else ""
        click.echo(
            f"{verb} {done}{len(report.items)} skills in {report.folder}"
            f"{f'; {failed} failed (see above)' if failed else ''}"
            f"{' (dry run: nothing written)' if report.dry_run else ''}."
        )
