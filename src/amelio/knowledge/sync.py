"""The sync queue: business events in, indexed sources out (the seed's SyncWorker).

``POST /v1/knowledge/sync`` only writes rows to ``knowledge_queue`` and answers
202: nothing is lost on a restart, because the queue is a table. A worker drains
it: it claims a due row (for :data:`CLAIM_SECONDS`, so a worker that dies
mid-way only delays the row), prepares the source outside any transaction
(chunks, terms, embeddings), then writes it and deletes the row in one
transaction. A failure schedules another try after ``knowledge_sync_backoff``
seconds, doubling; after ``knowledge_sync_tries`` tries the row becomes a dead
letter, listed by :func:`failures` and put back by :func:`retry`.

Versions are decided by the source's ``updatedAt``: the same one again is a
no-op at enqueue time and at write time, a newer one replaces the queued or
stored version, an older one is ignored. A row is written only if it is still
the one that was claimed, so a delete or a newer sync meanwhile wins.

Two ways to drain: :class:`SyncWorker`, a background thread the service starts,
and :func:`drain`, which the CLI, the folder watcher and tests call directly.
Several workers (processes, machines) can share one PostgreSQL queue: claims
use ``FOR UPDATE SKIP LOCKED``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any

import sqlalchemy as sa

from amelio import db
from amelio.db.schema import (
    knowledge_notebooks,
    knowledge_queue,
    knowledge_sources,
    projects,
    utcnow,
)
from amelio.knowledge.index import IndexedSource, embedder_for, prepare_source, write_source
from amelio.knowledge.model import Source, aware
from amelio.knowledge.notebooks import notebook_id
from amelio.workspace.folder import Workspace
from amelio.workspace.projects import DEFAULT_PROJECT

__all__ = [
    "CLAIM_SECONDS",
    "DrainReport",
    "Failure",
    "Indexer",
    "SyncReceipt",
    "SyncWorker",
    "default_indexer",
    "drain",
    "enqueue",
    "failures",
    "queue_health",
    "retry",
]

log = logging.getLogger(__name__)

#: How long a claimed row is reserved for the worker that claimed it.
CLAIM_SECONDS = 300
#: Turns a source into what is written; the default chunks, tokenizes and embeds.
Indexer = Callable[[Source], IndexedSource]
Clock = Callable[[], datetime]


@dataclass(frozen=True)
class SyncReceipt:
    """What a sync request did: ``queued`` source ids, and those it ignored because
    the same or a newer version is already stored or queued."""

    notebook: str
    project: str
    queued: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "notebook": self.notebook,
            "project": self.project,
            "queued": list(self.queued),
            "unchanged": list(self.unchanged),
        }


@dataclass
class DrainReport:
    """What one drain did: ``failed`` rows will be tried again, ``dead`` ones not."""

    indexed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    dead: list[str] = field(default_factory=list)
    skipped: int = 0  # rows deleted or replaced while they were being prepared
    pending: int = 0  # rows still waiting (a retry not due yet)

    def to_dict(self) -> dict[str, Any]:
        return {
            "indexed": self.indexed,
            "unchanged": self.unchanged,
            "failed": self.failed,
            "dead": self.dead,
            "skipped": self.skipped,
            "pending": self.pending,
        }


@dataclass(frozen=True)
class Failure:
    """A dead letter: a source that failed every try."""

    id: int
    notebook: str
    project: str
    source_id: str
    title: str
    updated_at: datetime
    attempts: int
    error: str
    failed_at: datetime | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "notebook": self.notebook,
            "project": self.project,
            "sourceId": self.source_id,
            "title": self.title,
            "updatedAt": self.updated_at.isoformat(),
            "attempts": self.attempts,
            "error": self.error,
            "failedAt": self.failed_at.isoformat() if self.failed_at else None,
        }


# -- enqueue ------------------------------------------------------------------------------


def enqueue(
    ws: Workspace, notebook: str, sources: Sequence[Source], *, project: str = DEFAULT_PROJECT
) -> SyncReceipt:
    """Queue sources for indexing, in one transaction; returns at once."""
    q, src = knowledge_queue, knowledge_sources
    queued: list[str] = []
    unchanged: list[str] = []
    now = utcnow()
    latest: dict[str, Source] = {}
    for s in sources:  # one request naming a source twice: its newest version counts
        if s.source_id not in latest or s.updated_at > latest[s.source_id].updated_at:
            latest[s.source_id] = s
    with db.transaction(ws.engine) as conn:
        nid = notebook_id(conn, notebook, project)
        for s in latest.values():
            stored = conn.scalar(
                sa.select(src.c.updated_at).where(
                    src.c.notebook_id == nid, src.c.source_id == s.source_id
                )
            )
            if stored is not None and aware(stored) >= s.updated_at:
                unchanged.append(s.source_id)
                continue
            rows = conn.execute(
                sa.select(q.c.id, q.c.status, q.c.source_updated_at)
                .where(q.c.notebook_id == nid, q.c.source_id == s.source_id)
                .with_for_update()
            ).all()
            if any(
                aware(r.source_updated_at) >= s.updated_at for r in rows if r.status == "pending"
            ):
                unchanged.append(s.source_id)
                continue
            # Older queued or dead versions are superseded by this one.
            if rows:
                conn.execute(q.delete().where(q.c.id.in_([r.id for r in rows])))
            conn.execute(
                q.insert().values(
                    notebook_id=nid,
                    source_id=s.source_id,
                    source_updated_at=s.updated_at,
                    payload=s.payload(),
                    status="pending",
                    attempts=0,
                    next_attempt_at=now,
                    created_at=now,
                )
            )
            queued.append(s.source_id)
    return SyncReceipt(notebook, project, tuple(queued), tuple(unchanged))


# -- drain --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Claimed:
    id: int
    notebook_id: int
    source: Source
    attempts: int


def _claim(ws: Workspace, now: datetime) -> _Claimed | None:
    q = knowledge_queue
    due = sa.and_(
        q.c.status == "pending",
        q.c.next_attempt_at <= now,
        sa.or_(q.c.claimed_until.is_(None), q.c.claimed_until < now),
    )
    with db.reading(ws.engine) as conn:  # a cheap read first: an idle poll takes no lock
        if conn.scalar(sa.select(q.c.id).where(due).limit(1)) is None:
            return None
    with db.transaction(ws.engine) as conn:
        row = conn.execute(
            sa.select(q)
            .where(due)
            .order_by(q.c.next_attempt_at, q.c.id)
            .limit(1)
            .with_for_update(skip_locked=True)
        ).first()
        if row is None:
            return None
        conn.execute(
            q.update()
            .where(q.c.id == row.id)
            .values(attempts=row.attempts + 1, claimed_until=now + timedelta(seconds=CLAIM_SECONDS))
        )
    payload = dict(row.payload)
    source = Source(
        source_id=row.source_id,
        text=payload["text"],
        updated_at=aware(row.source_updated_at),
        kind=payload["kind"],
        title=payload["title"],
        url=payload.get("url"),
    )
    return _Claimed(int(row.id), int(row.notebook_id), source, int(row.attempts) + 1)


def _still_claimed(item: _Claimed) -> sa.ColumnElement[bool]:
    q = knowledge_queue
    return sa.and_(
        q.c.id == item.id, q.c.status == "pending", q.c.source_updated_at == item.source.updated_at
    )


def _fail(ws: Workspace, item: _Claimed, error: str, now: datetime, report: DrainReport) -> None:
    settings = ws.settings
    dead = item.attempts >= settings.knowledge_sync_tries
    delay = settings.knowledge_sync_backoff * 2 ** (item.attempts - 1)
    values: dict[str, Any] = {"last_error": error[:2000], "claimed_until": None}
    if dead:
        values |= {"status": "dead", "failed_at": now}
    else:
        values["next_attempt_at"] = now + timedelta(seconds=delay)
    with db.transaction(ws.engine) as conn:
        changed = conn.execute(
            knowledge_queue.update().where(_still_claimed(item)).values(**values)
        ).rowcount
    if not changed:
        report.skipped += 1
        return
    (report.dead if dead else report.failed).append(item.source.source_id)
    log.warning(
        "knowledge sync of %r failed (try %d of %d)%s: %s",
        item.source.source_id,
        item.attempts,
        settings.knowledge_sync_tries,
        "; moved to the dead letters" if dead else f"; next try in {delay:g}s",
        error,
    )


def _process(
    ws: Workspace, item: _Claimed, indexer: Indexer, clock: Clock, report: DrainReport
) -> None:
    try:
        prepared = indexer(item.source)
        with db.transaction(ws.engine) as conn:
            mine = conn.execute(knowledge_queue.delete().where(_still_claimed(item))).rowcount
            outcome = write_source(conn, item.notebook_id, prepared, now=clock()) if mine else None
    except Exception as exc:  # a failure is data: record it and keep draining
        _fail(ws, item, f"{type(exc).__name__}: {exc}", clock(), report)
        return
    if outcome is None:
        report.skipped += 1
    else:
        (report.indexed if outcome == "indexed" else report.unchanged).append(item.source.source_id)


def default_indexer(ws: Workspace) -> Indexer:
    """Chunk with the workspace's settings, embed with its embedder (if any)."""
    return partial(
        prepare_source,
        chunk_chars=ws.settings.knowledge_chunk_chars,
        embedder=embedder_for(ws.settings),
    )


def _next_due(ws: Workspace) -> datetime | None:
    """When the next retry falls due. Rows another worker holds are not waited
    for: it is working on them (and if it died, a later poll finds them)."""
    q = knowledge_queue
    with db.reading(ws.engine) as conn:
        due = conn.scalar(
            sa.select(sa.func.min(q.c.next_attempt_at)).where(
                q.c.status == "pending", q.c.claimed_until.is_(None)
            )
        )
    return aware(due) if due is not None else None


def drain(
    ws: Workspace,
    *,
    indexer: Indexer | None = None,
    clock: Clock = utcnow,
    wait: bool = False,
    stop: threading.Event | None = None,
    max_items: int | None = None,
) -> DrainReport:
    """Process every due row now. With ``wait``, also sleep until retries fall due,
    so the queue ends empty but for dead letters."""
    indexer = indexer or default_indexer(ws)
    report = DrainReport()
    done = 0
    while not (stop is not None and stop.is_set()) and (max_items is None or done < max_items):
        item = _claim(ws, clock())
        if item is None:
            due = _next_due(ws) if wait else None
            if due is None:
                break
            # At most a second at a time: a row another worker holds may finish sooner.
            pause = min(max((due - clock()).total_seconds(), 0.01), 1.0)
            if stop is not None:
                stop.wait(pause)
            else:
                time.sleep(pause)
            continue
        _process(ws, item, indexer, clock, report)
        done += 1
    with db.reading(ws.engine) as conn:
        report.pending = int(
            conn.scalar(sa.select(sa.func.count()).where(knowledge_queue.c.status == "pending"))
            or 0
        )
    return report


# -- dead letters and health --------------------------------------------------------------


def _failure_query() -> sa.Select[Any]:
    q, nb = knowledge_queue, knowledge_notebooks
    return (
        sa.select(q, nb.c.name.label("notebook"), projects.c.name.label("project"))
        .join(nb, nb.c.id == q.c.notebook_id)
        .join(projects, projects.c.id == nb.c.project_id)
        .where(q.c.status == "dead")
        .order_by(q.c.id)
    )


def failures(
    ws: Workspace, *, notebook: str | None = None, project: str = DEFAULT_PROJECT
) -> list[Failure]:
    """The dead letters, oldest first (of one notebook, or all)."""
    query = _failure_query()
    with db.reading(ws.engine) as conn:
        if notebook is not None:
            query = query.where(
                knowledge_queue.c.notebook_id == notebook_id(conn, notebook, project)
            )
        rows = conn.execute(query).all()
    return [
        Failure(
            r.id,
            r.notebook,
            r.project,
            r.source_id,
            r.payload.get("title", ""),
            aware(r.source_updated_at),
            r.attempts,
            r.last_error or "",
            aware(r.failed_at) if r.failed_at else None,
        )
        for r in rows
    ]


def retry(
    ws: Workspace,
    ids: Sequence[int] | None = None,
    *,
    notebook: str | None = None,
    project: str = DEFAULT_PROJECT,
) -> list[int]:
    """Put dead letters back in the queue with fresh tries (the given ids, or all of
    them, or a notebook's); returns the ids retried."""
    q = knowledge_queue
    with db.transaction(ws.engine) as conn:
        query = sa.select(q.c.id).where(q.c.status == "dead")
        if ids is not None:
            query = query.where(q.c.id.in_(list(ids)))
        if notebook is not None:
            query = query.where(q.c.notebook_id == notebook_id(conn, notebook, project))
        found = [int(i) for i in conn.scalars(query)]
        if found:
            conn.execute(
                q.update()
                .where(q.c.id.in_(found))
                .values(
                    status="pending",
                    attempts=0,
                    next_attempt_at=utcnow(),
                    claimed_until=None,
                    failed_at=None,
                )
            )
    return found


def queue_health(ws: Workspace) -> dict[str, Any]:
    """Queue depth, the oldest pending row and its age, and the dead letters."""
    q = knowledge_queue
    with db.reading(ws.engine) as conn:
        depth, oldest = conn.execute(
            sa.select(sa.func.count(), sa.func.min(q.c.created_at)).where(q.c.status == "pending")
        ).one()
        dead = conn.scalar(sa.select(sa.func.count()).where(q.c.status == "dead"))
    oldest_at = aware(oldest) if oldest is not None else None
    return {
        "status": "degraded" if dead else "ok",
        "queueDepth": int(depth),
        "oldestPending": oldest_at.isoformat() if oldest_at else None,
        "oldestPendingAgeSeconds": round((utcnow() - oldest_at).total_seconds(), 3)
        if oldest_at
        else None,
        "deadLetters": int(dead or 0),
    }


# -- the background worker ----------------------------------------------------------------


class SyncWorker:
    """Drains the queue in a background thread until stopped. :meth:`wake` makes it
    look at once (a sync request calls it); otherwise it looks every
    ``knowledge_poll_interval`` seconds, so rows queued by another process (or
    left from before a restart) are picked up too."""

    def __init__(self, ws: Workspace, *, indexer: Indexer | None = None) -> None:
        self.ws = ws
        self.indexer = indexer
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: str | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self.running:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="amelio-knowledge-sync", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        """Finish the row in hand, then stop (a row cut short would be retried)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        interval = self.ws.settings.knowledge_poll_interval
        while not self._stop.is_set():
            self._wake.clear()
            try:
                indexer = self.indexer or default_indexer(self.ws)
                drain(self.ws, indexer=indexer, stop=self._stop)
                self.last_error = None
            except Exception as exc:  # the database went away, say: log it, try later
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("knowledge sync worker: drain failed")
            pause = interval
            due = None
            try:
                due = _next_due(self.ws)
            except Exception:  # reported by the next drain
                due = None
            if due is not None:
                pause = min(interval, max((due - utcnow()).total_seconds(), 0.01))
            self._wake.wait(pause)
