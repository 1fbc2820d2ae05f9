"""Notebooks (a project's knowledge collections) and their sources.

A notebook is named within its project, like a skill. Its status is computed
from the tables on each read (sources, chunks, last sync, queue), so it can
never drift from what is actually indexed.
"""

from __future__ import annotations

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
from amelio.errors import Conflict, NotFound
from amelio.knowledge.model import Notebook, Source, aware
from amelio.workspace.folder import Workspace
from amelio.workspace.projects import DEFAULT_PROJECT, ensure_project, project_id, validate_name

__all__ = [
    "create_notebook",
    "delete_source",
    "ensure_notebook",
    "get_notebook",
    "list_notebooks",
    "list_sources",
    "notebook_id",
]


def notebook_id(conn: sa.Connection, name: str, project: str = DEFAULT_PROJECT) -> int:
    """The id of notebook ``name`` in ``project``, or :class:`NotFound` saying how to
    create it."""
    pid = project_id(conn, project)
    found = conn.scalar(
        sa.select(knowledge_notebooks.c.id).where(
            knowledge_notebooks.c.project_id == pid, knowledge_notebooks.c.name == name
        )
    )
    if found is None:
        where = "" if project == DEFAULT_PROJECT else f" --project {project}"
        raise NotFound(
            f"No notebook named {name!r} in project {project!r}. Create it with "
            f"`amelio knowledge create {name}{where}` or POST "
            "/v1/knowledge/notebooks.",
            notebook=name,
            project=project,
        )
    return int(found)


def _insert(conn: sa.Connection, name: str, project: str) -> bool:
    validate_name(name, what="notebook")
    pid = ensure_project(conn, project) if project == DEFAULT_PROJECT else project_id(conn, project)
    exists = conn.scalar(
        sa.select(knowledge_notebooks.c.id).where(
            knowledge_notebooks.c.project_id == pid, knowledge_notebooks.c.name == name
        )
    )
    if exists is not None:
        return False
    conn.execute(
        knowledge_notebooks.insert().values(project_id=pid, name=name, created_at=utcnow())
    )
    return True


def create_notebook(ws: Workspace, name: str, *, project: str = DEFAULT_PROJECT) -> Notebook:
    """A new, empty notebook; :class:`Conflict` if the project already has one by
    that name."""
    try:
        with db.transaction(ws.engine) as conn:
            created = _insert(conn, name, project)
    except sa.exc.IntegrityError:  # a concurrent create of the same name won
        created = False
    if not created:
        raise Conflict(
            f"Project {project!r} already has a notebook named {name!r}.",
            notebook=name,
            project=project,
        )
    return get_notebook(ws, name, project=project)


def ensure_notebook(
    ws: Workspace, name: str, *, project: str = DEFAULT_PROJECT
) -> tuple[Notebook, bool]:
    """The notebook, created if missing (for the folder watcher); returns whether
    it was created now."""
    try:
        with db.transaction(ws.engine) as conn:
            created = _insert(conn, name, project)
    except sa.exc.IntegrityError:
        created = False
    return get_notebook(ws, name, project=project), created


def list_notebooks(ws: Workspace, *, project: str | None = None) -> list[Notebook]:
    """Notebooks (of one project, or all) with their status, by project and name."""
    nb = knowledge_notebooks
    query = (
        sa.select(nb.c.id, nb.c.name, nb.c.created_at, projects.c.name.label("project"))
        .join(projects, projects.c.id == nb.c.project_id)
        .order_by(projects.c.name, nb.c.name)
    )
    if project is not None:
        query = query.where(projects.c.name == project)
    src = knowledge_sources
    q = knowledge_queue
    with db.reading(ws.engine) as conn:
        if project is not None:
            project_id(conn, project)  # an unknown project is an error, not an empty list
        rows = conn.execute(query).all()
        ids = [r.id for r in rows]
        stats = {
            r.notebook_id: r
            for r in conn.execute(
                sa.select(
                    src.c.notebook_id,
                    sa.func.count().label("sources"),
                    sa.func.coalesce(sa.func.sum(src.c.chunk_count), 0).label("chunks"),
                    sa.func.max(src.c.indexed_at).label("last_sync"),
                )
                .where(src.c.notebook_id.in_(ids))
                .group_by(src.c.notebook_id)
            )
        }
        queue: dict[tuple[int, str], int] = {
            (r.notebook_id, r.status): int(r.n)
            for r in conn.execute(
                sa.select(q.c.notebook_id, q.c.status, sa.func.count().label("n"))
                .where(q.c.notebook_id.in_(ids))
                .group_by(q.c.notebook_id, q.c.status)
            )
        }
    found = []
    for r in rows:
        s = stats.get(r.id)
        found.append(
            Notebook(
                id=r.id,
                name=r.name,
                project=r.project,
                created_at=aware(r.created_at),
                sources=int(s.sources) if s else 0,
                chunks=int(s.chunks) if s else 0,
                last_sync=aware(s.last_sync) if s and s.last_sync else None,
                pending=queue.get((r.id, "pending"), 0),
                failures=queue.get((r.id, "dead"), 0),
            )
        )
    return found


def get_notebook(ws: Workspace, name: str, *, project: str = DEFAULT_PROJECT) -> Notebook:
    """One notebook with its status."""
    with db.reading(ws.engine) as conn:
        nid = notebook_id(conn, name, project)
    return next(n for n in list_notebooks(ws, project=project) if n.id == nid)


def list_sources(
    ws: Workspace, notebook: str, *, project: str = DEFAULT_PROJECT
) -> list[dict[str, Any]]:
    """The notebook's indexed sources, most recently updated first (without text)."""
    src = knowledge_sources
    with db.reading(ws.engine) as conn:
        nid = notebook_id(conn, notebook, project)
        rows = conn.execute(
            sa.select(
                src.c.source_id,
                src.c.kind,
                src.c.title,
                src.c.url,
                src.c.updated_at,
                src.c.indexed_at,
                src.c.chunk_count,
            )
            .where(src.c.notebook_id == nid)
            .order_by(src.c.updated_at.desc(), src.c.source_id)
        ).all()
    return [
        Source(r.source_id, "", aware(r.updated_at), r.kind, r.title, r.url).to_dict()
        | {"chunks": r.chunk_count, "indexedAt": aware(r.indexed_at).isoformat()}
        for r in rows
    ]


def delete_source(
    ws: Workspace, notebook: str, source_id: str, *, project: str = DEFAULT_PROJECT
) -> None:
    """Remove a source, its chunks and its index entries, and drop any queued or
    dead-lettered version of it (so a pending sync cannot bring it back).
    :class:`NotFound` when the notebook holds nothing by that id."""
    with db.transaction(ws.engine) as conn:
        nid = notebook_id(conn, notebook, project)
        queued = conn.execute(
            knowledge_queue.delete().where(
                knowledge_queue.c.notebook_id == nid, knowledge_queue.c.source_id == source_id
            )
        )
        removed = conn.execute(
            knowledge_sources.delete().where(
                knowledge_sources.c.notebook_id == nid, knowledge_sources.c.source_id == source_id
            )
        )
        if not (queued.rowcount or removed.rowcount):
            raise NotFound(
                f"Notebook {notebook!r} has no source {source_id!r}.",
                notebook=notebook,
                source_id=source_id,
            )
