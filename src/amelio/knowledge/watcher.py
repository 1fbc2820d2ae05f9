"""The ingest watcher: a folder of documents kept in sync with a notebook (the
seed's ingest-watcher on ``raw/``).

``amelio watch DIR --notebook N`` first reconciles the folder with the notebook
(:func:`sync_folder`: every ``.md``, ``.txt`` and ``.html`` file queued, the
sources of files that are gone removed), then follows changes with the
``watchfiles`` library (:func:`watch_folder`) and applies each batch
(:func:`apply_changes`), draining the queue after each one.

A file's source id is its path relative to the folder (``guides/vpn.md``), its
``updatedAt`` the file's modification time and its url its ``file://``
address, so re-saving an unchanged file re-indexes it, and a file the watcher
never saw is still removed when it is deleted while the watcher is down.
"""

from __future__ import annotations

import html
import os
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import watchfiles

from amelio import db
from amelio.db.schema import knowledge_queue, knowledge_sources
from amelio.errors import AmelioError, InvalidInput, NotFound
from amelio.knowledge.model import Source
from amelio.knowledge.notebooks import delete_source, ensure_notebook, notebook_id
from amelio.knowledge.sync import DrainReport, Indexer, drain, enqueue
from amelio.workspace.folder import Workspace
from amelio.workspace.projects import DEFAULT_PROJECT

__all__ = [
    "SUFFIXES",
    "FolderReport",
    "apply_changes",
    "html_to_text",
    "read_document",
    "sync_folder",
    "watch_folder",
]

SUFFIXES = frozenset({".md", ".markdown", ".txt", ".html", ".htm"})
FILE_KIND = "file"
_HEADING = re.compile(r"^#\s+(.+?)\s*#*\s*$", re.MULTILINE)


class _TextExtractor(HTMLParser):
    """Visible text of an HTML page, block elements on their own lines."""

    _SKIP = frozenset({"script", "style", "noscript", "template", "head"})
    _BLOCK = frozenset(
        {
            "p",
            "div",
            "br",
            "li",
            "tr",
            "h1",
            "h2",
            "h3",
            "h4",
            "h5",
            "h6",
            "section",
            "article",
            "header",
            "footer",
            "pre",
            "blockquote",
            "ul",
            "ol",
            "table",
            "hr",
        }
    )

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title = ""
        self._skipping = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        elif tag in self._SKIP:
            self._skipping += 1
        if tag in self._BLOCK:
            self.parts.append("\n\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in self._SKIP and self._skipping:
            self._skipping -= 1
        if tag in self._BLOCK:
            self.parts.append("\n\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif not self._skipping:
            self.parts.append(data)


def html_to_text(page: str) -> tuple[str, str]:
    """The title and the visible text of an HTML page, paragraphs kept apart."""
    parser = _TextExtractor()
    parser.feed(page)
    parser.close()
    text = "".join(parser.parts)
    paragraphs = (" ".join(p.split()) for p in re.split(r"\n\s*\n", text))
    return " ".join(html.unescape(parser.title).split()), "\n\n".join(p for p in paragraphs if p)


def _mtime(path: Path) -> datetime:
    return datetime.fromtimestamp(path.stat().st_mtime_ns / 1e9, UTC)


def read_document(
    path: Path,
    root: Path | None = None,
    *,
    max_chars: int = 1_000_000,
    source_id: str | None = None,
    kind: str = FILE_KIND,
) -> Source:
    """A ``.md``, ``.txt`` or ``.html`` file as a source (id: its path under ``root``)."""
    path = Path(path)
    if path.suffix.lower() not in SUFFIXES:
        raise InvalidInput(
            f"{path}: only {', '.join(sorted(SUFFIXES))} files are read.", file=str(path)
        )
    raw = path.read_bytes()
    if len(raw) > max_chars * 4:
        raise InvalidInput(
            f"{path}: {len(raw):,} bytes, over the max_text_chars limit.", file=str(path)
        )
    text = raw.decode("utf-8", errors="replace").removeprefix("\ufeff").replace("\r\n", "\n")
    title = ""
    if path.suffix.lower() in (".html", ".htm"):
        title, text = html_to_text(text)
    elif path.suffix.lower() in (".md", ".markdown"):
        heading = _HEADING.search(text)
        title = heading.group(1) if heading else ""
    relative = Path(path.name)
    if root is not None:
        if _outside(path, root.resolve()):
            raise InvalidInput(
                f"{path}: a link to {path.resolve()}, outside {root}; not read.", file=str(path)
            )
        relative = path.resolve().relative_to(root.resolve())
    return Source.parse(
        {
            "sourceId": source_id or relative.as_posix(),
            "kind": kind,
            "title": (title or path.stem)[:500],
            "text": text,
            "url": path.resolve().as_uri(),
            "updatedAt": _mtime(path).isoformat(),
        },
        max_chars=max_chars,
    )


@dataclass
class FolderReport:
    """What one pass over a folder did."""

    queued: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    drained: DrainReport | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "queued": self.queued,
            "unchanged": self.unchanged,
            "removed": self.removed,
            "errors": self.errors,
            "drained": self.drained.to_dict() if self.drained else None,
        }


def _hidden(path: Path, root: Path) -> bool:
    """Outside ``root``, or under a dot-folder or a dot-file in it (.git, editors' swap
    files): never a document."""
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        try:
            parts = path.resolve().relative_to(root).parts
        except ValueError:
            return True
    return any(p.startswith(".") for p in parts)


def _outside(path: Path, root: Path) -> bool:
    """Whether ``path`` is, or goes through, a symlink that leads out of ``root``
    (resolved): the watcher reads only what is in its folder."""
    return not path.resolve().is_relative_to(root)


def _documents(root: Path, report: FolderReport | None = None) -> list[Path]:
    """The documents in ``root``; a symlink leading out of it is skipped (and named
    in ``report``), never read."""
    found = []
    for p in sorted(root.rglob("*")):
        if p.suffix.lower() not in SUFFIXES or _hidden(p, root):
            continue
        if _outside(p, root):
            if report is not None:
                report.errors.append(_escaping(p, root))
        elif p.is_file():
            found.append(p)
    return found


def _escaping(path: Path, root: Path) -> str:
    return f"{path}: a link to {path.resolve()}, outside {root}; skipped"


def _known(ws: Workspace, root: Path, notebook: str, project: str) -> set[str]:
    """Source ids in the notebook (stored or queued) that came from files in ``root``."""
    prefix = root.resolve().as_uri() + "/"
    src, q = knowledge_sources, knowledge_queue
    with db.reading(ws.engine) as conn:
        nid = notebook_id(conn, notebook, project)
        stored = conn.execute(
            sa.select(src.c.source_id, src.c.url).where(
                src.c.notebook_id == nid, src.c.kind == FILE_KIND
            )
        ).all()
        queued = conn.execute(
            sa.select(q.c.source_id, q.c.payload["url"].as_string()).where(q.c.notebook_id == nid)
        ).all()
    return {sid for sid, url in (*stored, *queued) if url and url.startswith(prefix)}


def _queue(
    ws: Workspace,
    root: Path,
    notebook: str,
    project: str,
    paths: Iterable[Path],
    report: FolderReport,
) -> None:
    sources: list[Source] = []
    for path in paths:
        try:
            sources.append(read_document(path, root, max_chars=ws.settings.max_text_chars))
        except (AmelioError, OSError) as exc:  # one bad file never stops the watcher
            report.errors.append(f"{path}: {getattr(exc, 'message', exc)}")
    if sources:
        receipt = enqueue(ws, notebook, sources, project=project)
        report.queued += receipt.queued
        report.unchanged += receipt.unchanged


def _remove(
    ws: Workspace, notebook: str, project: str, source_ids: Iterable[str], report: FolderReport
) -> None:
    for sid in sorted(source_ids):
        try:
            delete_source(ws, notebook, sid, project=project)
            report.removed.append(sid)
        except NotFound:
            pass


def sync_folder(
    ws: Workspace,
    folder: Path,
    notebook: str,
    *,
    project: str = DEFAULT_PROJECT,
) -> FolderReport:
    """Reconcile once: queue every document in ``folder``, remove the sources of
    documents that are no longer there."""
    root = Path(folder).resolve()
    if not root.is_dir():
        raise InvalidInput(f"{root} is not a folder.", file=str(root))
    report = FolderReport()
    present = _documents(root, report)
    _queue(ws, root, notebook, project, present, report)
    ids = {p.relative_to(root).as_posix() for p in present}
    _remove(ws, notebook, project, _known(ws, root, notebook, project) - ids, report)
    return report


def apply_changes(
    ws: Workspace,
    folder: Path,
    notebook: str,
    changes: Iterable[tuple[watchfiles.Change, str]],
    *,
    project: str = DEFAULT_PROJECT,
) -> FolderReport:
    """One batch of file events: queue what was added or changed, remove what is
    gone (a deleted folder removes every source under it)."""
    root = Path(folder).resolve()
    report = FolderReport()
    touched: set[Path] = set()
    gone = False
    for change, name in changes:
        path = Path(name)
        if _hidden(path, root):
            continue
        if change == watchfiles.Change.deleted or not path.exists():
            gone = True
        elif path.suffix.lower() in SUFFIXES and _outside(path, root):
            report.errors.append(_escaping(path, root))
            gone = True  # a document that became such a link is gone from the folder
        elif path.suffix.lower() in SUFFIXES and path.is_file():
            touched.add(path)
    _queue(ws, root, notebook, project, sorted(touched), report)
    if gone:
        present = {p.relative_to(root).as_posix() for p in _documents(root)}
        _remove(ws, notebook, project, _known(ws, root, notebook, project) - present, report)
    return report


def _watch_filter(root: Path) -> Callable[[watchfiles.Change, str], bool]:
    def keep(change: watchfiles.Change, path: str) -> bool:
        if _hidden(Path(path), root):
            return False
        return change == watchfiles.Change.deleted or Path(path).suffix.lower() in SUFFIXES

    return keep


def watch_folder(
    ws: Workspace,
    folder: Path,
    notebook: str,
    *,
    project: str = DEFAULT_PROJECT,
    stop_event: threading.Event | None = None,
    on_report: Callable[[FolderReport], None] | None = None,
    indexer: Indexer | None = None,
    debounce_ms: int = 400,
    step_ms: int = 50,
) -> None:
    """Keep ``notebook`` in sync with ``folder`` until ``stop_event`` is set (or
    Ctrl-C). The notebook is created if it does not exist."""
    root = Path(folder).resolve()
    if not root.is_dir():
        raise InvalidInput(f"{root} is not a folder.", file=str(root))
    ensure_notebook(ws, notebook, project=project)

    def settle(report: FolderReport) -> None:
        report.drained = drain(ws, indexer=indexer)
        if on_report is not None:
            on_report(report)

    settle(sync_folder(ws, root, notebook, project=project))
    # os.fspath: watchfiles wants str paths; rust_timeout lets stop_event be seen quickly.
    for changes in watchfiles.watch(
        os.fspath(root),
        watch_filter=_watch_filter(root),
        stop_event=stop_event,
        debounce=debounce_ms,
        step=step_ms,
        rust_timeout=200,
        yield_on_timeout=False,
        raise_interrupt=False,
    ):
        settle(apply_changes(ws, root, notebook, changes, project=project))
