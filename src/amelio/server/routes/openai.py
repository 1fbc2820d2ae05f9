"""OpenAI-compatible routes: ``POST /v1/chat/completions`` and ``GET /v1/models``.

The one area whose errors are OpenAI's ``{"error": {"message", "type", "param",
"code"}}`` instead of Amelio's shape, so that an app on the OpenAI SDK gets the
exceptions it already handles. That is why these routes read their body, key and
headers themselves: FastAPI's own validation would answer in Amelio's shape.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from amelio.errors import AmelioError
from amelio.openai_compat import (
    ChatResult,
    OpenAICompatError,
    PendingStream,
    aclose_clients,
    from_amelio_error,
    list_models,
    parse_chat_request,
    start_chat,
)
from amelio.server.auth import authorize_project, require
from amelio.server.params import PROJECT_PATTERN
from amelio.workspace.keys import ApiKey
from amelio.workspace.projects import DEFAULT_PROJECT

__all__ = ["ERROR_RESPONSES", "router"]


@asynccontextmanager
async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
    try:
        yield
    finally:  # the upstream connections opened on this loop for streams
        await aclose_clients()


router = APIRouter(tags=["openai-compatible"], lifespan=lifespan)
_bearer = HTTPBearer(auto_error=False, description="An Amelio bot key: `amelio keys create`.")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
_require_bot = require("bot")
_TRUE = frozenset({"1", "true", "yes", "on"})
INTERACTION_HEADER = "X-Amelio-Interaction-Id"


class OpenAIErrorDetail(BaseModel):
    message: str = Field(description="What is wrong and what to do next.")
    type: str = Field(
        description="invalid_request_error, authentication_error, rate_limit_error or server_error."
    )
    param: str | None = Field(description="The request field at fault, if one is.")
    code: str | None = Field(description="A stable machine name, e.g. `model_not_found`.")


class OpenAIErrorBody(BaseModel):
    """OpenAI's error shape, which the OpenAI SDKs turn into their typed exceptions."""

    error: OpenAIErrorDetail


_HELP = {
    400: "Invalid request: bad JSON, no messages, no user message, `n` over "
    "`openai_max_n`, tools on a provider without them, or the upstream refused the request.",
    401: "No Amelio key, or an invalid or revoked one.",
    403: "The key's role or project scope does not allow this.",
    404: "The project or the model does not exist.",
    409: "The upstream refused the request as conflicting.",
    413: "The body or the last user message is over a configured limit.",
    422: "The JSON body nests too deep, or the upstream could not process the request.",
    429: "The upstream is rate limiting: retry after `Retry-After` seconds.",
    502: "The upstream LLM failed to answer.",
    503: "No LLM configured, or the upstream is unreachable or refused Amelio's credentials.",
}
#: The ``responses`` to include the router with: every error in OpenAI's shape.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": OpenAIErrorBody, "description": text} for status, text in _HELP.items()
}

_CHAT_BODY = {
    "required": True,
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "required": ["model", "messages"],
                "additionalProperties": True,
                "properties": {
                    "model": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": 200,
                        "description": "`amelio` for the configured model, or an upstream "
                        "model name.",
                    },
                    "messages": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "required": ["role"],
                            "additionalProperties": True,
                            "properties": {
                                "role": {
                                    "type": "string",
                                    "enum": [
                                        "system",
                                        "developer",
                                        "user",
                                        "assistant",
                                        "tool",
                                        "function",
                                    ],
                                },
                                "content": {
                                    "anyOf": [
                                        {"type": "string"},
                                        {"type": "array"},
                                        {"type": "null"},
                                    ]
                                },
                            },
                        },
                    },
                    "stream": {"type": "boolean"},
                    "temperature": {"type": "number"},
                    "max_tokens": {
                        "type": "integer",
                        "minimum": 1,
                        "description": "Lowered to `llm_max_tokens` when above it (so "
                        "is `max_completion_tokens`); `llm_max_tokens` when neither is sent.",
                    },
                    "n": {
                        "type": "integer",
                        "minimum": 1,
                        "description": "Choices to generate; at most `openai_max_n`.",
                    },
                    "tools": {"type": "array"},
                    "amelio": {
                        "type": "object",
                        "properties": {"footnotes": {"type": "boolean"}},
                        "description": "Amelio's extension: `footnotes` appends the eval "
                        "footnotes to the answer.",
                    },
                },
            }
        }
    },
}
_CHAT_PARAMETERS = [
    {
        "name": "X-Amelio-Project",
        "in": "header",
        "required": False,
        "schema": {"type": "string", "pattern": PROJECT_PATTERN, "maxLength": 100},
        "description": "Project (tenant); default: the key's first project, else `default`.",
    },
    {
        "name": "X-Amelio-Footnotes",
        "in": "header",
        "required": False,
        "schema": {"type": "string", "maxLength": 10},
        "description": "`1` or `true` appends the eval footnotes to the answer text.",
    },
]
_CHAT_OK = {
    "description": "A `chat.completion` with an added `amelio` object, or with `stream: true` "
    "`chat.completion.chunk` events, an `amelio` chunk, then `data: [DONE]`.",
    "content": {"application/json": {"schema": {"type": "object"}}, "text/event-stream": {}},
    "headers": {
        INTERACTION_HEADER: {
            "description": "The stored interaction, for /v1/interactions/{id}/feedback (not "
            "on streams, nor on a turn that ends in tool calls).",
            "schema": {"type": "string"},
        }
    },
}


def _error(exc: OpenAICompatError) -> JSONResponse:
    return JSONResponse(exc.to_dict(), status_code=exc.status, headers=exc.headers or None)


def _key(request: Request, credentials: HTTPAuthorizationCredentials | None) -> ApiKey:
    key: ApiKey = _require_bot(request, credentials)
    return key


def _answer(
    request: Request, credentials: HTTPAuthorizationCredentials | None, raw: bytes
) -> ChatResult | PendingStream:
    """Key, project, body, answer: one trip to the thread pool, as each trip costs; a
    stream to an OpenAI upstream is then opened and relayed on the event loop."""
    ws = request.app.state.workspace
    key = _key(request, credentials)
    project = request.headers.get("x-amelio-project") or (
        key.projects[0] if key.projects else DEFAULT_PROJECT
    )
    authorize_project(ws.engine, key, project)
    footnotes = request.headers.get("x-amelio-footnotes", "").strip().lower() in _TRUE
    call = parse_chat_request(raw, ws.settings, footnotes_header=footnotes)
    return start_chat(ws, call, project=project)


@router.post(
    "/v1/chat/completions",
    summary="OpenAI-compatible chat completions",
    response_class=JSONResponse,
    responses={200: _CHAT_OK},
    openapi_extra={"requestBody": _CHAT_BODY, "parameters": _CHAT_PARAMETERS},
)
async def chat_completions_route(request: Request, credentials: Credentials) -> Response:
    try:
        try:
            raw = await request.body()
        except StarletteHTTPException as exc:  # the body limit or the NUL guard, mid-body
            status = 413 if exc.status_code == 413 else 400
            raise OpenAICompatError(
                status,
                str(exc.detail),
                code="input_too_large" if status == 413 else "invalid_input",
            ) from None
        result = await run_in_threadpool(_answer, request, credentials, raw)
        if isinstance(result, PendingStream):
            result = await result.open()
    except OpenAICompatError as exc:
        return _error(exc)
    except AmelioError as exc:
        return _error(from_amelio_error(exc))
    if result.chunks is not None:
        return StreamingResponse(
            result.chunks,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    headers = (
        {INTERACTION_HEADER: str(result.interaction_id)}
        if result.interaction_id is not None
        else None
    )
    return JSONResponse(result.body, headers=headers)


@router.get(
    "/v1/models",
    summary="OpenAI-compatible model list (`amelio` and the upstream's)",
    response_class=JSONResponse,
    responses={
        200: {
            "description": "`{object: list, data: [{id, object, created, "
            "owned_by}]}`; `amelio` is the configured model.",
            "content": {"application/json": {"schema": {"type": "object"}}},
        }
    },
)
async def models_route(request: Request, credentials: Credentials) -> Response:
    def listed() -> dict[str, Any]:
        _key(request, credentials)
        return list_models(request.app.state.workspace)

    try:
        return JSONResponse(await run_in_threadpool(listed))
    except OpenAICompatError as exc:
        return _error(exc)
    except AmelioError as exc:
        return _error(from_amelio_error(exc))
