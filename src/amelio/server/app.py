"""The FastAPI app factory: one app per workspace, no global state."""

from __future__ import annotations

from fastapi import FastAPI

import amelio
from amelio.server.errors import install_error_handlers
from amelio.server.limits import BodySizeLimit
from amelio.server.routes import assistant, context, evals, feedback, health, improve, sage, skills
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
    return app
