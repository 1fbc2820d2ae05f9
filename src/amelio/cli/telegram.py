"""``amelio telegram``: the bot, and the chats allowed to talk to it."""

from __future__ import annotations

import asyncio
import os
import signal
from datetime import timedelta
from typing import TYPE_CHECKING

import click

from amelio.cli._common import handle_errors, json_option, main, print_json, table, workspace
from amelio.workspace.projects import DEFAULT_PROJECT

if TYPE_CHECKING:
    from amelio.workspace.folder import Workspace


@main.group("telegram")
def telegram_group() -> None:
    """The Telegram bot: chat with the assistant, vote, fix, approve proposals."""


@telegram_group.command("run")
@click.option(
    "--webhook",
    "webhook_url",
    default=None,
    metavar="URL",
    help="Receive updates at URL (https, as Telegram calls it) instead of long "
    "polling: serves the API with the update route at URL's path.",
)
@click.option(
    "--host", default=None, help="With --webhook: bind address (default: setting `host`)."
)
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=None,
    help="With --webhook: port (default: setting `port`).",
)
@click.pass_context
@handle_errors
def telegram_run(
    ctx: click.Context, webhook_url: str | None, host: str | None, port: int | None
) -> None:
    """Run the bot (long polling by default; Ctrl-C stops it)."""
    # Its own process: opt in to python-telegram-bot's coming timedelta retry_after,
    # which Amelio reads already, rather than warn on every 429.
    os.environ.setdefault("PTB_TIMEDELTA", "1")
    ws = workspace(ctx)
    settings = ws.settings
    if webhook_url is not None:
        from amelio.cli.admin import _serve_app
        from amelio.server import create_app
        from amelio.telegram.webhook import webhook_path, webhook_router

        path = webhook_path(webhook_url)
        _check_token(ws)  # a refused token is said here, not as a failed start-up
        app = create_app(ws)
        app.include_router(webhook_router(ws, webhook_url))
        click.echo(f"Telegram updates arrive at {webhook_url} (route {path}).")
        _serve_app(ws, app, host, port, ctx.obj.get("log_format", "text"))
        return

    from amelio.assistant.respond import warm_up
    from amelio.telegram.bot import build_bot, run_polling

    _, application = build_bot(ws)
    api = settings.telegram_api_url
    if settings.warm_up:  # the first person to write should not wait for it
        click.echo(f"Warmed up in {warm_up(ws):.1f} s.")

    async def polling() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await run_polling(
            application,
            api,
            stop,
            ready=lambda: click.echo(f"Amelio's Telegram bot is polling {api} (Ctrl-C stops it)."),
        )

    asyncio.run(polling())
    click.echo("Stopped.")


def _check_token(ws: Workspace) -> None:
    from amelio.telegram.bot import build_bot, check_token

    _, probe = build_bot(ws)

    async def check() -> None:
        await check_token(probe, ws.settings.telegram_api_url)
        await probe.shutdown()

    asyncio.run(check())


@telegram_group.command("invite")
@click.option(
    "--project",
    default=DEFAULT_PROJECT,
    show_default=True,
    help="The project the chat will talk to.",
)
@click.option(
    "--role",
    type=click.Choice(["user", "admin"]),
    default="user",
    show_default=True,
    help="admin chats also get reports and proposal cards.",
)
@click.option(
    "--ttl",
    "hours",
    type=click.FloatRange(0.02, 720),
    default=24.0,
    show_default=True,
    help="Hours before the code expires.",
)
@json_option
@click.pass_context
@handle_errors
def telegram_invite(
    ctx: click.Context, project: str, role: str, hours: float, as_json: bool
) -> None:
    """Print a one-time code; in Telegram, `/start CODE` links that chat."""
    from amelio.telegram.links import create_invite

    invite, code = create_invite(
        workspace(ctx), project=project, role=role, ttl=timedelta(hours=hours), created_by="cli"
    )
    if as_json:
        print_json(invite.to_dict() | {"code": code})
        return
    click.echo(
        f"Send this to the bot, from the chat to link (once, before "
        f"{invite.expires_at:%Y-%m-%d %H:%M} UTC):\n\n    /start {code}\n\n"
        f"It links the chat to project {project} as {role}."
    )


@telegram_group.command("chats")
@click.option("--project", default=None, help="Only this project's chats.")
@json_option
@click.pass_context
@handle_errors
def telegram_chats(ctx: click.Context, project: str | None, as_json: bool) -> None:
    """The linked chats: project, role, who linked them and when."""
    from amelio.telegram.links import list_links

    found = list_links(workspace(ctx), project=project)
    if as_json:
        print_json([link.to_dict() for link in found])
        return
    if not found:
        click.echo("No linked chats: `amelio telegram invite` makes a code.")
        return
    table(
        ["chat", "project", "role", "title", "linked"],
        [
            (
                link.chat_id,
                link.project,
                link.role,
                link.title or "",
                f"{link.linked_at:%Y-%m-%d %H:%M}",
            )
            for link in found
        ],
    )


@telegram_group.command("unlink")
@click.argument("chat_id", type=int)
@click.pass_context
@handle_errors
def telegram_unlink(ctx: click.Context, chat_id: int) -> None:
    """Remove CHAT_ID's link: the chat gets only the invite instruction from then on."""
    from amelio.telegram.links import unlink

    link = unlink(workspace(ctx), chat_id)
    click.echo(f"Unlinked chat {link.chat_id} ({link.project}, {link.role}).")
