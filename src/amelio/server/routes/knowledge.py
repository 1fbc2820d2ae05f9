"""The knowledge loop over HTTP: notebooks, fire-and-forget sync, queries with
citations, the skill generator, dead letters and queue health.

The router's lifespan starts the sync worker with the app (unless
``knowledge_worker`` is false) and stops it on shutdown, after the row in hand.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from amelio import knowledge
from amelio.errors import InvalidInput
from amelio.knowledge.sync import SyncWorker
from amelio.server.auth import authorize_project, require, visible
from amelio.server.params import MAX_ID, OptionalProjectQuery, ProjectField, ProjectQuery
from amelio.workspace.folder import Workspace
from amelio.workspace.keys import ApiKey
from amelio.workspace.projects import DEFAULT_PROJECT

log = logging.getLogger("amelio.server")


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    ws: Workspace = app.state.workspace
    worker = SyncWorker(ws) if ws.settings.knowledge_worker else None
    app.state.knowledge_worker = worker
    if worker is not None:
        worker.start()
    try:
        yield
    finally:
        if worker is not None:
            worker.stop()


router = APIRouter(tags=["knowledge"], lifespan=lifespan)

Reader = Annotated[ApiKey, Depends(require("bot"))]
Admin = Annotated[ApiKey, Depends(require())]
MAX_SOURCES = 500


class NewNotebook(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=100)
    project: ProjectField = DEFAULT_PROJECT


class SyncRequest(BaseModel):
    """One source (``source``) or several (``sources``); each is validated as
    :meth:`amelio.knowledge.Source.parse` says."""

    model_config = ConfigDict(extra="forbid")

    notebook: str = Field(max_length=100)
    project: ProjectField = DEFAULT_PROJECT
    source: dict[str, Any] | None = Field(
        default=None, description="{sourceId, kind, title, text, url?, updatedAt}"
    )
    sources: list[dict[str, Any]] | None = Field(default=None, max_length=MAX_SOURCES)


class QueryRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    notebook: str = Field(max_length=100)
    question: str = Field(min_length=1, max_length=4000)
    project: ProjectField = DEFAULT_PROJECT
    top_k: int | None = Field(default=None, alias="topK", ge=1, le=50)


class GenerateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    notebook: str = Field(max_length=100)
    objective: str = Field(min_length=1, max_length=2000)
    project: ProjectField = DEFAULT_PROJECT


class RetryRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ids: list[Annotated[int, Field(ge=1, le=MAX_ID)]] | None = Field(
        default=None, max_length=10_000, description="Dead letters to retry (default: all)."
    )


def _wake(request: Request) -> None:
    worker: SyncWorker | None = getattr(request.app.state, "knowledge_worker", None)
    if worker is not None:
        worker.wake()


@router.post("/v1/knowledge/notebooks", status_code=201, summary="Create a notebook")
def create_notebook(request: Request, body: NewNotebook, _: Admin) -> dict[str, Any]:
    return knowledge.create_notebook(
        request.app.state.workspace, body.name, project=body.project
    ).to_dict()


@router.get(
    "/v1/knowledge/notebooks",
    summary="Notebooks with their status: sources, chunks, last sync, failures",
)
def notebooks(
    request: Request, key: Reader, project: OptionalProjectQuery = None
) -> dict[str, Any]:
    ws = request.app.state.workspace
    if project is not None:
        authorize_project(ws.engine, key, project)
    found = visible(key, knowledge.list_notebooks(ws, project=project), lambda n: n.project)
    return {"notebooks": [n.to_dict() for n in found]}


@router.get("/v1/knowledge/notebooks/{name}/sources", summary="A notebook's indexed sources")
def sources(
    request: Request, name: str, key: Reader, project: ProjectQuery = DEFAULT_PROJECT
) -> dict[str, Any]:
    authorize_project(request.app.state.workspace.engine, key, project)
    return {
        "notebook": name,
        "project": project,
        "sources": knowledge.list_sources(request.app.state.workspace, name, project=project),
    }


@router.delete(
    "/v1/knowledge/notebooks/{name}/sources/{source_id:path}",
    summary="Remove a source, its chunks and any queued version of it",
)
def delete_source(
    request: Request,
    name: str,
    source_id: str,
    key: Reader,
    project: ProjectQuery = DEFAULT_PROJECT,
) -> dict[str, Any]:
    authorize_project(request.app.state.workspace.engine, key, project)
    knowledge.delete_source(request.app.state.workspace, name, source_id, project=project)
    return {"notebook": name, "project": project, "sourceId": source_id, "deleted": True}


@router.post(
    "/v1/knowledge/sync", status_code=202, summary="Queue sources for indexing; answers at once"
)
def sync(request: Request, body: SyncRequest, key: Reader) -> dict[str, Any]:
    ws: Workspace = request.app.state.workspace
    authorize_project(ws.engine, key, body.project)
    if (body.source is None) == (body.sources is None):
        raise InvalidInput("Send either `source` (one) or `sources` (a list).", field="sources")
    raw = [body.source] if body.source is not None else body.sources or []
    parsed = [knowledge.Source.parse(s, max_chars=ws.settings.max_text_chars) for s in raw]
    receipt = knowledge.enqueue(ws, body.notebook, parsed, project=body.project)
    if receipt.queued:
        _wake(request)
    return receipt.to_dict() | {"status": "accepted"}


@router.post("/v1/knowledge/query", summary="Answer a question with numbered citations")
def query(request: Request, body: QueryRequest, key: Reader) -> dict[str, Any]:
    authorize_project(request.app.state.workspace.engine, key, body.project)
    return knowledge.answer_question(
        request.app.state.workspace,
        body.notebook,
        body.question,
        project=body.project,
        top_k=body.top_k,
    ).to_dict()


@router.post(
    "/v1/skills/generate",
    status_code=201,
    summary="Draft a new skill from a notebook, as a proposal for review",
)
def generate(request: Request, body: GenerateRequest, key: Admin) -> dict[str, Any]:
    return knowledge.generate_skill(
        request.app.state.workspace,
        body.notebook,
        body.objective,
        project=body.project,
        author=f"generator (key:{key.name})",
    ).to_dict()


@router.get("/v1/knowledge/failures", summary="Dead letters: sources that failed every try")
def failures(
    request: Request,
    key: Reader,
    notebook: Annotated[str | None, Query(max_length=100)] = None,
    project: ProjectQuery = DEFAULT_PROJECT,
) -> dict[str, Any]:
    authorize_project(request.app.state.workspace.engine, key, project)
    found = knowledge.failures(request.app.state.workspace, notebook=notebook, project=project)
    return {"failures": [f.to_dict() for f in found]}


@router.post("/v1/knowledge/failures/retry", summary="Put dead letters back in the queue")
def retry(request: Request, _: Admin, body: RetryRequest | None = None) -> dict[str, Any]:
    ids = knowledge.retry(request.app.state.workspace, body.ids if body else None)
    if ids:
        _wake(request)
    return {"retried": ids}


@router.get(
    "/v1/knowledge/health", summary="Queue depth, oldest pending item, dead letters (public)"
)
def health(request: Request) -> dict[str, Any]:
    worker: SyncWorker | None = getattr(request.app.state, "knowledge_worker", None)
    state = "off" if worker is None else "running" if worker.running else "stopped"
    return knowledge.queue_health(request.app.state.workspace) | {
        "worker": state,
        "workerError": worker.last_error if worker else None,
    }
