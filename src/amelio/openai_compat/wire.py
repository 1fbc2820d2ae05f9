"""The Chat Completions wire format: OpenAI's error shape, the parsed request, the
response's ``amelio`` object, and the SSE framing shared by both answer paths."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

from amelio.assistant.prompt import Prompt
from amelio.assistant.respond import Reply
from amelio.errors import AmelioError, LLMError, RateLimited
from amelio.workspace.config import Settings

log = logging.getLogger(__name__)

#: The model name that means "the configured default".
AMELIO_MODEL = "amelio"
_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
TOOL_ROLES = frozenset({"tool", "function"})
SYSTEM_ROLES = frozenset({"system", "developer"})
_MAX_MODEL_CHARS = 200
#: Deeper than any real request (a tool's JSON schema nests a few levels); deeper
#: bodies would exhaust the stack of whoever reads or writes them next.
MAX_JSON_DEPTH = 64
# Upstream statuses that describe the client's own request (a malformed tool schema,
# an unknown model): they reach the client as they are. Others are Amelio's problem.
CLIENT_STATUSES = frozenset({400, 404, 409, 413, 422})


class OpenAICompatError(Exception):
    """An error in OpenAI's shape: ``status`` and the four fields the SDKs read."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str | None = None,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type or type_for(status)
        self.param = param
        self.code = code
        self.headers = headers or {}

    def to_dict(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


def type_for(status: int) -> str:
    if status == 401:
        return "authentication_error"
    if status == 429:
        return "rate_limit_error"
    return "server_error" if status >= 500 else "invalid_request_error"


def from_amelio_error(exc: AmelioError) -> OpenAICompatError:
    """Amelio's error as the OpenAI SDKs expect it: same message, same status, except
    invalid input, which OpenAI answers 400 (Amelio 422)."""
    status = exc.http_status
    upstream = exc.details.get("status")
    if isinstance(exc, LLMError) and isinstance(upstream, int) and upstream in CLIENT_STATUSES:
        status = upstream  # the provider refused the client's own request (e.g. the model)
    elif status == 422:
        status = 400
    code = "invalid_api_key" if exc.code == "unauthorized" else exc.code
    if status == 404 and isinstance(exc, LLMError):
        code = "model_not_found"
    headers = {"Retry-After": str(exc.retry_after)} if isinstance(exc, RateLimited) else {}
    field_name = exc.details.get("field")
    return OpenAICompatError(
        status,
        exc.message,
        code=code,
        headers=headers,
        param=field_name if isinstance(field_name, str) else None,
    )


# -- the request ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ChatCall:
    """A parsed ``/v1/chat/completions`` request: the body to forward and what Amelio
    reads from it."""

    body: dict[str, Any]
    model: str
    stream: bool
    footnotes: bool
    #: The last user message's text: what is routed and stored as the message.
    message: str
    #: The last turn is a tool result: the answer continues an exchange.
    tool_turn: bool
    user: str | None = None


def text_of(content: Any) -> str:
    """A message's text: a string, or the text parts of a content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""


def parse_chat_request(
    raw: bytes, settings: Settings, *, footnotes_header: bool = False
) -> ChatCall:
    """Read and check a request body, with OpenAI's 400s for what cannot be answered."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise OpenAICompatError(
            400,
            "We could not parse the JSON body of your request: "
            "send a JSON object (Content-Type: application/json).",
            code="invalid_json",
        ) from None
    except RecursionError:
        body = None
    if body is None or _depth_over(body, MAX_JSON_DEPTH):
        raise OpenAICompatError(
            422,
            f"The JSON body nests deeper than {MAX_JSON_DEPTH} levels.",
            code="invalid_json",
        )
    if not isinstance(body, dict):
        raise OpenAICompatError(400, "The request body must be a JSON object.", code="invalid_json")
    model = body.get("model")
    if not isinstance(model, str) or not model.strip() or len(model) > _MAX_MODEL_CHARS:
        raise OpenAICompatError(
            400,
            f"`model` must be a model name of 1-{_MAX_MODEL_CHARS} "
            f"characters; {AMELIO_MODEL!r} means the configured default.",
            param="model",
            code="invalid_model",
        )
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise OpenAICompatError(
            400,
            "`messages` must be a non-empty list of messages.",
            param="messages",
            code="empty_messages",
        )
    for n, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if not isinstance(role, str) or role not in _ROLES:
            raise OpenAICompatError(
                400,
                f"messages[{n}] must be an object whose role is one of "
                f"{', '.join(sorted(_ROLES))}.",
                param=f"messages.[{n}].role",
                code="invalid_message",
            )
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise OpenAICompatError(400, "`stream` must be true or false.", param="stream")
    extension = body.pop("amelio", None)
    if extension is not None and not isinstance(extension, dict):
        raise OpenAICompatError(
            400, '`amelio` must be an object, e.g. {"footnotes": true}.', param="amelio"
        )
    asked = (extension or {}).get("footnotes")
    if asked is not None and not isinstance(asked, bool):
        raise OpenAICompatError(
            400, "`amelio.footnotes` must be true or false.", param="amelio.footnotes"
        )
    users = [m for m in messages if m.get("role") == "user"]
    if not users:
        raise OpenAICompatError(
            400,
            "`messages` holds no user message to answer.",
            param="messages",
            code="no_user_message",
        )
    text = text_of(users[-1].get("content")).strip()
    if not text:
        raise OpenAICompatError(
            400,
            "The last user message has no text to answer.",
            param="messages",
            code="empty_message",
        )
    if len(text) > settings.max_text_chars:
        raise OpenAICompatError(
            413,
            f"The last user message is over "
            f"{settings.max_text_chars:,} characters (max_text_chars).",
            param="messages",
            code="input_too_large",
        )
    _cap_choices_and_tokens(body, settings)
    user = body.get("user")
    # The body's explicit choice wins, then the header, then the setting.
    footnotes = asked if asked is not None else footnotes_header or settings.openai_footnotes
    return ChatCall(
        body=body,
        model=model.strip(),
        stream=stream,
        footnotes=footnotes,
        message=text,
        tool_turn=messages[-1].get("role") in TOOL_ROLES,
        user=user[:200] if isinstance(user, str) and user else None,
    )


def _depth_over(value: Any, limit: int) -> bool:
    """Whether ``value`` nests containers more than ``limit`` deep (without recursing)."""
    level: list[Any] = [value]
    for _ in range(limit):
        level = [
            child
            for item in level
            if isinstance(item, dict | list)
            for child in (item.values() if isinstance(item, dict) else item)
        ]
        if not level:
            return False
    return any(isinstance(item, dict | list) for item in level)


def _cap_choices_and_tokens(body: dict[str, Any], settings: Settings) -> None:
    """Hold ``n`` and the token limits to the settings, as each multiplies what one
    request costs upstream: more choices than ``openai_max_n`` is refused (a client
    reading choices[3] must not get three), a token limit over ``llm_max_tokens`` is
    lowered to it (a ceiling, so the answer stays valid, possibly shorter), and a
    request without one gets ``max_tokens`` (what Amelio's own calls send), so that
    leaving the field out is no way around the cap."""
    n = body.get("n")
    if n is not None and (
        not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= settings.openai_max_n
    ):
        raise OpenAICompatError(
            400,
            f"`n` must be a whole number from 1 to {settings.openai_max_n} (openai_max_n).",
            param="n",
            code="invalid_value",
        )
    for name in ("max_tokens", "max_completion_tokens"):
        limit = body.get(name)
        if limit is None:
            continue
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise OpenAICompatError(
                400, f"`{name}` must be a positive whole number.", param=name, code="invalid_value"
            )
        body[name] = min(limit, settings.llm_max_tokens)
    if body.get("max_tokens") is None and body.get("max_completion_tokens") is None:
        body["max_tokens"] = settings.llm_max_tokens


# -- the response --------------------------------------------------------------------------


@dataclass(frozen=True)
class ChatResult:
    """What the route sends: a JSON ``body``, or SSE ``chunks``; ``interaction_id`` for
    the ``X-Amelio-Interaction-Id`` header (None when streaming, or for a tool-call turn)."""

    body: dict[str, Any] | None = None
    chunks: Iterator[bytes] | AsyncIterator[bytes] | None = None
    interaction_id: int | None = None
    headers: dict[str, str] = field(default_factory=dict)


def amelio_object(prompt: Prompt, reply: Reply | None) -> dict[str, Any]:
    """The ``amelio`` object: what was routed and, for an answer, how it was checked."""
    hits = prompt.route.hits if prompt.route else ()
    return {
        "interactionId": reply.interaction_id if reply else None,
        "skills": [h.to_dict() for h in hits],
        "appliedSkill": prompt.applied.name if prompt.applied else None,
        "evals": reply.evals.to_dict() if reply else None,
        "footnotes": list(reply.footnotes) if reply else [],
        "promptHash": prompt.hash,
    }


def sse(data: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


DONE = b"data: [DONE]\n\n"


def footnote_text(reply: Reply) -> str:
    """What streaming appends for the footnotes: the tail append_footnotes adds."""
    return "\n\n" + "\n".join(reply.footnotes)


def error_event(exc: OpenAICompatError) -> bytes:
    """A mid-stream failure: the SDKs raise on a chunk holding ``error``."""
    return sse(exc.to_dict())


def stream_chunk(head: dict[str, Any], model: str, delta: dict[str, Any] | None) -> dict[str, Any]:
    """A chunk in the stream's own id and model; no choices when ``delta`` is None."""
    choices = (
        []
        if delta is None
        else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]
    )
    return {
        "id": head.get("id") or f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion.chunk",
        "created": head.get("created") or int(time.time()),
        "model": head.get("model") or model,
        "choices": choices,
    }


def guarded(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """A stream never ends in a traceback: a failure while storing becomes an error event."""
    try:
        yield from chunks
    except Exception as exc:
        yield failure_event(exc)


async def guarded_async(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """:func:`guarded` for a stream relayed on the event loop."""
    try:
        async for out in chunks:
            yield out
    except Exception as exc:
        yield failure_event(exc)


def failure_event(exc: Exception) -> bytes:
    """The error event that ends a stream which failed after it began."""
    if isinstance(exc, AmelioError):
        return error_event(from_amelio_error(exc))
    log.error("chat completions stream failed", exc_info=exc)
    return error_event(
        OpenAICompatError(500, "Internal error; see the server log.", code="internal_error")
    )


def usage(data: dict[str, Any]) -> tuple[int | None, int | None]:
    usage = data.get("usage")
    if not isinstance(usage, dict):
        return None, None
    tin, tout = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return (tin if isinstance(tin, int) else None, tout if isinstance(tout, int) else None)
