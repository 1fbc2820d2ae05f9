"""``amelio feedback``: votes on answers, and the feedback event store.

``amelio feedback ID up|down|fixit`` (the assistant's 👍/👎/Fix It, the ``give``
subcommand) predates the event store, so a first argument that is a number is
routed to ``give``: scripts written for it keep working.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from amelio.cli._common import handle_errors, json_option, main, print_json, workspace
from amelio.feedback import (
    Collector,
    feedback_stats,
    json_schema,
    purge_events,
    verify_events,
)
from amelio.feedback.collector import EventStatus
from amelio.quality import KINDS, give_feedback

_SHOWN_REJECTIONS = 20


class _FeedbackGroup(click.Group):
    """A group whose numeric first argument means the ``give`` subcommand."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0].isdigit():
            args = ["give", *args]
        return super().parse_args(ctx, args)


@main.group("feedback", cls=_FeedbackGroup)
def feedback_group() -> None:
    """Feedback: 👍/👎/Fix It on answers (`amelio feedback ID up`), and the event store."""


@feedback_group.command("give")
@click.argument("interaction_id", type=int)
@click.argument("kind", type=click.Choice(KINDS))
@click.option("--comment", "-m", default=None, help="What was wrong / the rule to learn.")
@click.option("--user", default=None, help="Who is voting (a user's last vote stands).")
@json_option
@click.pass_context
@handle_errors
def give_command(ctx: click.Context, interaction_id: int, kind: str, comment: str | None,
                 user: str | None, as_json: bool) -> None:
    """Record 👍 (up), 👎 (down) or 🛠️ Fix It (fixit) on an interaction."""
    result = give_feedback(workspace(ctx), interaction_id, kind, comment=comment, user=user)
    if as_json:
        print_json(result.to_dict())
        return
    verb = f"replaced {result.replaced}" if result.replaced else "recorded"
    click.echo(f"Feedback {kind} {verb} on interaction {interaction_id}.")
    if result.learning:
        click.echo(f"Learning {result.learning.id}: {result.learning.rule}")
    for lid in result.retired_learning_ids:
        click.echo(f"Learning {lid} retired (more harmful than helpful).")


@feedback_group.command("schema")
def schema_command() -> None:
    """Print the JSON Schema of MartyFeedbackEventV1."""
    print_json(json_schema())


@feedback_group.command("ingest")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@json_option
@click.pass_context
@handle_errors
def ingest_command(ctx: click.Context, file: Path, as_json: bool) -> None:
    """Ingest events from an NDJSON file (or a JSON array), as the API would.

    The same checks apply (schema, consent, tokens, anonymization, duplicates),
    without the API's rate limits. Rejections name the line and the field.
    """
    collector = Collector(workspace(ctx))
    counts = dict.fromkeys(("accepted", "duplicate", "rejected", "dropped"), 0)
    rejected: list[EventStatus] = []
    for result in collector.ingest_file(file):
        for name, n in result.counts().items():
            counts[name] += n
        rejected.extend(s for s in result.statuses if s.status == "rejected")
    if as_json:
        print_json({**counts, "rejections": [s.to_dict() for s in rejected]})
        return
    click.echo(", ".join(f"{n} {name}" for name, n in counts.items()))
    for status in rejected[:_SHOWN_REJECTIONS]:
        click.echo(f"line {status.position}: {status.field or 'event'}: {status.reason}")
    if len(rejected) > _SHOWN_REJECTIONS:
        click.echo(f"… and {len(rejected) - _SHOWN_REJECTIONS} more rejections (--json "
                   "lists them all).")


@feedback_group.command("verify")
@json_option
@click.pass_context
@handle_errors
def verify_command(ctx: click.Context, as_json: bool) -> None:
    """Check the signature chain of stored events; exit 1 at the first tampered or
    missing event."""
    report = verify_events(workspace(ctx))
    if as_json:
        print_json(report.to_dict())
    elif report.ok:
        click.echo(f"OK: {report.checked} events verified (chain {report.anchor_seq + 1}"
                   f"–{report.last_seq}).")
    else:
        where = f" at seq {report.seq}" if report.seq is not None else ""
        event = f" (event {report.event_id})" if report.event_id else ""
        click.echo(f"FAILED{where}{event}: {report.problem}; {report.checked} events "
                   "verified before it.")
    if not report.ok:
        sys.exit(1)


@feedback_group.command("purge")
@click.option("--older-than", "older_than", type=click.IntRange(min=0), default=None,
              metavar="DAYS", help="Remove events that happened more than DAYS ago "
              "(default: feedback_retention_days).")
@json_option
@click.pass_context
@handle_errors
def purge_command(ctx: click.Context, older_than: int | None, as_json: bool) -> None:
    """Delete old feedback events (retention); the chain stays verifiable."""
    report = purge_events(workspace(ctx), older_than)
    if as_json:
        print_json(report.to_dict())
        return
    click.echo(f"Purged {report.deleted} events; the chain now starts after seq "
               f"{report.anchor_seq}.")


@feedback_group.command("stats")
@json_option
@click.pass_context
@handle_errors
def stats_command(ctx: click.Context, as_json: bool) -> None:
    """Stored events per type, their time span, and the chain's length."""
    stats = feedback_stats(workspace(ctx))
    if as_json:
        print_json(stats)
        return
    click.echo(f"{stats['total']} events stored (chain at seq {stats['chain']['lastSeq']}).")
    for name, n in stats["byType"].items():
        click.echo(f"  {name:24} {n}")
