"""The FastAPI app factory: one app per workspace, no global state."""

from __future__ import annotations

import inspect
from typing import Any
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline

from amelio._version import __version__
from amelio.ops import tracing
from amelio.ops.metrics import MetricsMiddleware
from amelio.server.errors import document_json_bodies, error_responses, install_error_handlers
from amelio.server.limits import BodySizeLimit, RefuseNul
from amelio.server.routes import (
    assistant,
    cases,
    context,
    contribution_models,
    contributions,
    evals,
    experiments,
    feedback,
    findings,
    health,
    improve,
    judgments,
    knowledge,
    openai,
    rollouts,
    sage,
    search,
    skills,
    web,
)
from amelio.workspace.folder import Workspace

__all__ = ["create_app"]


#: FastAPI 0.165 and later trace and count requests by themselves whenever OpenTelemetry
#: is installed; the ``tracing`` setting decides instead (:func:`tracing.instrument`,
#: which works with every FastAPI version), and Prometheus counts.
_NO_NATIVE_TELEMETRY: dict[str, Any] = (
    {"telemetry": {"tracing": False, "metrics": False, "logs": False}}
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters
    else {}
)


def create_app(workspace: Workspace) -> FastAPI:
    """The service for ``workspace``, whose database must already be migrated."""
    # The interactive docs (Swagger UI at /docs) load their script and styles from the
    # service itself, out of the fastapi-offline package, rather than from a CDN: they
    # must work on a laptop offline or behind a closed firewall. No ReDoc page: its
    # script fetches its maker's logo from the internet, whatever the page says.
    app = FastAPIOffline(
        docs_url="/docs",
        redoc_url=None,
        static_url="/docs/static",
        title="Amelio",
        version=__version__,
        summary="Assistants and search that improve from their own use.",
        **_NO_NATIVE_TELEMETRY,
    )
    app.state.workspace = workspace
    app.state.settings = workspace.settings
    install_error_handlers(app)
    app.add_middleware(RefuseNul)
    app.add_middleware(BodySizeLimit, limit=workspace.settings.max_request_bytes)
    origins = [o.strip() for o in workspace.settings.cors_origins.split(",") if o.strip()]
    if origins:  # pages on these origins may call the API (amelio.js); keys, not cookies
        app.add_middleware(
            CORSMiddleware,
            allow_origins=origins,
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type"],
            expose_headers=["Retry-After"],
            max_age=600,
        )
    app.add_middleware(MetricsMiddleware)  # outermost: it times what the others refuse too
    tracing.instrument(app, workspace)
    # Every route may answer 413 (body limit) and 422 (invalid input, NUL guard);
    # each area documents the other errors its routes give.
    keyed = (401, 403, 413, 422)
    areas = (
        (health.router, (413, 422, 503)),
        (skills.router, (*keyed, 404, 409)),  # 409: a proposal pending, a concurrent edit
        (evals.router, (*keyed, 404, 409)),
        (context.router, (*keyed, 404, 409)),
        (assistant.router, (*keyed, 404, 409, 502, 503)),
        (improve.router, (*keyed, 404, 409)),
        (cases.router, (*keyed, 404)),
        (findings.router, (*keyed, 404, 409)),
        (rollouts.router, (*keyed, 404, 409)),
        (sage.router, (*keyed, 404, 409, 502, 503)),
        (feedback.router, (*keyed, 429)),
        (knowledge.router, (*keyed, 404, 409, 502, 503)),  # its lifespan runs the sync worker
        (search.router, (*keyed, 404, 503)),
        (judgments.router, (*keyed, 404)),
        (experiments.router, (*keyed, 404, 409)),
        (contributions.router, (*keyed, 404, 409, 429, 503)),
        (contribution_models.router, (404, 413, 422, 503)),
    )
    for router, statuses in areas:
        app.include_router(router, responses=error_responses(*sorted(statuses)))
    # The OpenAI-compatible routes answer errors in OpenAI's shape, for its SDKs.
    app.include_router(openai.router, responses=openai.ERROR_RESPONSES)
    document_json_bodies(app, (router for router, _ in areas))
    _add_dashboard(app)
    from amelio.mcp.server import mount_mcp  # it builds on the routes above: import it last

    mount_mcp(app)  # /mcp: the MCP server over streamable HTTP (amelio[mcp])
    return app


class _StaticFiles(StaticFiles):
    """The dashboard's files and amelio.js's modules, with content types that do not
    depend on the host: Python's table (and /etc/mime.types) may call ``.js``
    application/javascript, and knows ``.ts`` only as an MPEG transport stream
    (video/mp2t), while a module script must be served as JavaScript and the type
    declarations (``.d.ts``) are text to read."""

    def file_response(self, full_path: Any, *args: Any, **kwargs: Any) -> Response:
        response = super().file_response(full_path, *args, **kwargs)
        name = str(full_path)
        if "content-type" not in response.headers:  # a 304: no body, no type
            return response
        if name.endswith(".d.ts"):
            response.headers["content-type"] = "text/plain; charset=utf-8"
        elif name.endswith(".js"):
            response.headers["content-type"] = "text/javascript; charset=utf-8"
        return response


def _add_dashboard(app: FastAPI) -> None:
    """The web dashboard at /, its static files, and its login redirect."""
    app.mount("/static", _StaticFiles(directory=web.STATIC_DIR), name="static")
    app.include_router(web.router)
    app.include_router(judgments.pages)  # /judgments: grading pairs by hand

    @app.exception_handler(web.LoginRequired)
    async def login_required(request: Request, _: Exception) -> RedirectResponse:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/login?next={quote(target)}", status_code=303)
