"""Workspace, settings, database, projects, keys and the service."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from amelio import db
from amelio._version import __version__
from amelio.cli._common import (
    handle_errors,
    json_option,
    main,
    print_json,
    table,
    workspace,
)
from amelio.workspace import keys, projects

if TYPE_CHECKING:
    from amelio.workspace.folder import Workspace

# -- init, config, db -------------------------------------------------------------------


@main.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@handle_errors
def init(directory: Path) -> None:
    """Create a workspace in DIRECTORY (amelio.toml, skills/, migrated database)."""
    from amelio.workspace.folder import init_workspace

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
@handle_errors
def config_show(ctx: click.Context, as_json: bool) -> None:
    """Print the effective settings (secrets masked) and where each came from."""
    from amelio.workspace.config import load_settings

    settings = load_settings(ctx.obj.get("workspace"))
    rows = list(settings.rows())
    if as_json:
        print_json({r.name: {"value": r.value, "source": r.source, "env": r.env} for r in rows})
        return
    table(["setting", "value", "source", "env"], [(r.name, r.value, r.source, r.env) for r in rows])


@main.group("db")
def db_group() -> None:
    """Database migrations, and the move to another database."""


@db_group.command("copy")
@click.option(
    "--to",
    "url",
    required=True,
    metavar="URL",
    help="The target database, e.g. postgresql+psycopg://user@host/amelio.",
)
@click.option("--force", is_flag=True, help="Replace what the target already holds.")
@json_option
@click.pass_context
@handle_errors
def db_copy(ctx: click.Context, url: str, force: bool, as_json: bool) -> None:
    """Copy the workspace's database into URL (stop `amelio serve` first), then check
    every table's row count and the feedback chain there."""
    from amelio.ops.transfer import copy_database

    report = copy_database(workspace(ctx), url, force=force)
    if as_json:
        print_json(report.to_dict())
    else:
        table(
            ["table", "source", "target"],
            [
                (name, n, report.copied.get(name, ""))
                for name, n in report.source.items()
                if n or report.copied.get(name)
            ],
        )
        click.echo(f"Feedback chain on the target: {report.chain}.")
    if not report.ok:
        raise click.exceptions.Exit(1)
    if not as_json:
        click.echo(
            f"Copied to {report.target}. Set database_url in amelio.toml (or "
            "AMELIO_DATABASE_URL) to it, then start the service; the old database "
            "is left as it was."
        )


@db_group.command("upgrade")
@click.pass_context
@handle_errors
def db_upgrade(ctx: click.Context) -> None:
    """Apply pending migrations to the workspace's database."""
    from amelio.workspace.config import load_settings

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
@handle_errors
def db_status(ctx: click.Context, as_json: bool) -> None:
    """Show the database's migration and the code's."""
    from amelio.workspace.config import load_settings

    settings = load_settings(ctx.obj.get("workspace"))
    engine = db.create_engine(settings.effective_database_url)
    try:
        current, head = db.current_revision(engine), db.head_revision()
    finally:
        engine.dispose()
    if as_json:
        print_json({"current": current, "head": head, "upToDate": current == head})
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
@handle_errors
def projects_list(ctx: click.Context, as_json: bool) -> None:
    """List projects."""
    found = projects.list_projects(workspace(ctx).engine)
    if as_json:
        print_json([{"name": p.name, "createdAt": p.created_at.isoformat()} for p in found])
    else:
        table(["project", "created"], [(p.name, p.created_at) for p in found])


@projects_group.command("create")
@click.argument("name")
@click.pass_context
@handle_errors
def projects_create(ctx: click.Context, name: str) -> None:
    """Create project NAME (no-op when it exists)."""
    project = projects.create_project(workspace(ctx).engine, name)
    click.echo(f"Project {project.name} ready.")


# -- keys -------------------------------------------------------------------------------


@main.group("keys")
def keys_group() -> None:
    """API keys for the service."""


@keys_group.command("create")
@click.option(
    "--role",
    type=click.Choice(keys.ROLES),
    required=True,
    help="admin: everything; bot: chat and feedback; client: feedback events only.",
)
@click.option("--name", required=True, help="Who or what uses the key.")
@click.option(
    "--project",
    "projects",
    multiple=True,
    metavar="PROJECT",
    help="Bind the key to this project (repeat for several; created if needed). "
    "Without it a bot or client key is global.",
)
@json_option
@click.pass_context
@handle_errors
def keys_create(
    ctx: click.Context, role: str, name: str, projects: tuple[str, ...], as_json: bool
) -> None:
    """Create an API key and print it once (only its hash is stored).

    --project binds a bot or client key to that project, created if needed (repeat it
    for several): the key then reads and writes those projects only. Without it the
    key is global; admin keys always are."""
    key, token = keys.create_key(workspace(ctx).engine, name=name, role=role, projects=projects)
    if as_json:
        print_json(
            {
                "id": key.id,
                "name": key.name,
                "role": key.role,
                "projects": list(key.projects) or None,
                "key": token,
            }
        )
        return
    click.echo(token)
    scope = f"projects {', '.join(key.projects)}" if key.projects else "global"
    click.echo(
        f"Key {key.id} ({key.role}, {key.name}, {scope}). Store it now: it is not shown again.",
        err=True,
    )


@keys_group.command("list")
@json_option
@click.pass_context
@handle_errors
def keys_list(ctx: click.Context, as_json: bool) -> None:
    """List API keys (never the keys themselves)."""
    found = keys.list_keys(workspace(ctx).engine)
    if as_json:
        print_json(
            [
                {
                    "id": k.id,
                    "name": k.name,
                    "role": k.role,
                    "prefix": k.prefix,
                    "projects": list(k.projects) or None,
                    "revoked": k.revoked_at is not None,
                }
                for k in found
            ]
        )
        return
    table(
        ["id", "name", "role", "projects", "prefix", "last used", "revoked"],
        [
            (
                k.id,
                k.name,
                k.role,
                ", ".join(k.projects) or "(global)",
                k.prefix + "…",
                k.last_used_at or "-",
                "yes" if k.revoked_at else "",
            )
            for k in found
        ],
    )


@keys_group.command("revoke")
@click.argument("key_id", type=int)
@click.pass_context
@handle_errors
def keys_revoke(ctx: click.Context, key_id: int) -> None:
    """Revoke key KEY_ID at once."""
    keys.revoke_key(workspace(ctx).engine, key_id)
    click.echo(f"Key {key_id} revoked.")


# -- serve, demo ------------------------------------------------------------------------


def _logging_options(log_format: str) -> dict[str, Any]:
    from amelio.ops.logs import uvicorn_log_config

    return {"log_level": "info", "log_config": uvicorn_log_config(log_format)}


def _serve_app(
    ws: Workspace, app: Any, host: str | None, port: int | None, log_format: str = "text"
) -> None:
    """Serve ``app`` (the service, maybe with more routes) in this process."""
    import uvicorn

    host = host or ws.settings.host
    port = port or ws.settings.port
    click.echo(
        f"Amelio {__version__} serving {ws.root} at http://{host}:{port}/ "
        f"(API docs: http://{host}:{port}/docs)"
    )
    uvicorn.run(app, host=host, port=port, **_logging_options(log_format))


def _serve(
    ws: Workspace, host: str | None, port: int | None, workers: int = 1, log_format: str = "text"
) -> None:
    if workers == 1:
        from amelio.server import create_app

        _serve_app(ws, create_app(ws), host, port, log_format)
        return
    # Each worker counts its own requests; pointed at one folder, prometheus_client
    # sums them, so a scrape that reaches any worker sees them all. Set before the
    # workers (and this process) import it.
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        import shutil

        folder = ws.settings.data_dir / "metrics"
        shutil.rmtree(folder, ignore_errors=True)  # counters start again with the service
        folder.mkdir(parents=True)
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(folder)
    import uvicorn

    from amelio.privacy.signing import secret_key

    host = host or ws.settings.host
    port = port or ws.settings.port
    click.echo(
        f"Amelio {__version__} serving {ws.root} at http://{host}:{port}/ "
        f"(API docs: http://{host}:{port}/docs, {workers} worker processes)"
    )
    # uvicorn starts each worker as a fresh process from an import string, so the
    # workers build their own app from the environment: the same workspace, the same
    # AMELIO_* settings. The generated secret is written once here, before they start,
    # so that every worker signs and checks feedback tokens with the same key.
    from amelio.server import NoDelayH11Protocol

    secret_key(ws.settings)
    os.environ["AMELIO_WORKSPACE"] = str(ws.root)
    uvicorn.run(
        "amelio.server:app_from_env",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        http=NoDelayH11Protocol,
        **_logging_options(log_format),
    )


@main.command()
@click.option("--host", default=None, help="Bind address (default: setting `host`).")
@click.option(
    "--port", type=click.IntRange(1, 65535), default=None, help="Port (default: setting `port`)."
)
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Worker processes sharing the port; each keeps its own search cache "
    "and rate-limit buckets (see docs/scaling.md).",
)
@click.pass_context
@handle_errors
def serve(ctx: click.Context, host: str | None, port: int | None, workers: int) -> None:
    """Run the API service on the workspace (its database must be migrated)."""
    _serve(workspace(ctx), host, port, workers, ctx.obj.get("log_format", "text"))


@main.command()
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("demo-workspace"),
    show_default=True,
    help="Demo workspace folder.",
)
@click.option(
    "--skills",
    "skills_path",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="Skills to import (default: the example skills).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Bind address.")
@click.option(
    "--port", type=click.IntRange(1, 65535), default=8000, show_default=True, help="Port."
)
@click.option(
    "--no-serve", is_flag=True, help="Prepare the workspace, print its admin key, and stop."
)
@click.option(
    "--llm",
    "llm_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A GGUF model file: a real assistant behind the chat, the Telegram bot and the "
    "proxy (the local provider, amelio[local]).",
)
@handle_errors
def demo(
    directory: Path,
    skills_path: Path | None,
    host: str,
    port: int,
    no_serve: bool,
    llm_path: Path | None,
) -> None:
    """Create (or reuse) a demo workspace with the example skills and serve it.

    It serves the dashboard, the API and the demo search page at `http://HOST:PORT/`
    (--host 127.0.0.1 and --port 8000 unless given; `make demo HOST=… PORT=…` passes
    them on). --no-serve prepares the workspace, prints its admin key and stops;
    `amelio demo --dir DIR` serves it later (`amelio serve` has no demo search page).
    --llm FILE answers the chat with a GGUF model run in process (docs/assistant.md)."""
    from amelio.demo.app import create_demo_app, prepare_demo

    ws, admin_key = prepare_demo(directory, skills_path, llm=llm_path)
    if llm_path is not None:
        from amelio.llm import get_provider

        get_provider(ws.settings, purpose="The demo's assistant")  # loads it, or says why not
    click.echo(f"Demo workspace: {ws.root}")
    click.echo(f"Admin API key:  {admin_key}")
    if no_serve:  # no server: no address to print, but how to start one
        ws.dispose()
        click.echo(f"Not served (--no-serve). Serve it with: amelio demo --dir {directory}")
        return
    click.echo(f"Dashboard:      http://{host}:{port}/  (log in with the admin key)")
    click.echo(f"Search page:    http://{host}:{port}/demo/search  (feedback with amelio.js)")
    click.echo(f"Try: curl -H 'Authorization: Bearer {admin_key}' http://{host}:{port}/v1/skills")
    _serve_app(
        ws,
        create_demo_app(ws),
        host,
        port,
        click.get_current_context().obj.get("log_format", "text"),
    )
