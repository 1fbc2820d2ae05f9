"""The demo workspace behind ``make demo``: example skills, help-desk articles to
search, an admin key, and a public search page (``/demo/search``) that sends
feedback with ``amelio.js`` and, with the visitor's consent, lends the browser's idle
time to the search index (``contributions``, on in the demo's ``amelio.toml``).

Running it again reuses the workspace: skills re-import as no-ops (or as new
versions if the examples changed) and the saved keys keep working.
"""

from __future__ import annotations

import json
import os
import random
import re
import time
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode

import sqlalchemy as sa
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, ConfigDict, Field

from amelio import skills
from amelio.assistant.quality import give_answer_feedback
from amelio.assistant.respond import respond
from amelio.contributions.policy import browsers_embed, import_embedder
from amelio.db.schema import interactions, search_impressions
from amelio.errors import ConfigError
from amelio.feedback import Collector
from amelio.improve.nightly import run_improve
from amelio.llm.fake import ScriptedProvider
from amelio.search import Searcher, aggregate
from amelio.search.engines.registry import workspace_corpus
from amelio.search.simulate import click_events
from amelio.workspace import keys
from amelio.workspace.config import load_settings
from amelio.workspace.discovery import CONFIG_FILE
from amelio.workspace.folder import Workspace, init_workspace

__all__ = [
    "create_demo_app",
    "demo_client_key",
    "demo_router",
    "example_skills_path",
    "load_demo_corpus",
    "load_demo_searches",
    "load_recorded_interactions",
    "prepare_demo",
]

_KEY_FILE = "demo-admin-key"
_CLIENT_KEY_FILE = "demo-client-key"
#: What the demo adds to its workspace's amelio.toml (once: a value someone set stays).
_DEMO_SETTINGS = """
# Added by `amelio demo`: browsers of the demo search page may lend idle compute
# (amelio.js, docs/client.md#idle-compute). AMELIO_CONTRIBUTIONS=0 overrides it.
contributions = true
"""


def _example(name: str) -> Path:
    """An example folder: shipped in the wheel, or in the source checkout."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "_examples" / name, package.parent.parent / "examples" / name):
        if candidate.exists():
            return candidate
    raise ConfigError(f"The example {name} are missing from this installation; pass --skills PATH.")


def example_skills_path() -> Path:
    return _example("skills")


def load_recorded_interactions(ws: Workspace, path: Path | None = None) -> int:
    """Replay recorded messages, answers and feedback through the real pipeline (the
    recorded answer stands in for the LLM); returns how many were loaded. Does
    nothing when the workspace already has interactions, so a re-run adds none."""
    with ws.engine.connect() as conn:
        if conn.scalar(sa.select(sa.func.count()).select_from(interactions)):
            return 0
    path = path or _example("demo") / "interactions.jsonl"
    count = 0
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        reply = respond(
            ws,
            record["message"],
            project=record.get("project", "default"),
            provider=ScriptedProvider(default=record["answer"], model="recorded"),
        )
        for vote in record.get("feedback", ()):
            give_answer_feedback(
                ws,
                reply.interaction_id,
                vote["kind"],
                comment=vote.get("comment"),
                user=vote.get("user"),
            )
        count += 1
    return count


def load_demo_corpus(ws: Workspace, path: Path | None = None) -> int:
    """Index the demo help-desk articles so search, feedback and signals work at
    once; returns how many were imported. Does nothing when the corpus already
    has documents: a re-run must not replace what someone imported. With
    ``contributions`` on (the demo's default) their vectors are left to the browsers
    of the demo page that lend idle compute, as ``amelio corpus import`` does."""
    corpus = workspace_corpus(ws.settings)
    if corpus.count():
        return 0
    return corpus.import_file(
        path or _example("demo") / "corpus.jsonl", embedder=import_embedder(ws.settings)
    ).upserted


def load_demo_searches(ws: Workspace, path: Path | None = None) -> int:
    """Replay recorded search sessions (query, the results clicked, dwell times)
    through search, the collector and the aggregator; returns how many sessions.
    Does nothing when searches were already logged, so a re-run adds none."""
    with ws.engine.connect() as conn:
        if conn.scalar(sa.select(sa.func.count()).select_from(search_impressions)):
            return 0
    # Seeded, so every demo explores, and so learns, the same way.
    searcher = Searcher(
        ws,
        background_aggregation=False,
        rng=random.Random(0),  # noqa: S311
        defer_missing_vectors=browsers_embed(ws.settings),
    )
    path = path or _example("demo") / "search_sessions.jsonl"
    events: list[dict[str, Any]] = []
    count = 0
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        response = searcher.search(
            record["query"], profile="hybrid_with_feedback", alpha=0.0, session=record["session"]
        )
        ranks = {d.doc_id: rank for rank, d in enumerate(response.results, start=1)}
        for click in record["clicks"]:
            if click["docId"] in ranks:  # not shown this time: nobody could click it
                events += click_events(
                    response,
                    ranks[click["docId"]],
                    record["session"],
                    click["dwellMs"],
                    int(time.time() * 1000),
                )
        count += 1
    collector = Collector(ws)
    size = ws.settings.feedback_max_events
    for start in range(0, len(events), size):
        collector.ingest(events[start : start + size], rate_limit=False)
    aggregate(ws)
    return count


def _saved_key(ws: Workspace, file: str, name: str, role: str) -> str:
    """The key saved in ``file`` of the data folder, made (and saved) when missing or
    revoked."""
    path = ws.settings.data_dir / file
    if path.is_file():
        token = path.read_text(encoding="utf-8").strip()
        found = keys.authenticate(ws.engine, token)
        if found is not None and found.role == role:
            return token
    _, token = keys.create_key(ws.engine, name=name, role=role)
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # never world-readable
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(token + "\n")
    return token


def _admin_key(ws: Workspace) -> str:
    return _saved_key(ws, _KEY_FILE, "demo admin", "admin")


def demo_client_key(ws: Workspace) -> str:
    """The demo search page's ``client`` key: it can only send feedback events, so it
    may be given to the browser."""
    return _saved_key(ws, _CLIENT_KEY_FILE, "demo search page", "client")


def _demo_settings(ws: Workspace) -> Workspace:
    """The workspace with the demo's settings in its amelio.toml (``contributions``),
    written unless the file already sets them: a re-run, or a value someone chose,
    keeps what is there."""
    toml = ws.root / CONFIG_FILE
    text = toml.read_text(encoding="utf-8") if toml.is_file() else ""
    if re.search(r"^\s*contributions\s*=", text, re.MULTILINE):
        return ws
    toml.write_text(text.rstrip("\n") + "\n" + _DEMO_SETTINGS, encoding="utf-8")
    return replace(ws, settings=load_settings(ws.root))  # the same database, so its engine


#: The settings ``--llm`` writes; any line that already sets one is replaced.
_LLM_KEYS = ("llm_provider", "llm_model_path", "llm_base_url", "llm_model")


def _demo_llm(ws: Workspace, model_path: Path) -> Workspace:
    """The workspace with the local provider on ``model_path`` in its amelio.toml:
    the chat, the Telegram bot and the OpenAI-compatible proxy answer with it."""
    with model_path.open("rb") as f:
        if f.read(4) != b"GGUF":
            raise ConfigError(f"--llm {model_path} is not a GGUF file (it does not start GGUF).")
    toml = ws.root / CONFIG_FILE
    keys = "|".join(_LLM_KEYS)
    kept = [
        line
        for line in toml.read_text(encoding="utf-8").splitlines()
        if not re.match(rf"^\s*({keys})\s*=", line)
    ]
    kept += ['llm_provider = "local"', f"llm_model_path = {json.dumps(str(model_path.resolve()))}"]
    toml.write_text("\n".join(kept) + "\n", encoding="utf-8")
    return replace(ws, settings=load_settings(ws.root))


def prepare_demo(
    directory: Path, skills_path: Path | None = None, *, llm: Path | None = None
) -> tuple[Workspace, str]:
    """Make the demo workspace ready to serve; returns it and an admin key.

    The first time, it also loads the recorded interactions and runs the nightly
    loop, so metrics, underperformers and proposals are there at once. ``llm``, a
    GGUF file, puts a real assistant behind the chat (the ``local`` provider).
    """
    ws, _ = init_workspace(directory)
    ws = _demo_settings(ws)
    if llm is not None:
        ws = _demo_llm(ws, llm)
    skills.import_skills(ws.engine, skills_path or example_skills_path(), author="demo")
    if load_demo_corpus(ws):
        load_demo_searches(ws)
    if skills_path is None and load_recorded_interactions(ws):
        run_improve(ws, notify=False)
    demo_client_key(ws)
    return ws, _admin_key(ws)


# -- the demo search page ----------------------------------------------------------------


class DemoQuery(BaseModel):
    """What the demo page sends its own backend: the text, and amelio.js's tab session
    id once the person consented (so searches and events join)."""

    model_config = ConfigDict(extra="forbid")

    query: Annotated[str, Field(min_length=1, max_length=500)]
    sessionId: Annotated[str | None, Field(default=None, min_length=1, max_length=128)] = None


def demo_router(client_key: str) -> APIRouter:
    """``GET /demo/search``, a public search page over the demo corpus using
    ``/static/amelio.js`` (feedback, and idle compute with its settings panel);
    ``POST /demo/search/query``, its backend: it searches as ``POST /v1/search`` does,
    on the server, so no bot key reaches the browser; and ``GET /demo/doc/{doc_id}``,
    the page a result links to. A result must lead to a page of its own for the
    dwell loop to be seen: the person leaves the results, reads, comes back with
    Back, and amelio.js measures the time away (``result_dwell_time``)."""
    from starlette.concurrency import run_in_threadpool

    from amelio.server.routes.search import searcher
    from amelio.server.routes.web import templates

    router = APIRouter(prefix="/demo", include_in_schema=False)

    @router.get("/search", response_class=HTMLResponse)
    def page(request: Request) -> HTMLResponse:
        response = templates.TemplateResponse(
            request, "demo_search.html", {"client_key": client_key}
        )
        response.headers["Cache-Control"] = "no-store"
        return response

    @router.post("/search/query")
    async def query(body: DemoQuery, request: Request) -> dict[str, Any]:
        engine = searcher(request)
        response = await run_in_threadpool(
            engine.search, body.query, limit=10, session=body.sessionId
        )
        return response.to_dict()

    @router.get("/doc/{doc_id}", response_class=HTMLResponse)
    async def document(request: Request, doc_id: str, q: str = "") -> HTMLResponse:
        found = await run_in_threadpool(searcher(request).engine.documents, [doc_id])
        doc = found.get(doc_id)
        back = "/demo/search" + (f"?{urlencode({'q': q[:500]})}" if q.strip() else "")
        return templates.TemplateResponse(
            request,
            "demo_doc.html",
            {
                "doc": doc,
                "paragraphs": [p for p in (doc.body if doc else "").split("\n\n") if p.strip()],
                "back": back,
            },
            status_code=200 if doc else 404,
        )

    return router


def create_demo_app(ws: Workspace) -> FastAPI:
    """The service for ``ws`` (as ``amelio serve`` runs it) plus the demo search page:
    what ``amelio demo`` serves."""
    from amelio.server import create_app

    app = create_app(ws)
    app.include_router(demo_router(demo_client_key(ws)))
    return app
