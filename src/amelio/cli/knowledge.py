"""The knowledge loop: ``amelio knowledge …`` and ``amelio watch``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from amelio import knowledge
from amelio.cli._common import (
    handle_errors,
    json_option,
    main,
    print_json,
    short,
    table,
    workspace,
)
from amelio.errors import InvalidInput
from amelio.workspace.projects import DEFAULT_PROJECT

if TYPE_CHECKING:
    from amelio.knowledge import DrainReport, FolderReport
    from amelio.workspace.folder import Workspace

notebook_option = click.option("--notebook", "-n", required=True, help="Notebook name.")
project_option = click.option(
    "--project",
    "-p",
    default=DEFAULT_PROJECT,
    show_default=True,
    help="Project the notebook belongs to.",
)


def _print_drain(report: DrainReport) -> None:
    parts = [f"{len(report.indexed)} indexed", f"{len(report.unchanged)} unchanged"]
    if report.failed:
        parts.append(f"{len(report.failed)} failed (will retry)")
    if report.dead:
        parts.append(f"{len(report.dead)} dead letters (`amelio knowledge failures`)")
    if report.pending:
        parts.append(f"{report.pending} still queued")
    click.echo("Drained: " + ", ".join(parts) + ".")


def _read_sources(
    ws: Workspace, path: Path, kind: str | None, source_id: str | None
) -> list[knowledge.Source]:
    """A JSON source (or a list of them), JSON lines, or one document file."""
    from amelio.knowledge.watcher import SUFFIXES

    limit = ws.settings.max_text_chars
    suffix = path.suffix.lower()
    if suffix in SUFFIXES:
        return [
            knowledge.read_document(path, max_chars=limit, source_id=source_id, kind=kind or "doc")
        ]
    if suffix not in (".json", ".jsonl"):
        raise InvalidInput(
            f"{path}: give a .json or .jsonl file of sources, or a document "
            f"({', '.join(sorted(SUFFIXES))}).",
            file=str(path),
        )
    text = path.read_text(encoding="utf-8")
    try:
        data: Any = (
            [json.loads(line) for line in text.splitlines() if line.strip()]
            if suffix == ".jsonl"
            else json.loads(text)
        )
    except json.JSONDecodeError as exc:
        raise InvalidInput(
            f"{path}: invalid JSON at line {exc.lineno}: {exc.msg}", file=str(path)
        ) from exc
    items = data if isinstance(data, list) else [data]
    return [knowledge.Source.parse(item, max_chars=limit) for item in items]


@main.group("knowledge")
def knowledge_group() -> None:
    """Notebooks: sync sources, ask with citations, dead letters."""


@knowledge_group.command("notebooks")
@click.option("--project", "-p", default=None, help="One project (default: all).")
@json_option
@click.pass_context
@handle_errors
def notebooks(ctx: click.Context, project: str | None, as_json: bool) -> None:
    """Notebooks with their status: sources, chunks, last sync, queue, failures."""
    found = knowledge.list_notebooks(workspace(ctx), project=project)
    if as_json:
        print_json([n.to_dict() for n in found])
        return
    table(
        ["name", "project", "sources", "chunks", "last sync", "pending", "failures"],
        [
            (
                n.name,
                n.project,
                n.sources,
                n.chunks,
                f"{n.last_sync:%Y-%m-%d %H:%M}" if n.last_sync else "-",
                n.pending,
                n.failures,
            )
            for n in found
        ],
    )


@knowledge_group.command("create")
@click.argument("name")
@project_option
@click.pass_context
@handle_errors
def create(ctx: click.Context, name: str, project: str) -> None:
    """Create notebook NAME."""
    nb = knowledge.create_notebook(workspace(ctx), name, project=project)
    click.echo(f"Notebook {nb.name} created in project {nb.project}.")


@knowledge_group.command("sync")
@click.argument(
    "files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@notebook_option
@project_option
@click.option("--kind", default=None, help="Kind of a document file's source (default: doc).")
@click.option(
    "--source-id",
    default=None,
    help="Source id of a single document file (default: its file name).",
)
@click.option(
    "--no-drain", is_flag=True, help="Only queue; a running `amelio serve` worker indexes them."
)
@json_option
@click.pass_context
@handle_errors
def sync(
    ctx: click.Context,
    files: tuple[Path, ...],
    notebook: str,
    project: str,
    kind: str | None,
    source_id: str | None,
    no_drain: bool,
    as_json: bool,
) -> None:
    """Queue FILES (JSON sources, JSON lines, or .md/.txt/.html documents) and index them."""
    if source_id and len(files) > 1:
        raise click.UsageError("--source-id names one file's source; give one file.")
    ws = workspace(ctx)
    sources = [s for f in files for s in _read_sources(ws, f, kind, source_id)]
    receipt = knowledge.enqueue(ws, notebook, sources, project=project)
    report = None if no_drain else knowledge.drain(ws, wait=True)
    if as_json:
        print_json(receipt.to_dict() | {"drained": report.to_dict() if report else None})
        return
    click.echo(f"Queued {len(receipt.queued)}, unchanged {len(receipt.unchanged)}.")
    if report is not None:
        _print_drain(report)


@knowledge_group.command("delete")
@click.argument("source_id")
@notebook_option
@project_option
@click.pass_context
@handle_errors
def delete(ctx: click.Context, source_id: str, notebook: str, project: str) -> None:
    """Remove SOURCE_ID (and any queued version of it) from a notebook."""
    knowledge.delete_source(workspace(ctx), notebook, source_id, project=project)
    click.echo(f"Removed {source_id} from {notebook}.")


@knowledge_group.command("sources")
@notebook_option
@project_option
@json_option
@click.pass_context
@handle_errors
def sources(ctx: click.Context, notebook: str, project: str, as_json: bool) -> None:
    """A notebook's indexed sources, most recently updated first."""
    found = knowledge.list_sources(workspace(ctx), notebook, project=project)
    if as_json:
        print_json(found)
        return
    table(
        ["source", "kind", "title", "chunks", "updated"],
        [
            (
                short(s["sourceId"], 40),
                s["kind"],
                short(s["title"], 40),
                s["chunks"],
                s["updatedAt"][:19],
            )
            for s in found
        ],
    )


@knowledge_group.command("query")
@click.argument("question")
@notebook_option
@project_option
@click.option(
    "--top-k",
    type=click.IntRange(1, 50),
    default=None,
    help="Passages to retrieve (default: setting knowledge_top_k).",
)
@json_option
@click.pass_context
@handle_errors
def query(
    ctx: click.Context, question: str, notebook: str, project: str, top_k: int | None, as_json: bool
) -> None:
    """Answer QUESTION from a notebook, with numbered citations."""
    answer = knowledge.answer_question(
        workspace(ctx), notebook, question, project=project, top_k=top_k
    )
    if as_json:
        print_json(answer.to_dict())
        return
    click.echo(answer.answer)
    if answer.llm_error:
        click.echo(f"(LLM: {answer.llm_error})", err=True)
    if answer.citations:
        click.echo("")
    for n, p in enumerate(answer.citations, start=1):
        where = f" {p.url}" if p.url else ""
        click.echo(f"[{n}] {p.title} — {p.source_id}, chunk {p.position}{where}")


@knowledge_group.command("generate")
@click.argument("objective")
@notebook_option
@project_option
@json_option
@click.pass_context
@handle_errors
def generate(
    ctx: click.Context, objective: str, notebook: str, project: str, as_json: bool
) -> None:
    """Draft a new skill for OBJECTIVE from a notebook, as a proposal (needs an LLM)."""
    made = knowledge.generate_skill(workspace(ctx), notebook, objective, project=project)
    if as_json:
        print_json(made.to_dict())
        return
    p = made.proposal
    click.echo(
        f"Proposal #{p.id}: new skill {p.skill} (from {len(made.passages)} passages). "
        f"Review it with `amelio proposals show {p.id}`, then approve or reject it."
    )


@knowledge_group.command("failures")
@click.option("--notebook", "-n", default=None, help="One notebook (default: all).")
@project_option
@json_option
@click.pass_context
@handle_errors
def failures(ctx: click.Context, notebook: str | None, project: str, as_json: bool) -> None:
    """Dead letters: sources that failed every try."""
    found = knowledge.failures(workspace(ctx), notebook=notebook, project=project)
    if as_json:
        print_json([f.to_dict() for f in found])
        return
    if not found:
        click.echo("No dead letters.")
        return
    table(
        ["id", "notebook", "source", "tries", "failed", "error"],
        [
            (
                f.id,
                f.notebook,
                short(f.source_id, 30),
                f.attempts,
                f"{f.failed_at:%Y-%m-%d %H:%M}" if f.failed_at else "-",
                short(f.error, 60),
            )
            for f in found
        ],
    )


@knowledge_group.command("retry")
@click.argument("ids", nargs=-1, type=int)
@click.option("--all", "retry_all", is_flag=True, help="Every dead letter.")
@click.option("--no-drain", is_flag=True, help="Only put them back in the queue.")
@click.pass_context
@handle_errors
def retry(ctx: click.Context, ids: tuple[int, ...], retry_all: bool, no_drain: bool) -> None:
    """Put dead letters IDS (or --all) back in the queue with fresh tries, and drain."""
    if bool(ids) == retry_all:
        raise click.UsageError("Give dead-letter IDS or --all.")
    ws = workspace(ctx)
    retried = knowledge.retry(ws, None if retry_all else ids)
    click.echo(f"Retrying {len(retried)} source(s).")
    if retried and not no_drain:
        _print_drain(knowledge.drain(ws, wait=True))


@knowledge_group.command("drain")
@click.option("--no-wait", is_flag=True, help="Do not wait for retries that are not due yet.")
@json_option
@click.pass_context
@handle_errors
def drain(ctx: click.Context, no_wait: bool, as_json: bool) -> None:
    """Index everything queued now (what the service's worker does in the background)."""
    report = knowledge.drain(workspace(ctx), wait=not no_wait)
    if as_json:
        print_json(report.to_dict())
    else:
        _print_drain(report)


@knowledge_group.command("health")
@json_option
@click.pass_context
@handle_errors
def health(ctx: click.Context, as_json: bool) -> None:
    """Queue depth, the oldest pending source, dead letters."""
    state = knowledge.queue_health(workspace(ctx))
    if as_json:
        print_json(state)
        return
    age = state["oldestPendingAgeSeconds"]
    click.echo(
        f"{state['status']}: {state['queueDepth']} queued"
        + (f" (oldest {age:.0f}s)" if age is not None else "")
        + f", {state['deadLetters']} dead letters."
    )


@main.command("watch")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@notebook_option
@project_option
@click.pass_context
@handle_errors
def watch(ctx: click.Context, directory: Path, notebook: str, project: str) -> None:
    """Keep a notebook in sync with DIRECTORY's .md, .txt and .html files (Ctrl-C stops)."""
    ws = workspace(ctx)

    def show(report: FolderReport) -> None:
        for sid in report.queued:
            click.echo(f"synced   {sid}")
        for sid in report.removed:
            click.echo(f"removed  {sid}")
        for error in report.errors:
            click.echo(f"skipped  {error}", err=True)
        if report.drained and (report.drained.failed or report.drained.dead):
            _print_drain(report.drained)

    click.echo(f"Watching {directory.resolve()} for notebook {notebook} (Ctrl-C stops).")
    knowledge.watch_folder(ws, directory, notebook, project=project, on_report=show)
