"""``amelio mcp``: the MCP server over stdio, for agents that answer with their own model."""

from __future__ import annotations

import click

from amelio.cli._common import handle_errors, main, workspace
from amelio.workspace.projects import DEFAULT_PROJECT


@main.command("mcp")
@click.option(
    "--project",
    "-p",
    default=DEFAULT_PROJECT,
    show_default=True,
    help="Project (tenant) the tools, resources and prompt work in.",
)
@click.pass_context
@handle_errors
def mcp_command(ctx: click.Context, project: str) -> None:
    """Serve Amelio's MCP server on stdin/stdout (an MCP client starts this command).

    Tools: route_skills, get_skill, check_answer, log_interaction, give_feedback,
    add_learning, list_learnings, search, ask_knowledge. Resources: each skill's
    SKILL.md and the project's learnings.md. Prompt: system_block. Needs
    `pip install 'amelio[mcp]'`; stdout carries the protocol, so nothing else is
    printed there.
    """
    from amelio.mcp.server import run_stdio  # the SDK loads only for this command

    run_stdio(workspace(ctx), project=project)
