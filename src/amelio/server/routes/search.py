"""Search: ``POST /v1/search`` (bot or better), signals for one query (admin)."""

from __future__ import annotations

import threading
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from amelio.keys import ApiKey
from amelio.search import Searcher
from amelio.search.signals import signals_for
from amelio.server.auth import require
from amelio.text import normalize

router = APIRouter(tags=["search"])

Bot = Annotated[ApiKey, Depends(require("bot"))]
Admin = Annotated[ApiKey, Depends(require())]
_lock = threading.Lock()


class SearchBody(BaseModel):
    """A search request. Profile and alpha are checked by the searcher, so the API
    and the CLI give the same messages."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(max_length=2000, description="What to search for.")
    project: str = Field(default="default", max_length=100)
    rankProfile: str | None = Field(
        default=None, description="bm25, semantic, hybrid or hybrid_with_feedback "
        "(default: search_profile).")
    alpha: float | None = Field(default=None, description="Semantic weight, 0 to 1.")
    limit: int = Field(default=10, description="How many results, 1 to 100.")


def searcher(request: Request) -> Searcher:
    """The app's one searcher (its warm cache must outlive a request)."""
    state = request.app.state
    found: Searcher | None = getattr(state, "searcher", None)
    if found is None:
        with _lock:
            found = getattr(state, "searcher", None)
            if found is None:
                found = state.searcher = Searcher(state.workspace)
    return found


@router.post("/v1/search", summary="Search the corpus; the response carries a feedbackToken")
async def search(body: SearchBody, request: Request, _: Bot) -> dict[str, Any]:
    engine = searcher(request)
    response = await run_in_threadpool(
        engine.search, body.query, project=body.project, profile=body.rankProfile,
        alpha=body.alpha, limit=body.limit)
    return response.to_dict()


@router.get("/v1/search/signals", summary="The signals of one query, per document")
def signals(request: Request, query: str, _: Admin) -> dict[str, Any]:
    query_norm = normalize(query)
    rows = signals_for(request.app.state.workspace.engine, query_norm)
    return {"query": query_norm, "documents": {d: r.to_dict() for d, r in rows.items()}}
