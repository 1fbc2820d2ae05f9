"""Liveness and readiness: is the database reachable and at the code's migration?"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

import amelio
from amelio import db
from amelio.errors import DatabaseError

router = APIRouter(tags=["health"])


@router.get("/v1/health", summary="Database reachable and migrated (public)")
def health(request: Request) -> JSONResponse:
    engine = request.app.state.workspace.engine
    body: dict[str, Any] = {"version": amelio.__version__, "database": engine.dialect.name}
    head = db.head_revision()
    try:
        current = db.current_revision(engine)
    except DatabaseError as exc:
        body |= {"status": "error", "message": exc.message,
                 "migration": {"current": None, "head": head}}
        return JSONResponse(body, status_code=503)
    ok = current == head
    body |= {"status": "ok" if ok else "error", "migration": {"current": current, "head": head}}
    if not ok:
        body["message"] = "Database is not at the code's migration: run `amelio db upgrade`."
    return JSONResponse(body, status_code=200 if ok else 503)
