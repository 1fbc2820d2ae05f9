"""Chat (plain and server-sent events), interactions, feedback and quality."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from amelio.assistant import Reply, get_interaction, respond, respond_stream
from amelio.errors import AmelioError
from amelio.keys import ApiKey
from amelio.llm import TextDelta
from amelio.projects import DEFAULT_PROJECT
from amelio.quality import MAX_COMMENT_CHARS, give_feedback, quality_metrics
from amelio.server.auth import require

router = APIRouter(tags=["assistant"])
log = logging.getLogger("amelio.server")

Bot = Annotated[ApiKey, Depends(require("bot"))]


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    message: str = Field(min_length=1, max_length=100_000)
    project: str = DEFAULT_PROJECT
    user: str | None = Field(default=None, max_length=200,
                             description="Who asks; stored only as a keyed hash.")


class FeedbackRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: str = Field(description="up (👍), down (👎) or fixit (🛠️ Fix It).")
    comment: str | None = Field(default=None, max_length=MAX_COMMENT_CHARS)
    user: str | None = Field(default=None, max_length=200)


@router.post("/v1/chat", summary="Answer a message (route, prompt, LLM, evals, record)")
def chat(request: Request, body: ChatRequest, _: Bot) -> dict[str, Any]:
    return respond(request.app.state.workspace, body.message, project=body.project,
                   user=body.user).to_dict()


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


@router.post("/v1/chat/stream", summary="Answer a message as server-sent events",
             response_class=StreamingResponse,
             responses={200: {"content": {"text/event-stream": {}},
                              "description": "`token` events, then one `done` event "
                                             "(or one `error` event)."}})
def chat_stream(request: Request, body: ChatRequest, _: Bot) -> StreamingResponse:
    # Set up before streaming: a configuration error is an ordinary HTTP error.
    events = respond_stream(request.app.state.workspace, body.message, project=body.project,
                            user=body.user)

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
            yield _sse("error", {"error": {"code": "internal_error",
                                           "message": "Internal error; see the server log.",
                                           "details": {}}})

    return StreamingResponse(stream(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


@router.get("/v1/interactions/{interaction_id}", summary="One interaction with its evals")
def interaction(request: Request, interaction_id: int, _: Bot) -> dict[str, Any]:
    return get_interaction(request.app.state.workspace, interaction_id)


@router.post("/v1/interactions/{interaction_id}/feedback",
             summary="👍, 👎 or Fix It on an answer (a user's last vote stands)")
def feedback(request: Request, interaction_id: int, body: FeedbackRequest, _: Bot
             ) -> dict[str, Any]:
    return give_feedback(request.app.state.workspace, interaction_id, body.kind,
                         comment=body.comment, user=body.user).to_dict()


@router.get("/v1/quality", summary="Quality metrics per skill")
def quality(request: Request, _: Bot,
            project: Annotated[str | None, Query(description="One project; all if absent.")]
            = None) -> dict[str, Any]:
    metrics = quality_metrics(request.app.state.workspace, project)
    return {"project": project, "skills": [m.to_dict() for m in metrics]}
