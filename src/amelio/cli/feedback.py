"""``amelio feedback``: two different things under one name, kept apart in its help.

* Answer feedback (``give``): 👍/👎/Fix It on one assistant answer, which becomes
  learnings and quality metrics (:func:`amelio.assistant.quality.give_answer_feedback`).
* Feedback events (``schema``, ``ingest``, ``verify``, ``purge``, ``stats``): the
  typed, anonymized ``MartyFeedbackEventV1`` events that clients of search and the
  assistant send, which the collector validates, signs and stores
  (:mod:`amelio.feedback`).

``amelio feedback ID up|down|fixit`` (``give``) predates the event store, so a first
argument that is a number is routed to ``give``: scripts written for it keep working.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import click

from amelio.assistant.quality import ANSWER_FEEDBACK_KINDS
from amelio.cli._common import handle_errors, json_option, main, print_json, workspace

_SHOWN_REJECTIONS = 20
_ANSWER_COMMANDS = ("give",)


class _FeedbackGroup(click.Group):
    """A group whose numeric first argument means the ``give`` subcommand, and whose
    help lists answer feedback and feedback events apart."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0].isdigit():
            args = ["give", *args]
        return super().parse_args(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        answer: list[tuple[str, str]] = []
        events: list[tuple[str, str]] = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                (answer if name in _ANSWER_COMMANDS else events).append(
                    (name, command.get_short_help_str(formatter.width))
                )
        for title, rows in (
            ("Answer feedback (👍/👎/Fix It on an assistant answer)", answer),
            ("Feedback events (MartyFeedbackEventV1, the event store)", events),
        ):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


@main.group("feedback", cls=_FeedbackGroup)
def feedback_group() -> None:
    """Answer feedback and feedback events: two different things.

    \b
    Answer feedback: 👍/👎/Fix It on one assistant answer
      (`amelio feedback ID up`, or `give`); it becomes learnings and
      counts in `amelio quality`.
    Feedback events: typed, anonymized MartyFeedbackEventV1 events that
      search and assistant clients send (clicks, dwell, reformulations,
      votes on results) for the relevance loop; `ingest`, `export`, `verify`,
      `purge`, `stats` and `schema` work on their store.
    """


@feedback_group.command(
    "give", short_help="👍 (up), 👎 (down) or 🛠️ Fix It (fixit) on an interaction's answer."
)
@click.argument("interaction_id", type=int)
@click.argument("kind", type=click.Choice(ANSWER_FEEDBACK_KINDS))
@click.option("--comment", "-m", default=None, help="What was wrong / the rule to learn.")
@click.option("--user", default=None, help="Who is voting (a user's last vote stands).")
@json_option
@click.pass_context
@handle_errors
def give_command(
    ctx: click.Context,
    interaction_id: int,
    kind: str,
    comment: str | None,
    user: str | None,
    as_json: bool,
) -> None:
    """Answer feedback: 👍 (up), 👎 (down) or 🛠️ Fix It (fixit) on an interaction.

    👎 and Fix It become learnings; `amelio feedback ID KIND` runs this too.
    """
    from amelio.assistant.quality import give_answer_feedback

    result = give_answer_feedback(workspace(ctx), interaction_id, kind, comment=comment, user=user)
    if as_json:
        print_json(result.to_dict())
        return
    verb = f"replaced {result.replaced}" if result.replaced else "recorded"
    click.echo(f"Feedback {kind} {verb} on interaction {interaction_id}.")
    if result.learning:
        click.echo(f"Learning {result.learning.id}: {result.learning.rule}")
    for lid in result.retired_learning_ids:
        click.echo(f"Learning {lid} retired (more harmful than helpful).")


@feedback_group.command("schema", short_help="Print the JSON Schema of MartyFeedbackEventV1.")
def schema_command() -> None:
    """Feedback events: print the JSON Schema of MartyFeedbackEventV1."""
    from amelio.feedback import json_schema

    print_json(json_schema())


def _action_map(values: tuple[str, ...]) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for value in values:
        action, sep, event_type = value.partition("=")
        if not sep or not action or not event_type:
            raise click.BadParameter(
                f"{value!r} is not ACTION=EVENT_TYPE (e.g. add_to_cart=result_pinned)",
                param_hint="--map",
            )
        pairs[action] = event_type
    return pairs


@feedback_group.command(
    "ingest",
    short_help="Ingest events from an NDJSON file (or a JSON array), as the API "
    "would; --format ubi for OpenSearch UBI.",
)
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["marty", "ubi"]),
    default="marty",
    show_default=True,
    help="marty: MartyFeedbackEventV1 events; ubi: OpenSearch "
    "User Behavior Insights queries and events (docs/feedback.md#opensearch-ubi).",
)
@click.option(
    "--consent",
    type=click.Choice(["granted", "denied", "unknown"]),
    default=None,
    help="UBI only, and required there: UBI events carry no consent, so say "
    "whether the source collected them with consent (only granted ones are kept).",
)
@click.option(
    "--project",
    default="default",
    show_default=True,
    help="UBI only: the project whose impressions the UBI queries become.",
)
@click.option(
    "--map",
    "mappings",
    multiple=True,
    metavar="ACTION=EVENT_TYPE",
    help="UBI only: take this action_name as this event type (repeatable), e.g. "
    "add_to_cart=result_pinned.",
)
@json_option
@click.pass_context
@handle_errors
def ingest_command(
    ctx: click.Context,
    file: Path,
    fmt: str,
    consent: str | None,
    project: str,
    mappings: tuple[str, ...],
    as_json: bool,
) -> None:
    """Feedback events: ingest an NDJSON file (or a JSON array), as the API would.

    The same checks apply (schema, consent, tokens, anonymization, duplicates),
    without the API's rate limits. Rejections name the line and the field.

    With --format ubi the file holds OpenSearch UBI records (ubi_queries and/or
    ubi_events, one per line): each is validated against the UBI 1.3.0 schema;
    queries become search impressions, events become MartyFeedbackEventV1 events
    and go through the same checks. Importing a file twice stores nothing new.
    """
    if fmt == "ubi":
        _ingest_ubi(ctx, file, consent, project, _action_map(mappings), as_json)
        return
    if consent is not None or mappings or project != "default":
        raise click.UsageError(
            "--consent, --map and --project apply to --format ubi only "
            "(MartyFeedbackEventV1 events carry their own consent)."
        )
    from amelio.feedback import Collector
    from amelio.feedback.collector import EventStatus

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
    _echo_problems([(s.position, s.field, s.reason) for s in rejected], "event", "rejections")


def _echo_problems(
    problems: Sequence[tuple[int, str | None, str | None]], unnamed: str, noun: str
) -> None:
    """The first problems of an import, one a line (``unnamed`` stands for a missing
    field), and how many more ``--json`` lists: a terminal is no place for ten
    thousand of them."""
    for line, where, reason in problems[:_SHOWN_REJECTIONS]:
        click.echo(f"line {line}: {where or unnamed}: {reason}")
    if len(problems) > _SHOWN_REJECTIONS:
        click.echo(
            f"… and {len(problems) - _SHOWN_REJECTIONS} more {noun} (--json lists them all)."
        )


def _ingest_ubi(
    ctx: click.Context,
    file: Path,
    consent: str | None,
    project: str,
    actions: dict[str, str],
    as_json: bool,
) -> None:
    from amelio.feedback.ubi import ingest_ubi

    if consent is None:
        raise click.UsageError(
            "UBI events carry no consent: pass --consent granted to state "
            "that the source collected them with consent (events "
            "without it are dropped, as the API drops them)."
        )
    report = ingest_ubi(workspace(ctx), file, consent=consent, project=project, actions=actions)
    if as_json:
        print_json(report.to_dict())
        return
    q, e = report.queries, report.events
    click.echo(
        f"queries: {q['imported']} imported, {q['duplicate']} duplicate, {q['rejected']} rejected"
    )
    click.echo("events: " + ", ".join(f"{n} {name}" for name, n in e.items()))
    _echo_problems(report.problems, "record", "problems")


@feedback_group.command(
    "export", short_help="Write stored search feedback as OpenSearch UBI queries and events."
)
@click.argument("out_dir", metavar="DIR", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["ubi"]),
    required=True,
    help="ubi: OpenSearch User Behavior Insights 1.3.0 (ubi_queries.ndjson and ubi_events.ndjson).",
)
@click.option(
    "--since",
    "since_days",
    type=click.IntRange(min=0),
    default=None,
    metavar="DAYS",
    help="Only what happened in the last DAYS days.",
)
@click.option("--force", is_flag=True, help="Replace the files if DIR already has them.")
@json_option
@click.pass_context
@handle_errors
def export_command(
    ctx: click.Context, out_dir: Path, fmt: str, since_days: int | None, force: bool, as_json: bool
) -> None:
    """Feedback events: write them out in a standard format (--format ubi).

    ubi_queries.ndjson gets one UBI query per logged search impression (its hits in
    rank order), ubi_events.ndjson one UBI event per stored search event (clicks,
    dwell, reformulations, pins, hides). Identities are the stored pseudonyms; every
    record is validated against the UBI schema before it is written.
    """
    import time

    from amelio.feedback.ubi import export_ubi

    since_ms = None if since_days is None else int((time.time() - since_days * 86_400) * 1000)
    report = export_ubi(workspace(ctx), out_dir, since_ms=since_ms, force=force)
    if as_json:
        print_json(report.to_dict())
        return
    click.echo(
        f"{report.queries} queries and {report.events} events written to {out_dir}"
        + (
            f" ({report.skipped} events about assistant answers left out: UBI is about search)"
            if report.skipped
            else ""
        )
        + "."
    )


@feedback_group.command(
    "verify", short_help="Check the signature chain of the stored events (exit 1 if broken)."
)
@json_option
@click.pass_context
@handle_errors
def verify_command(ctx: click.Context, as_json: bool) -> None:
    """Feedback events: check the signature chain of the stored events; exit 1 at the
    first tampered or missing event."""
    from amelio.feedback import verify_events

    report = verify_events(workspace(ctx))
    if as_json:
        print_json(report.to_dict())
    elif report.ok:
        click.echo(
            f"OK: {report.checked} events verified (chain {report.anchor_seq + 1}"
            f"–{report.last_seq})."
        )
    else:
        where = f" at seq {report.seq}" if report.seq is not None else ""
        event = f" (event {report.event_id})" if report.event_id else ""
        click.echo(
            f"FAILED{where}{event}: {report.problem}; {report.checked} events verified before it."
        )
    if not report.ok:
        sys.exit(1)


@feedback_group.command(
    "purge", short_help="Delete old events (retention); the chain stays verifiable."
)
@click.option(
    "--older-than",
    "older_than",
    type=click.IntRange(min=0),
    default=None,
    metavar="DAYS",
    help="Remove events that happened more than DAYS ago (default: feedback_retention_days).",
)
@json_option
@click.pass_context
@handle_errors
def purge_command(ctx: click.Context, older_than: int | None, as_json: bool) -> None:
    """Feedback events: delete old ones (retention); the chain stays verifiable."""
    from amelio.feedback import purge_events

    report = purge_events(workspace(ctx), older_than)
    if as_json:
        print_json(report.to_dict())
        return
    click.echo(
        f"Purged {report.deleted} events; the chain now starts after seq {report.anchor_seq}."
    )


@feedback_group.command("stats", short_help="Stored events per type, and the chain's length.")
@json_option
@click.pass_context
@handle_errors
def stats_command(ctx: click.Context, as_json: bool) -> None:
    """Feedback events: how many are stored per type, and the chain's length."""
    from amelio.feedback import feedback_stats

    stats = feedback_stats(workspace(ctx))
    if as_json:
        print_json(stats)
        return
    click.echo(f"{stats['total']} events stored (chain at seq {stats['chain']['lastSeq']}).")
    for name, n in stats["byType"].items():
        click.echo(f"  {name:24} {n}")
