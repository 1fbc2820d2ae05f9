"""``amelio route``: which skills fit a message, from a routing snapshot when one is current.

This module imports nothing heavy at load: a current snapshot
(:mod:`amelio.routing.snapshot`) routes without the settings and the database layer,
and otherwise the command opens the workspace as every command does and saves a
snapshot for the next run.
"""

from __future__ import annotations

import click

from amelio.cli._common import handle_errors, json_option, main, print_json, table
from amelio.workspace.projects import DEFAULT_PROJECT


@main.command("route")
@click.argument("message")
@click.option(
    "--project", "-p", default=DEFAULT_PROJECT, show_default=True, help="Project (tenant)."
)
@click.option("--scorer", default=None, help="Router scorer (default: setting router_scorer).")
@click.option("--limit", type=click.IntRange(1, 50), default=None, help="How many skills.")
@json_option
@click.pass_context
@handle_errors
def route_command(
    ctx: click.Context,
    message: str,
    project: str,
    scorer: str | None,
    limit: int | None,
    as_json: bool,
) -> None:
    """Rank the skills that fit MESSAGE, with scores and the terms that matched.

    A run saves what it routed with in .amelio/cache/, and the next run routes from
    it without opening the database layer while no skill, routing example, setting
    or AMELIO_* variable changed (see docs/router.md)."""
    from amelio.routing import snapshot as route_snapshot

    route = route_snapshot.route_from_snapshot(
        ctx.obj.get("workspace"), message, project=project, scorer=scorer, limit=limit
    )
    if route is None:
        from amelio.cli._common import workspace

        route = route_snapshot.route_and_save(
            workspace(ctx), message, project=project, scorer=scorer, limit=limit
        )
    if as_json:
        print_json(route.to_dict())
        return
    if not route.hits:
        click.echo(f"No skill matches (scorer {route.scorer}).")
        return
    table(
        ["#", "skill", "score", "matched"],
        [
            (n, h.name, f"{h.score:g}", ", ".join(h.matched))
            for n, h in enumerate(route.hits, start=1)
        ],
    )
