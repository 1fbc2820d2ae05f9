"""The FastAPI app factory: one app per workspace, no global state."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

import amelio
from amelio.server.errors import install_error_handlers
from amelio.server.limits import BodySizeLimit
from amelio.server.routes import (
    assistant,
    context,
    evals,
    feedback,
    health,
    improve,
    knowledge,
    sage,
    search,
    skills,
    web,
)
from amelio.workspace import Workspace

__all__ = ["create_app"]


def create_app(workspace: Workspace) -> FastAPI:
    """The service for ``workspace``, whose database must already be migrated."""
    app = FastAPI(
        title="Amelio",
        version=amelio.__version__,
        summary="Assistants and search that improve from their own use.",
        docs_url="/docs",
        redoc_url=None,
    )
    app.state.workspace = workspace
    app.state.settings = workspace.settings
    install_error_handlers(app)
    app.add_middleware(BodySizeLimit, limit=workspace.settings.max_request_bytes)
    app.include_router(health.router)
    app.include_router(skills.router)
    app.include_router(evals.router)
    app.include_router(context.router)
    app.include_router(assistant.router)
    app.include_router(improve.router)
    app.include_router(sage.router)
    app.include_router(feedback.router)
    app.include_router(knowledge.router)  # its lifespan runs the sync worker
    app.include_router(search.router)
    _add_dashboard(app)
    return app


def _add_dashboard(app: FastAPI) -> None:
    """The web dashboard at /, its static files, and its login redirect."""
    app.mount("/static", StaticFiles(directory=web.STATIC_DIR), name="static")
    app.include_router(web.router)

    @app.exception_handler(web.LoginRequired)
    async def login_required(request: Request, _: Exception) -> RedirectResponse:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/login?next={quote(target)}", status_code=303)
