"""The ``amelio`` command: parse, call one library function, print.

Errors Amelio raises on purpose print as ``Error: <message>`` and exit 1; usage
errors exit 2 (click's convention). Commands that print data take ``--json``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import click

import amelio
from amelio import db, keys, projects, skills
from amelio.config import load_settings
from amelio.errors import AmelioError
from amelio.workspace import Workspace, init_workspace, open_workspace

F = TypeVar("F", bound=Callable[..., Any])


# -- plumbing ---------------------------------------------------------------------------


def _handle_errors(func: F) -> F:
    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except AmelioError as exc:
            click.echo(f"Error: {exc.message}", err=True)
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


def _workspace(ctx: click.Context, *, migrate: bool = False) -> Workspace:
    """Open the workspace named by --workspace / AMELIO_WORKSPACE / an amelio.toml above."""
    ws: Workspace = open_workspace(ctx.obj.get("workspace"), migrate=migrate)
    ctx.call_on_close(ws.dispose)
    return ws


def _print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    cells = [[str(c) for c in headers], *([str(c) for c in row] for row in rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for n, row in enumerate(cells):
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        if n == 0:
            click.echo("  ".join("-" * w for w in widths))


def _short(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
project_option = click.option(
    "--project", "-p", default=None, help="Project (tenant); default: the global scope / default."
)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(amelio.__version__, prog_name="amelio")
@click.option(
    "--workspace", "-w", type=click.Path(file_okay=False, path_type=Path), default=None,
    help="Workspace folder (default: AMELIO_WORKSPACE, else the nearest amelio.toml above).",
)
@click.pass_context
def main(ctx: click.Context, workspace: Path | None) -> None:
    """Amelio: assistants and search that improve from their own use."""
    ctx.ensure_object(dict)
    ctx.obj["workspace"] = workspace


# -- init, config, db -------------------------------------------------------------------


@main.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@_handle_errors
def init(directory: Path) -> None:
    """Create a workspace in DIRECTORY (amelio.toml, skills/, migrated database)."""
    ws, created = init_workspace(directory)
    ws.dispose()
    verb = "Created" if created else "Updated existing"
    click.echo(f"{verb} workspace {ws.root}")
    click.echo(f"  database: {ws.settings.effective_database_url}")
    click.echo(f"Next: amelio -w {directory} skills import PATH/TO/skills")


@main.group()
def config() -> None:
    """Inspect settings."""


@config.command("show")
@json_option
@click.pass_context
@_handle_errors
def config_show(ctx: click.Context, as_json: bool) -> None:
    """Print the effective settings (secrets masked) and where each came from."""
    settings = load_settings(ctx.obj.get("workspace"))
    rows = list(settings.rows())
    if as_json:
        _print_json({r.name: {"value": r.value, "source": r.source, "env": r.env} for r in rows})
        return
    _table(["setting", "value", "source", "env"], [(r.name, r.value, r.source, r.env)
                                                    for r in rows])


@main.group("db")
def db_group() -> None:
    """Database migrations."""


@db_group.command("upgrade")
@click.pass_context
@_handle_errors
def db_upgrade(ctx: click.Context) -> None:
    """Apply pending migrations to the workspace's database."""
    settings = load_settings(ctx.obj.get("workspace"))
    engine = db.create_engine(settings.effective_database_url)
    try:
        before, after = db.upgrade(engine)
    finally:
        engine.dispose()
    if before == after:
        click.echo(f"Database already at {after}.")
    else:
        click.echo(f"Database upgraded: {before or '(empty)'} -> {after}.")


@db_group.command("status")
@json_option
@click.pass_context
@_handle_errors
def db_status(ctx: click.Context, as_json: bool) -> None:
    """Show the database's migration and the code's."""
    settings = load_settings(ctx.obj.get("workspace"))
    engine = db.create_engine(settings.effective_database_url)
    try:
        current, head = db.current_revision(engine), db.head_revision()
    finally:
        engine.dispose()
    if as_json:
        _print_json({"current": current, "head": head, "upToDate": current == head})
    else:
        click.echo(f"current: {current or '(not migrated)'}\nhead:    {head}")
        if current != head:
            click.echo("Run `amelio db upgrade`.")


# -- projects ---------------------------------------------------------------------------


@main.group("projects")
def projects_group() -> None:
    """Projects (tenants) of the workspace."""


@projects_group.command("list")
@json_option
@click.pass_context
@_handle_errors
def projects_list(ctx: click.Context, as_json: bool) -> None:
    """List projects."""
    found = projects.list_projects(_workspace(ctx).engine)
    if as_json:
        _print_json([{"name": p.name, "createdAt": p.created_at.isoformat()} for p in found])
    else:
        _table(["project", "created"], [(p.name, p.created_at) for p in found])


@projects_group.command("create")
@click.argument("name")
@click.pass_context
@_handle_errors
def projects_create(ctx: click.Context, name: str) -> None:
    """Create project NAME (no-op when it exists)."""
    project = projects.create_project(_workspace(ctx).engine, name)
    click.echo(f"Project {project.name} ready.")


# -- skills -----------------------------------------------------------------------------


@main.group("skills")
def skills_group() -> None:
    """Import, list, show and export skills."""


@skills_group.command("import")
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@project_option
@json_option
@click.pass_context
@_handle_errors
def skills_import(ctx: click.Context, path: Path, project: str | None, as_json: bool) -> None:
    """Import skills from PATH (a skills folder, one skill folder or a SKILL.md).

    All or nothing: one malformed file aborts the import and stores nothing.
    With --project the skills become that project's forks.
    """
    report = skills.import_skills(_workspace(ctx).engine, path, project=project)
    if as_json:
        _print_json(report.to_dict())
        return
    scope = f"project {project}" if project else "global"
    click.echo(f"Imported into {scope}: {len(report.created)} new, {len(report.updated)} "
               f"updated, {len(report.unchanged)} unchanged.")
    for label, names in (("new", report.created), ("updated", report.updated)):
        for name in names:
            click.echo(f"  {label:8} {name} (v{report.details[name]})")


@skills_group.command("list")
@project_option
@json_option
@click.pass_context
@_handle_errors
def skills_list(ctx: click.Context, project: str | None, as_json: bool) -> None:
    """List the skills a project sees (its forks first, then global skills)."""
    found = skills.list_skills(_workspace(ctx).engine, project or projects.DEFAULT_PROJECT)
    if as_json:
        _print_json([s.to_dict(with_content=False) for s in found])
        return
    _table(
        ["name", "scope", "version", "rules", "description"],
        [(s.name, s.scope, s.version, len(s.spec.evals or ()), _short(s.spec.description))
         for s in found],
    )


@skills_group.command("show")
@click.argument("name")
@click.option("--version", "version", type=click.IntRange(min=1), default=None,
              help="Show an older version.")
@project_option
@json_option
@click.pass_context
@_handle_errors
def skills_show(ctx: click.Context, name: str, version: int | None, project: str | None,
                as_json: bool) -> None:
    """Show skill NAME: metadata, content, eval rules and history."""
    engine = _workspace(ctx).engine
    skill = skills.get_skill(engine, name, project or projects.DEFAULT_PROJECT)
    history = skills.list_versions(engine, name, project or projects.DEFAULT_PROJECT)
    spec = skill.spec
    if version is not None:
        match = [v for v in history if v.version == version]
        if not match:
            raise click.BadParameter(f"{name} has versions 1 to {skill.version}",
                                     param_hint="--version")
        spec = match[0].spec
    if as_json:
        data = skill.to_dict()
        data |= {"version": version or skill.version, "content": spec.content,
                 "evals": None if spec.evals is None else [dict(r) for r in spec.evals],
                 "versions": [v.to_dict() for v in history]}
        _print_json(data)
        return
    click.echo(f"{spec.name}  v{version or skill.version} of {skill.version}  ({skill.scope}"
               f"{' ' + skill.project if skill.project else ''})")
    click.echo(f"description: {spec.description}")
    click.echo(f"triggers:    {', '.join(spec.triggers) or '-'}")
    click.echo(f"keywords:    {', '.join(spec.keywords) or '-'}")
    click.echo("")
    click.echo(spec.content.rstrip())
    click.echo("")
    if spec.evals:
        click.echo("eval rules:")
        for rule in spec.evals:
            click.echo(f"  {rule['id']:10} {rule.get('severity', 'warning'):8} "
                       f"{rule['type']:20} {rule.get('name', '')}")
    click.echo("history:")
    for v in history:
        click.echo(f"  v{v.version}  {v.created_at:%Y-%m-%d %H:%M}  {v.author}: {v.reason}")


@skills_group.command("export")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@project_option
@click.pass_context
@_handle_errors
def skills_export(ctx: click.Context, directory: Path, project: str | None) -> None:
    """Write skills back as files (global ones, or --project's forks)."""
    written = skills.export_skills(_workspace(ctx).engine, directory, project=project)
    click.echo(f"Wrote {len(written)} files to {directory}.")


@skills_group.command("rollback")
@click.argument("name")
@click.argument("version", type=click.IntRange(min=1))
@project_option
@click.pass_context
@_handle_errors
def skills_rollback(ctx: click.Context, name: str, version: int, project: str | None) -> None:
    """Make VERSION of skill NAME current again (recorded as a new version)."""
    skill = skills.rollback_skill(_workspace(ctx).engine, name, version, project=project,
                                  author=os.environ.get("USER", "cli"))
    click.echo(f"{name} is now v{skill.version} (content of v{version}).")


# -- keys -------------------------------------------------------------------------------


@main.group("keys")
def keys_group() -> None:
    """API keys for the service."""


@keys_group.command("create")
@click.option("--role", type=click.Choice(keys.ROLES), required=True,
              help="admin: everything; bot: chat and feedback; client: feedback events only.")
@click.option("--name", required=True, help="Who or what uses the key.")
@json_option
@click.pass_context
@_handle_errors
def keys_create(ctx: click.Context, role: str, name: str, as_json: bool) -> None:
    """Create an API key and print it once (only its hash is stored)."""
    key, token = keys.create_key(_workspace(ctx).engine, name=name, role=role)
    if as_json:
        _print_json({"id": key.id, "name": key.name, "role": key.role, "key": token})
        return
    click.echo(token)
    click.echo(f"Key {key.id} ({key.role}, {key.name}). Store it now: it is not shown again.",
               err=True)


@keys_group.command("list")
@json_option
@click.pass_context
@_handle_errors
def keys_list(ctx: click.Context, as_json: bool) -> None:
    """List API keys (never the keys themselves)."""
    found = keys.list_keys(_workspace(ctx).engine)
    if as_json:
        _print_json([{"id": k.id, "name": k.name, "role": k.role, "prefix": k.prefix,
                      "revoked": k.revoked_at is not None} for k in found])
        return
    _table(["id", "name", "role", "prefix", "last used", "revoked"],
           [(k.id, k.name, k.role, k.prefix + "…", k.last_used_at or "-",
             "yes" if k.revoked_at else "") for k in found])


@keys_group.command("revoke")
@click.argument("key_id", type=int)
@click.pass_context
@_handle_errors
def keys_revoke(ctx: click.Context, key_id: int) -> None:
    """Revoke key KEY_ID at once."""
    keys.revoke_key(_workspace(ctx).engine, key_id)
    click.echo(f"Key {key_id} revoked.")


# -- serve, demo ------------------------------------------------------------------------


def _serve(ws: Workspace, host: str | None, port: int | None) -> None:
    import uvicorn

    from amelio.server import create_app

    host = host or ws.settings.host
    port = port or ws.settings.port
    click.echo(f"Amelio {amelio.__version__} serving {ws.root} at http://{host}:{port}/ "
               f"(API docs: http://{host}:{port}/docs)")
    uvicorn.run(create_app(ws), host=host, port=port, log_level="info")


@main.command()
@click.option("--host", default=None, help="Bind address (default: setting `host`).")
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              help="Port (default: setting `port`).")
@click.pass_context
@_handle_errors
def serve(ctx: click.Context, host: str | None, port: int | None) -> None:
    """Run the API service on the workspace (its database must be migrated)."""
    _serve(_workspace(ctx), host, port)


@main.command()
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
              default=Path("demo-workspace"), show_default=True, help="Demo workspace folder.")
@click.option("--skills", "skills_path", type=click.Path(exists=True, path_type=Path),
              default=None, help="Skills to import (default: the example skills).")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(1, 65535), default=8000, show_default=True)
@click.option("--no-serve", is_flag=True, help="Prepare the workspace and stop.")
@_handle_errors
def demo(directory: Path, skills_path: Path | None, host: str, port: int, no_serve: bool
         ) -> None:
    """Create (or reuse) a demo workspace with the example skills and serve it."""
    from amelio.demo import prepare_demo

    ws, admin_key = prepare_demo(directory, skills_path)
    click.echo(f"Demo workspace: {ws.root}")
    click.echo(f"Admin API key:  {admin_key}")
    click.echo(f"Try: curl -H 'Authorization: Bearer {admin_key}' http://{host}:{port}/v1/skills")
    if no_serve:
        ws.dispose()
        return
    _serve(ws, host, port)


if __name__ == "__main__":  # pragma: no cover
    main()
