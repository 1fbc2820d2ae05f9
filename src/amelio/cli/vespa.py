"""``amelio vespa``: the application package, feeding the corpus, syncing signals."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from amelio.cli._common import handle_errors, json_option, main, print_json, workspace

if TYPE_CHECKING:
    from amelio.search.engines.vespa import FeedReport

_URL = click.option(
    "--url", default=None, help="Vespa endpoint (default: AMELIO_VESPA_URL / vespa_url)."
)
_CONCURRENCY = click.option(
    "--concurrency",
    type=click.IntRange(1, 256),
    default=8,
    show_default=True,
    help="Requests in flight at once.",
)


@main.group("vespa")
def vespa_group() -> None:
    """Search at scale on Vespa (see docs/scaling.md#search-at-scale-on-vespa)."""


def _report(what: str, report: FeedReport, as_json: bool) -> None:
    if as_json:
        print_json(report.to_dict())
    else:
        click.echo(f"{report.sent} {what} sent, {report.failed} failed.")
        for error in report.errors:
            click.echo(f"  {error}")
    if report.failed:
        raise SystemExit(1)


@vespa_group.command("package")
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--rerank",
    type=click.IntRange(1, 10_000),
    default=None,
    help="Hits the global phase re-ranks (default: search_candidates).",
)
@click.pass_context
@handle_errors
def package_command(ctx: click.Context, out: Path, rerank: int | None) -> None:
    """Write the Vespa application package (services.xml, schemas/doc.sd) to OUT."""
    from amelio.search.engines.vespa import write_package

    settings = workspace(ctx).settings
    files = write_package(out, rerank=rerank or settings.search_candidates)
    click.echo(
        "Wrote "
        + ", ".join(str(f.relative_to(out)) for f in files)
        + f" under {out}; deploy it with `vespa deploy {out}`."
    )


@vespa_group.command("feed")
@click.option(
    "--file",
    "file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Send this BEIR/NDJSON file (deletions too) instead of the workspace corpus.",
)
@_URL
@_CONCURRENCY
@json_option
@click.pass_context
@handle_errors
def feed_command(
    ctx: click.Context, file: Path | None, url: str | None, concurrency: int, as_json: bool
) -> None:
    """Send the corpus to Vespa (document/v1; a known id is replaced)."""
    from amelio.search.documents import read_documents
    from amelio.search.engines.registry import workspace_corpus
    from amelio.search.engines.vespa import feed

    ws = workspace(ctx)
    items = (
        list(read_documents(file))
        if file is not None
        else workspace_corpus(ws.settings).all_documents()
    )
    report = feed(url or ws.settings.vespa_url, items, concurrency=concurrency)
    _report("document(s)", report, as_json)


@vespa_group.command("sync-signals")
@_URL
@_CONCURRENCY
@json_option
@click.pass_context
@handle_errors
def sync_command(ctx: click.Context, url: str | None, concurrency: int, as_json: bool) -> None:
    """Push feedback scores to Vespa as partial updates (run after `amelio signals update`)."""
    from amelio.search.engines.vespa import sync_signals

    ws = workspace(ctx)
    report = sync_signals(ws, url or ws.settings.vespa_url, concurrency=concurrency)
    _report("update(s)", report, as_json)
