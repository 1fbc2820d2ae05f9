"""Chat, logging and quality: ``amelio chat``, ``amelio log``, ``amelio quality``
(``amelio feedback`` is in :mod:`amelio.cli.feedback`)."""

from __future__ import annotations

import sys

import click

from amelio.cli._common import handle_errors, json_option, main, print_json, table, workspace
from amelio.workspace.projects import DEFAULT_PROJECT


@main.command("chat")
@click.argument("message")
@click.option("--project", "-p", default=DEFAULT_PROJECT, show_default=True)
@click.option("--user", default=None, help="Who is asking (stored only as a keyed hash).")
@json_option
@click.pass_context
@handle_errors
def chat(ctx: click.Context, message: str, project: str, user: str | None, as_json: bool) -> None:
    """Ask the assistant; the answer streams, then its eval footnotes."""
    from amelio.assistant.respond import Reply, respond_stream
    from amelio.llm import TextDelta

    reply: Reply | None = None
    for event in respond_stream(workspace(ctx), message, project=project, user=user):
        if isinstance(event, TextDelta):
            if not as_json:
                click.echo(event.text, nl=False)
        else:
            reply = event
    assert reply is not None
    if as_json:
        print_json(reply.to_dict())
        return
    click.echo("")
    if reply.footnotes:
        click.echo("")
        for note in reply.footnotes:
            click.echo(note)
    skill = f", skill {reply.applied_skill}" if reply.applied_skill else ""
    click.echo(
        f"[interaction {reply.interaction_id}{skill}; feedback: "
        f"amelio feedback {reply.interaction_id} up|down|fixit]",
        err=True,
    )


@main.command("log")
@click.argument("message")
@click.argument("answer")
@click.option("--project", "-p", default=DEFAULT_PROJECT, show_default=True)
@click.option(
    "--skill",
    "skills",
    multiple=True,
    help="A skill the answer used (repeatable; the first one's rules check it). "
    "Default: the router attributes the message.",
)
@click.option("--model", default=None, help="The model that answered.")
@click.option("--provider", default=None, help="Who answered (default: external).")
@click.option(
    "--idempotency-key",
    default=None,
    help="A retry with the same key returns the first interaction.",
)
@json_option
@click.pass_context
@handle_errors
def log_command(
    ctx: click.Context,
    message: str,
    answer: str,
    project: str,
    skills: tuple[str, ...],
    model: str | None,
    provider: str | None,
    idempotency_key: str | None,
    as_json: bool,
) -> None:
    """Record an exchange answered elsewhere; its evals run and it counts in quality.

    MESSAGE or ANSWER '-' reads that one from standard input.
    """
    from amelio.assistant.respond import log_exchange

    if message == "-" or answer == "-":
        if message == answer:
            raise click.UsageError("Only one of MESSAGE and ANSWER can be read from stdin.")
        text = sys.stdin.read()
        message, answer = (text, answer) if message == "-" else (message, text)
    reply = log_exchange(
        workspace(ctx),
        message,
        answer,
        project=project,
        skills=list(skills) or None,
        model=model,
        provider=provider,
        idempotency_key=idempotency_key,
    )
    if as_json:
        print_json(reply.to_dict())
        return
    skill = f", skill {reply.applied_skill}" if reply.applied_skill else ", no skill"
    verdict = "passed" if reply.evals.success else "failed"
    click.echo(f"interaction {reply.interaction_id}{skill}: evals {verdict}")
    for note in reply.footnotes:
        click.echo(note)


@main.command("quality")
@click.option("--project", "-p", default=None, help="One project (default: all).")
@json_option
@click.pass_context
@handle_errors
def quality_command(ctx: click.Context, project: str | None, as_json: bool) -> None:
    """Quality metrics per skill: use, success rate, feedback, failing rules."""
    from amelio.assistant.quality import quality_metrics

    metrics = quality_metrics(workspace(ctx), project)
    if as_json:
        print_json([m.to_dict() for m in metrics])
        return
    if not metrics:
        click.echo("No interactions yet.")
        return
    table(
        [
            "project",
            "skill",
            "applied",
            "success",
            "👍",
            "👎 or 🛠️",
            "top failing rule",
            "last used",
        ],
        [
            (
                m.project,
                m.skill,
                m.applied_count,
                f"{m.success_rate:.0%}",
                m.feedback_positive,
                f"{m.feedback_negative} ({m.feedback_fixit} 🛠️)"
                if m.feedback_fixit
                else m.feedback_negative,
                max(m.rule_failures.items(), key=lambda x: x[1])[0] if m.rule_failures else "-",
                f"{m.last_used:%Y-%m-%d %H:%M}" if m.last_used else "-",
            )
            for m in metrics
        ],
    )
