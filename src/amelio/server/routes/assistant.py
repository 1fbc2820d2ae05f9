"""Chat (plain and server-sent events), interactions, answer feedback and quality."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Header, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from amelio.assistant.quality import MAX_COMMENT_CHARS, give_answer_feedback, quality_metrics
from amelio.assistant.respond import (
    MAX_IDEMPOTENCY_KEY_CHARS,
    Reply,
    get_interaction,
    log_exchange,
    respond,
    respond_stream,
    warm_up,
)
from amelio.errors import AmelioError
from amelio.llm import TextDelta
from amelio.server.auth import authorize_project, require, visible
from amelio.server.params import Id, OptionalProjectQuery, ProjectField
from amelio.workspace.folder import Workspace
from amelio.workspace.keys import ApiKey
from amelio.workspace.projects import DEFAULT_PROJECT

log = logging.getLogger("amelio.server")


def _warm(ws: Workspace) -> None:
    try:
        log.info("warmed up in %.2f s (LLM provider, routers, eval rules)", warm_up(ws))
    except Exception:  # the first answer then loads what is missing: never fatal
        log.warning("warming up failed; the first answer will load what it needs", exc_info=True)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Warm up in the background as the service starts (``warm_up``): it listens at
    once, and the first answer finds the SDK loaded and the routers built."""
    ws: Workspace = app.state.workspace
    if ws.settings.warm_up:
        threading.Thread(target=_warm, args=(ws,), name="amelio-warm-up", daemon=True).start()
    yield


router = APIRouter(tags=["assistant"], lifespan=lifespan)

Bot = Annotated[ApiKey, Depends(require("bot"))]


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    message: str = Field(min_length=1, max_length=100_000)
    project: ProjectField = DEFAULT_PROJECT
    user: str | None = Field(
        default=None, max_length=200, description="Who asks; stored only as a keyed hash."
    )
    conversation: str | None = Field(
        default=None,
        max_length=200,
        description="The thread's id: a canary rollout sticks to it when no user is named.",
    )


class AnswerFeedbackRequest(BaseModel):
    """Answer feedback (not the feedback events of ``/v1/feedback/events``)."""

    model_config = ConfigDict(extra="forbid")

    kind: str = Field(description="up (👍), down (👎) or fixit (🛠️ Fix It).")
    comment: str | None = Field(default=None, max_length=MAX_COMMENT_CHARS)
    user: str | None = Field(default=None, max_length=200)


class LogRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    message: str = Field(
        min_length=1, max_length=1_000_000, description="What the user asked the other system."
    )
    answer: str = Field(
        min_length=1, max_length=1_000_000, description="What the other system answered."
    )
    project: ProjectField = DEFAULT_PROJECT
    skills: list[Annotated[str, Field(min_length=1, max_length=100)]] | None = Field(
        default=None,
        max_length=20,
        description="The skills the answer used (the first one's rules check it); "
        "absent: the router attributes the message.",
    )
    model: str | None = Field(default=None, min_length=1, max_length=200)
    provider: str | None = Field(
        default=None, min_length=1, max_length=50, description="Who answered; default `external`."
    )


IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=MAX_IDEMPOTENCY_KEY_CHARS,
        description="A retry with the same key (per project) returns the first interaction.",
    ),
]


@router.post(
    "/v1/interactions",
    summary="Log an exchange answered elsewhere (evals run, it counts in quality metrics)",
)
def log_interaction(
    request: Request, body: LogRequest, key: Bot, idempotency_key: IdempotencyKey = None
) -> dict[str, Any]:
    authorize_project(request.app.state.workspace.engine, key, body.project)
    return log_exchange(
        request.app.state.workspace,
        body.message,
        body.answer,
        project=body.project,
        skills=body.skills,
        model=body.model,
        provider=body.provider,
        idempotency_key=idempotency_key,
    ).to_dict()


@router.post("/v1/chat", summary="Answer a message (route, prompt, LLM, evals, record)")
def chat(request: Request, body: ChatRequest, key: Bot) -> dict[str, Any]:
    authorize_project(request.app.state.workspace.engine, key, body.project)
    return respond(
        request.app.state.workspace,
        body.message,
        project=body.project,
        user=body.user,
        conversation=body.conversation,
    ).to_dict()


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


@router.post(
    "/v1/chat/stream",
    summary="Answer a message as server-sent events",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {"text/event-stream": {}},
            "description": "`token` events, then one `done` event (or one `error` event).",
        }
    },
)
def chat_stream(request: Request, body: ChatRequest, key: Bot) -> StreamingResponse:
    authorize_project(request.app.state.workspace.engine, key, body.project)
    # Set up before streaming: a configuration error is an ordinary HTTP error.
    events = respond_stream(
        request.app.state.workspace,
        body.message,
        project=body.project,
        user=body.user,
        conversation=body.conversation,
    )

    def stream() -> Iterator[bytes]:
        try:
            for event in events:
                if isinstance(event, TextDelta):
                    yield _sse("token", {"text": event.text})
                elif isinstance(event, Reply):
                    yield _sse("done", event.to_dict())
        except AmelioError as exc:
            yield _sse("error", {"error": exc.to_dict()})
        except Exception:
            log.exception("chat stream failed")
            yield _sse(
                "error",
                {
                    "error": {
                        "code": "internal_error",
                        "message": "Internal error; see the server log.",
                        "details": {},
                    }
                },
            )

    return StreamingResponse(
        stream(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.get("/v1/interactions/{interaction_id}", summary="One interaction with its evals")
def interaction(request: Request, interaction_id: Id, key: Bot) -> dict[str, Any]:
    return _interaction(request, interaction_id, key)


def _interaction(request: Request, interaction_id: int, key: ApiKey) -> dict[str, Any]:
    """The interaction, if the key may see its project (else 403, as for the project)."""
    ws = request.app.state.workspace
    found = get_interaction(ws, interaction_id)
    authorize_project(ws.engine, key, found["project"])
    return found


@router.post(
    "/v1/interactions/{interaction_id}/feedback",
    summary="Answer feedback: 👍, 👎 or Fix It on an answer (a user's last vote stands)",
)
def answer_feedback(
    request: Request, interaction_id: Id, body: AnswerFeedbackRequest, key: Bot
) -> dict[str, Any]:
    _interaction(request, interaction_id, key)
    return give_answer_feedback(
        request.app.state.workspace, interaction_id, body.kind, comment=body.comment, user=body.user
    ).to_dict()


@router.get("/v1/quality", summary="Quality metrics per skill")
def quality(request: Request, key: Bot, project: OptionalProjectQuery = None) -> dict[str, Any]:
    ws = request.app.state.workspace
    if project is not None:
        authorize_project(ws.engine, key, project)
    metrics = visible(key, quality_metrics(ws, project), lambda m: m.project)
    return {"project": project, "skills": [m.to_dict() for m in metrics]}
