"""Backup and restore of a SQLite workspace (see :mod:`amelio.ops.backup`), and the
schedule `amelio serve` keeps (:mod:`amelio.ops.schedule`)."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

import click

from amelio.cli._common import handle_errors, json_option, main, print_json, table, workspace
from amelio.errors import WorkspaceNotFound
from amelio.workspace.discovery import find_workspace


def _size(n: int) -> str:
    units = ("bytes", "KB", "MB", "GB", "TB")
    size, unit = float(n), 0
    while size >= 1000 and unit < len(units) - 1:
        size, unit = size / 1000, unit + 1
    return f"{n} bytes" if unit == 0 else f"{size:.1f} {units[unit]}"


@main.command("backup")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--force", is_flag=True, help="Replace FILE when it exists.")
@json_option
@click.pass_context
@handle_errors
def backup_command(ctx: click.Context, file: Path, force: bool, as_json: bool) -> None:
    """Write a consistent copy of the workspace to FILE (a zip): database, search corpus,
    secret key, amelio.toml and learnings.md files. Safe while `amelio serve` runs. FILE
    may be a folder: the backup is named after the time. SQLite only (PostgreSQL: pg_dump).
    """
    from amelio.ops.backup import backup_workspace
    from amelio.workspace.config import load_settings

    settings = load_settings(ctx.obj.get("workspace"))
    report = backup_workspace(settings, file, force=force)
    if as_json:
        print_json(report.to_dict())
        return
    manifest = report.manifest
    events = manifest.tables.get("feedback_events", 0)
    click.echo(f"Backed up {settings.workspace} to {report.path}")
    click.echo(
        f"  {len(manifest.files)} files, {_size(report.size)}, migration "
        f"{manifest.migration}, {events} feedback events"
    )
    click.echo(f"Restore it with: amelio -w DIR restore {report.path}")


@main.command("restore")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Replace the workspace's own files when it holds data.")
@click.option(
    "--with-config",
    is_flag=True,
    help="Keep the backup's addresses and secrets in amelio.toml (LLM, Telegram, "
    "webhook, CORS): only for a backup you made.",
)
@json_option
@click.pass_context
@handle_errors
def restore_command(
    ctx: click.Context, file: Path, force: bool, with_config: bool, as_json: bool
) -> None:
    """Restore the backup FILE into the workspace; `-w DIR` may name a new folder.

    Checks the whole backup first; refuses a workspace that holds data (unless --force)
    and one whose database another process, such as `amelio serve`, has open; a refused
    restore writes nothing. The database is always the workspace's .amelio/amelio.db.
    An older backup is upgraded to this version's migrations.
    """
    from amelio.ops.backup import restore_workspace

    report = restore_workspace(file, _target(ctx), force=force, with_config=with_config)
    if as_json:
        print_json(report.to_dict())
        return
    manifest = report.manifest
    click.echo(
        f"Restored {file} (made {manifest.created_at:%Y-%m-%d %H:%M:%S %Z} by Amelio "
        f"{manifest.amelio_version}) into {report.root}"
    )
    if report.replaced:
        click.echo(
            "  replaced the data that was there"
            + (f"; removed {', '.join(report.removed)}" if report.removed else "")
        )
    if report.dropped:
        click.echo(
            f"  left out of amelio.toml: {', '.join(report.dropped)} (the backup's "
            "addresses and secrets; --with-config keeps them)"
        )
    if report.upgraded:
        click.echo(f"  database upgraded: {manifest.migration} -> {report.migration}")
    click.echo(f"Check it: amelio -w {report.root} feedback verify")


def _target(ctx: click.Context) -> Path:
    """--workspace or AMELIO_WORKSPACE as given (a new folder is fine), else the
    workspace around the current folder; never a folder nobody named."""
    chosen = ctx.obj.get("workspace") or os.environ.get("AMELIO_WORKSPACE")
    if chosen:
        return Path(chosen)
    try:
        return find_workspace()
    except WorkspaceNotFound as exc:
        raise WorkspaceNotFound(
            "No workspace here to restore into: name the folder with `amelio -w DIR restore "
            "FILE` (a new folder is made)."
        ) from exc


@main.command("schedule")
@click.option(
    "--next",
    "count",
    type=click.IntRange(1, 20),
    default=3,
    show_default=True,
    help="How many next runs to show per job.",
)
@json_option
@click.pass_context
@handle_errors
def schedule_command(ctx: click.Context, count: int, as_json: bool) -> None:
    """The jobs `amelio serve` runs on its own: next runs and the last outcome."""
    from amelio.ops.schedule import job_status, zone

    ws = workspace(ctx)
    found = job_status(ws, count=count)
    if as_json:
        print_json([j.to_dict() for j in found])
        return
    local = zone(ws.settings)

    def when(value: datetime | None) -> str:
        return value.astimezone(local).strftime("%Y-%m-%d %H:%M") if value else "—"

    table(
        ["job", "schedule", "next runs", "last run", "outcome"],
        [
            (
                j.name,
                f"{j.expression} ({j.explained})" if j.expression else "off",
                ", ".join(when(t) for t in j.next_runs) or "—",
                when(j.started_at),
                (f"{j.outcome}: {j.detail}" if j.detail else j.outcome or "—")
                + (f" (held by {j.holder})" if j.holder else ""),
            )
            for j in found
        ],
    )
    click.echo(f"Times in {ws.settings.timezone}.")


@main.command("export")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Write into a folder that is not empty.")
@click.option(
    "--with-secret-key",
    is_flag=True,
    help="Include the workspace's secret key (the feedback chain and user "
    "pseudonyms are keyed by it): keep the export private.",
)
@json_option
@click.pass_context
@handle_errors
def export_command(
    ctx: click.Context, directory: Path, force: bool, with_secret_key: bool, as_json: bool
) -> None:
    """Write every table to DIRECTORY as versioned JSONL, with a manifest."""
    from amelio.ops.transfer import export_workspace

    report = export_workspace(
        workspace(ctx), directory, force=force, with_secret_key=with_secret_key
    )
    if as_json:
        print_json(report.to_dict())
        return
    click.echo(
        f"Exported {sum(report.tables.values())} rows of {len(report.tables)} tables "
        f"to {directory} (migration {report.revision})."
    )
    if not with_secret_key:
        click.echo(
            "The secret key is not in it: give the target the same AMELIO_SECRET_KEY "
            "(or .amelio/secret_key) to verify the feedback chain there."
        )


@main.command("import")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@json_option
@click.pass_context
@handle_errors
def import_command(ctx: click.Context, directory: Path, as_json: bool) -> None:
    """Load the export in DIRECTORY into this workspace, whose database must be empty."""
    from amelio.ops.transfer import import_workspace

    report = import_workspace(workspace(ctx), directory)
    if as_json:
        print_json(report.to_dict())
        return
    click.echo(
        f"Imported {sum(report.tables.values())} rows of {len(report.tables)} tables "
        f"from {directory}. Secret key: {report.secret_key}. Feedback chain: "
        f"{report.chain}."
    )
