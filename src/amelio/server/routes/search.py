"""Search: ``POST /v1/search`` (bot or better), signals for one query (admin)."""

from __future__ import annotations

import threading
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from amelio.contributions.policy import browsers_embed
from amelio.search import Searcher
from amelio.search.counts import signals_for
from amelio.search.service import MAX_ID_CHARS, query_key
from amelio.server.auth import authorize_project, require
from amelio.server.params import ProjectField
from amelio.workspace.keys import ApiKey

router = APIRouter(tags=["search"])

Bot = Annotated[ApiKey, Depends(require("bot"))]
Admin = Annotated[ApiKey, Depends(require())]
_lock = threading.Lock()


class SearchBody(BaseModel):
    """A search request. Profile, alpha and the project name are checked by the
    searcher too, so the CLI gives the same messages; the pattern and lengths here
    put the contract in the OpenAPI document."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(max_length=2000, description="What to search for.")
    project: ProjectField = Field(
        default="default", description="Project (tenant) the impression is logged under."
    )
    rankProfile: str | None = Field(
        default=None,
        description="bm25, semantic, hybrid or hybrid_with_feedback (default: search_profile).",
    )
    alpha: float | None = Field(default=None, description="Semantic weight, 0 to 1.")
    limit: int = Field(default=10, description="How many results, 1 to 100.")
    sessionId: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_ID_CHARS,
        description="The session id your feedback events send as session.sessionId (or "
        "sessionIdHash); stored only as its daily-salted hash. With it, one session's "
        "repeated searches and clicks count once for each document; without it, each "
        "search counts as a session of its own.",
    )
    userId: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_ID_CHARS,
        description="The user id your feedback events send as session.userId; stored "
        "only as its daily-salted hash, and capped like a session across its sessions.",
    )
    explain: bool = Field(
        default=False,
        description="Give each result an `explain` object: BM25 and its rank, the "
        "semantic score, the feedback score with the debiased examinations and clicks "
        "behind it, exploration, pins and hides, and how far feedback moved it.",
    )


def searcher(request: Request) -> Searcher:
    """The app's one searcher (its warm cache must outlive a request)."""
    state = request.app.state
    found: Searcher | None = getattr(state, "searcher", None)
    if found is None:
        with _lock:
            found = getattr(state, "searcher", None)
            if found is None:
                found = state.searcher = Searcher(
                    state.workspace,
                    defer_missing_vectors=browsers_embed(state.workspace.settings),
                )
    return found


@router.post("/v1/search", summary="Search the corpus; the response carries a feedbackToken")
async def search(body: SearchBody, request: Request, key: Bot) -> dict[str, Any]:
    await run_in_threadpool(
        authorize_project, request.app.state.workspace.engine, key, body.project
    )
    engine = searcher(request)
    response = await run_in_threadpool(
        engine.search,
        body.query,
        project=body.project,
        profile=body.rankProfile,
        alpha=body.alpha,
        limit=body.limit,
        session=body.sessionId,
        user=body.userId,
        explain=body.explain,
    )
    return response.to_dict()


@router.get("/v1/search/signals", summary="The signals of one query, per document")
def signals(
    request: Request, query: Annotated[str, Query(max_length=2000)], _: Admin
) -> dict[str, Any]:
    workspace = request.app.state.workspace
    key = query_key(workspace.settings, query)  # as searches store it: scrubbed
    rows = signals_for(workspace.engine, key)
    return {"query": key, "documents": {d: r.to_dict() for d, r in rows.items()}}
