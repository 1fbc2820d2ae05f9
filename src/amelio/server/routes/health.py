"""Liveness and readiness (is the database reachable and at the code's migration?),
and the Prometheus metrics (:mod:`amelio.ops.metrics`).

``GET /metrics`` needs an admin key (Prometheus sends it as
``authorization: {credentials: KEY}`` in its scrape config). With ``metrics_port``
set, the router's lifespan also serves them without a key on that port, for a
scraper on a private network.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response

from amelio import db
from amelio._version import __version__
from amelio.errors import DatabaseError
from amelio.ops import metrics
from amelio.server.auth import require
from amelio.server.errors import error_responses
from amelio.workspace.keys import ApiKey


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings = app.state.workspace.settings
    separate = None
    if settings.metrics_port:
        separate = metrics.serve_separately(
            app.state.workspace, settings.metrics_host, settings.metrics_port
        )
    try:
        yield
    finally:
        if separate is not None:
            separate.shutdown()
            separate.server_close()


router = APIRouter(tags=["health"], lifespan=lifespan)
Admin = Annotated[ApiKey, Depends(require())]


@router.get(
    "/metrics",
    summary="Prometheus metrics (admin)",
    response_class=Response,
    responses={
        200: {
            "content": {metrics.CONTENT_TYPE_LATEST: {}},
            "description": "Prometheus' text format",
        },
        **error_responses(401, 403),
    },
)
async def prometheus(request: Request, _: Admin) -> Response:
    body = await asyncio.to_thread(metrics.exposition, request.app.state.workspace)
    return Response(body, media_type=metrics.CONTENT_TYPE_LATEST)


@router.get("/v1/health", summary="Database reachable and migrated (public)")
def health(request: Request) -> JSONResponse:
    engine = request.app.state.workspace.engine
    body: dict[str, Any] = {"version": __version__, "database": engine.dialect.name}
    head = db.head_revision()
    try:
        current = db.current_revision(engine)
    except DatabaseError as exc:
        body |= {
            "status": "error",
            "message": exc.message,
            "migration": {"current": None, "head": head},
        }
        return JSONResponse(body, status_code=503)
    ok = current == head
    body |= {"status": "ok" if ok else "error", "migration": {"current": current, "head": head}}
    if not ok:
        body["message"] = "Database is not at the code's migration: run `amelio db upgrade`."
    return JSONResponse(body, status_code=200 if ok else 503)
