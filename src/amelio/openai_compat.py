"""The OpenAI Chat Completions wire format in front of the respond pipeline.

An app written against the OpenAI SDK adopts Amelio by changing its ``base_url``:
the last user message is routed, the Amelio system block (skills hint, active
skill, learnings) goes before the client's own messages, the answer is checked
by the applied skill's rules and stored as one interaction, and the response
gains an ``amelio`` object (interaction id, skills, evals, footnotes).

Two paths, chosen by ``llm_provider``:

* ``openai`` (OpenAI or any compatible server): the client's request body is
  forwarded as it came (tools, tool calls, ``response_format``, sampling
  parameters, anything newer than this module), with the Amelio system message
  prepended and ``model`` resolved, and the upstream's response is returned or
  relayed chunk by chunk. Nothing is parsed beyond what the evals need.
* any other provider (``anthropic``, ``claude-cli``, a plugin's): text turns go
  through the provider protocol; ``tools`` or tool turns are refused with a 400
  that names the setting that supports them.

A turn that ends in tool calls is not an answer: it is relayed but neither
checked nor stored. The turn after the tool result (its last message has role
``tool``) answers the user's message, and that answer is the one stored. The
tool output itself is never routed: the routed message is always the last user
message, so every turn of one exchange gets the same system block.

Errors leave as OpenAI's ``{"error": {"message", "type", "param", "code"}}`` so
that the SDKs raise their typed exceptions (:class:`OpenAICompatError`).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import openai

from amelio.assistant import Reply, record_reply
from amelio.config import Settings
from amelio.errors import AmelioError, LLMError, RateLimited
from amelio.llm import Completion, LLMRequest, Message, TextDelta, get_provider
from amelio.llm.base import cost_usd
from amelio.llm.openai import DEFAULT_MODEL
from amelio.projects import DEFAULT_PROJECT
from amelio.prompt import Prompt, build_prompt
from amelio.workspace import Workspace

__all__ = [
    "AMELIO_MODEL",
    "ChatCall",
    "ChatResult",
    "OpenAICompatError",
    "chat_completions",
    "from_amelio_error",
    "list_models",
    "parse_chat_request",
]

log = logging.getLogger(__name__)

#: The model name that means "the configured default".
AMELIO_MODEL = "amelio"
_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
_TOOL_ROLES = frozenset({"tool", "function"})
_SYSTEM_ROLES = frozenset({"system", "developer"})
_MAX_MODEL_CHARS = 200
# Upstream statuses that describe the client's own request (a malformed tool schema,
# an unknown model): they reach the client as they are. Others are Amelio's problem.
_CLIENT_STATUSES = frozenset({400, 404, 409, 413, 422})


class OpenAICompatError(Exception):
    """An error in OpenAI's shape: ``status`` and the four fields the SDKs read."""

    def __init__(self, status: int, message: str, *, type: str | None = None,
                 param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type or _type_for(status)
        self.param = param
        self.code = code
        self.headers = headers or {}

    def to_dict(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}


def _type_for(status: int) -> str:
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
    if isinstance(exc, LLMError) and isinstance(upstream, int) and upstream in _CLIENT_STATUSES:
        status = upstream  # the provider refused the client's own request (e.g. the model)
    elif status == 422:
        status = 400
    code = "invalid_api_key" if exc.code == "unauthorized" else exc.code
    if status == 404 and isinstance(exc, LLMError):
        code = "model_not_found"
    headers = {"Retry-After": str(exc.retry_after)} if isinstance(exc, RateLimited) else {}
    field_name = exc.details.get("field")
    return OpenAICompatError(status, exc.message, code=code, headers=headers,
                             param=field_name if isinstance(field_name, str) else None)


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


def _text(content: Any) -> str:
    """A message's text: a string, or the text parts of a content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content
                         if isinstance(part, dict) and part.get("type") == "text")
    return ""


def parse_chat_request(raw: bytes, settings: Settings, *, footnotes_header: bool = False
                       ) -> ChatCall:
    """Read and check a request body, with OpenAI's 400s for what cannot be answered."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise OpenAICompatError(400, "We could not parse the JSON body of your request: "
                                "send a JSON object (Content-Type: application/json).",
                                code="invalid_json") from None
    if not isinstance(body, dict):
        raise OpenAICompatError(400, "The request body must be a JSON object.",
                                code="invalid_json")
    model = body.get("model")
    if not isinstance(model, str) or not model.strip() or len(model) > _MAX_MODEL_CHARS:
        raise OpenAICompatError(400, f"`model` must be a model name of 1-{_MAX_MODEL_CHARS} "
                                f"characters; {AMELIO_MODEL!r} means the configured default.",
                                param="model", code="invalid_model")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise OpenAICompatError(400, "`messages` must be a non-empty list of messages.",
                                param="messages", code="empty_messages")
    for n, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if not isinstance(role, str) or role not in _ROLES:
            raise OpenAICompatError(
                400, f"messages[{n}] must be an object whose role is one of "
                f"{', '.join(sorted(_ROLES))}.", param=f"messages.[{n}].role",
                code="invalid_message")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise OpenAICompatError(400, "`stream` must be true or false.", param="stream")
    extension = body.pop("amelio", None)
    if extension is not None and not isinstance(extension, dict):
        raise OpenAICompatError(400, '`amelio` must be an object, e.g. {"footnotes": true}.',
                                param="amelio")
    asked = (extension or {}).get("footnotes")
    if asked is not None and not isinstance(asked, bool):
        raise OpenAICompatError(400, "`amelio.footnotes` must be true or false.",
                                param="amelio.footnotes")
    users = [m for m in messages if m.get("role") == "user"]
    if not users:
        raise OpenAICompatError(400, "`messages` holds no user message to answer.",
                                param="messages", code="no_user_message")
    text = _text(users[-1].get("content")).strip()
    if not text:
        raise OpenAICompatError(400, "The last user message has no text to answer.",
                                param="messages", code="empty_message")
    if len(text) > settings.max_text_chars:
        raise OpenAICompatError(413, f"The last user message is over "
                                f"{settings.max_text_chars:,} characters (max_text_chars).",
                                param="messages", code="input_too_large")
    user = body.get("user")
    # The body's explicit choice wins, then the header, then the setting.
    footnotes = asked if asked is not None else footnotes_header or settings.openai_footnotes
    return ChatCall(body=body, model=model.strip(), stream=stream, footnotes=footnotes,
                    message=text, tool_turn=messages[-1].get("role") in _TOOL_ROLES,
                    user=user[:200] if isinstance(user, str) and user else None)


# -- the response --------------------------------------------------------------------------


@dataclass(frozen=True)
class ChatResult:
    """What the route sends: a JSON ``body``, or SSE ``chunks``; ``interaction_id`` for
    the ``X-Amelio-Interaction-Id`` header (None when streaming, or for a tool-call turn)."""

    body: dict[str, Any] | None = None
    chunks: Iterator[bytes] | None = None
    interaction_id: int | None = None
    headers: dict[str, str] = field(default_factory=dict)


def _amelio(prompt: Prompt, reply: Reply | None) -> dict[str, Any]:
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


def _sse(data: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


_DONE = b"data: [DONE]\n\n"


def _footnote_text(reply: Reply) -> str:
    """What streaming appends for the footnotes: the tail append_footnotes adds."""
    return "\n\n" + "\n".join(reply.footnotes)


def _error_event(exc: OpenAICompatError) -> bytes:
    """A mid-stream failure: the SDKs raise on a chunk holding ``error``."""
    return _sse(exc.to_dict())


# -- the openai path: forward the client's request ------------------------------------------

_clients: dict[tuple[Any, ...], openai.OpenAI] = {}
_clients_lock = threading.Lock()


def _client(settings: Settings) -> openai.OpenAI:
    """One SDK client per upstream configuration: its connection pool is what keeps
    the proxy's overhead in the low milliseconds (a new client per call reconnects)."""
    key = (settings.llm_base_url, settings.effective_llm_api_key, settings.llm_timeout,
           settings.llm_max_retries)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            if not settings.effective_llm_api_key and not settings.llm_base_url:
                raise OpenAICompatError(
                    503, "Amelio has no API key for its OpenAI upstream: set "
                    "AMELIO_LLM_API_KEY or OPENAI_API_KEY, or AMELIO_LLM_BASE_URL for a local "
                    "server.", code="llm_not_configured")
            if len(_clients) > 16:
                _clients.clear()
            client = _clients[key] = openai.OpenAI(
                api_key=settings.effective_llm_api_key or "not-needed",
                base_url=settings.llm_base_url or None, timeout=settings.llm_timeout,
                max_retries=settings.llm_max_retries)
    return client


def _default_model(settings: Settings) -> str:
    if settings.llm_provider == "openai":
        return settings.llm_model or DEFAULT_MODEL
    return settings.llm_model or settings.llm_provider


def _upstream_error(exc: Exception, settings: Settings) -> OpenAICompatError:
    """An upstream failure in OpenAI's shape, with a status that blames the right side:
    the client's request (400, 404, ...) passes through; the upstream's key, quota or
    outage is Amelio's (503) or the upstream's (502)."""
    where = settings.llm_base_url or "api.openai.com"
    if isinstance(exc, openai.APITimeoutError):
        return OpenAICompatError(503, f"The LLM server at {where} did not answer in time "
                                 "(AMELIO_LLM_TIMEOUT), after retries.", code="upstream_timeout")
    if isinstance(exc, openai.APIConnectionError | httpx.TransportError):
        return OpenAICompatError(503, f"Amelio cannot reach its LLM server at {where}: {exc}.",
                                 code="upstream_unavailable")
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        error = exc.body if isinstance(exc.body, dict) else {}
        message = str(error.get("message") or exc.message)
        param = error.get("param") if isinstance(error.get("param"), str) else None
        code = error.get("code") if isinstance(error.get("code"), str) else None
        if status in _CLIENT_STATUSES:
            if status == 404 and code is None:
                code = "model_not_found"
            return OpenAICompatError(status, message, param=param, code=code,
                                     type=str(error.get("type") or _type_for(status)))
        if status == 429:
            retry = exc.response.headers.get("retry-after")
            return OpenAICompatError(429, f"The LLM server at {where} is rate limiting Amelio: "
                                     f"{message}", code=code or "rate_limit_exceeded",
                                     headers={"Retry-After": retry} if retry else {})
        if status in (401, 402, 403):
            return OpenAICompatError(503, f"The LLM server at {where} refused Amelio's own "
                                     f"credentials ({status}: {message}): check "
                                     "AMELIO_LLM_API_KEY.", code="llm_not_configured")
        return OpenAICompatError(502, f"The LLM server at {where} answered {status}: {message}",
                                 code="upstream_error")
    return OpenAICompatError(502, f"The call to the LLM server at {where} failed: {exc}",
                             code="upstream_error")


def _forward_body(call: ChatCall, prompt: Prompt, settings: Settings) -> dict[str, Any]:
    if call.model == AMELIO_MODEL and settings.llm_base_url and not settings.llm_model:
        raise OpenAICompatError(
            503, f"Which model should {settings.llm_base_url} run for {AMELIO_MODEL!r}? Set "
            "AMELIO_LLM_MODEL, or name the model in the request.", code="llm_not_configured")
    body = dict(call.body)
    body["model"] = _default_model(settings) if call.model == AMELIO_MODEL else call.model
    body["messages"] = [{"role": "system", "content": prompt.system}, *call.body["messages"]]
    return body


def _usage(data: dict[str, Any]) -> tuple[int | None, int | None]:
    usage = data.get("usage")
    if not isinstance(usage, dict):
        return None, None
    tin, tout = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return (tin if isinstance(tin, int) else None, tout if isinstance(tout, int) else None)


def _forwarded(ws: Workspace, call: ChatCall, prompt: Prompt, project: str,
               started: float) -> ChatResult:
    settings = ws.settings
    client = _client(settings)
    body = _forward_body(call, prompt, settings)
    if call.stream:
        return _forwarded_stream(ws, call, prompt, project, started, client, body)
    sent = time.perf_counter()
    try:
        response = client.post("/chat/completions", body=body, cast_to=httpx.Response)
        data = response.json()
    except (openai.OpenAIError, httpx.HTTPError) as exc:
        raise _upstream_error(exc, settings) from exc
    except ValueError as exc:
        raise OpenAICompatError(502, "The LLM server's answer is not JSON.",
                                code="upstream_error") from exc
    llm_ms = (time.perf_counter() - sent) * 1000
    if not isinstance(data, dict):
        raise OpenAICompatError(502, "The LLM server's answer is not a JSON object.",
                                code="upstream_error")
    message = _first_message(data)
    reply = None
    if not message.get("tool_calls") and not message.get("function_call"):
        tin, tout = _usage(data)
        completion = Completion(_text(message.get("content")), str(data.get("model") or
                                body["model"]), "openai", tin, tout, llm_ms,
                                cost_usd(settings, tin, tout))
        reply = record_reply(ws, prompt, completion, project=project, user=call.user,
                             started=started)
        if call.footnotes and reply.footnotes:
            message["content"] = reply.text
    data["amelio"] = _amelio(prompt, reply)
    return ChatResult(body=data, interaction_id=reply.interaction_id if reply else None)


def _first_message(data: dict[str, Any]) -> dict[str, Any]:
    """The first choice's message (the one checked), or an empty one."""
    choices = data.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    return message if isinstance(message, dict) else {}


def _forwarded_stream(ws: Workspace, call: ChatCall, prompt: Prompt, project: str,
                      started: float, client: openai.OpenAI, body: dict[str, Any]
                      ) -> ChatResult:
    settings = ws.settings
    sent = time.perf_counter()
    try:  # opened before the route answers: a refusal is an ordinary HTTP error
        response = client.post("/chat/completions", body=body, cast_to=httpx.Response,
                               stream=True)
    except (openai.OpenAIError, httpx.HTTPError) as exc:
        raise _upstream_error(exc, settings) from exc

    def chunks() -> Iterator[bytes]:
        parts: list[str] = []
        held: list[bytes] = []  # from the finishing chunk on: footnotes go before it
        tools = finished = False
        head: dict[str, Any] = {}
        tin = tout = None
        try:
            for line in response.iter_lines():
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    break
                try:
                    chunk = json.loads(payload)
                except ValueError:
                    continue
                if not isinstance(chunk, dict):
                    continue
                if "error" in chunk:  # the upstream failed mid-answer: relay, store nothing
                    yield f"data: {payload}\n\n".encode()
                    return
                head = head or chunk
                for choice in chunk.get("choices") or ():
                    if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                        continue
                    delta = choice.get("delta")
                    delta = delta if isinstance(delta, dict) else {}
                    if isinstance(delta.get("content"), str):
                        parts.append(delta["content"])
                    if delta.get("tool_calls") or delta.get("function_call"):
                        tools = True
                    finished = finished or bool(choice.get("finish_reason"))
                if chunk.get("usage"):
                    tin, tout = _usage(chunk)
                out = f"data: {payload}\n\n".encode()
                if finished:
                    held.append(out)
                else:
                    yield out
        except (openai.OpenAIError, httpx.HTTPError) as exc:
            yield _error_event(_upstream_error(exc, settings))
            return
        finally:
            response.close()
        reply = None
        if not tools:
            completion = Completion("".join(parts), str(head.get("model") or body["model"]),
                                    "openai", tin, tout, (time.perf_counter() - sent) * 1000,
                                    cost_usd(settings, tin, tout))
            reply = record_reply(ws, prompt, completion, project=project, user=call.user,
                                 started=started)
            if call.footnotes and reply.footnotes:
                yield _sse(_chunk(head, body["model"], {"content": _footnote_text(reply)}))
        yield from held
        yield _sse({**_chunk(head, body["model"], None), "amelio": _amelio(prompt, reply)})
        yield _DONE

    return ChatResult(chunks=_guarded(chunks()))


def _chunk(head: dict[str, Any], model: str, delta: dict[str, Any] | None) -> dict[str, Any]:
    """A chunk in the stream's own id and model; no choices when ``delta`` is None."""
    choices = [] if delta is None else [{"index": 0, "delta": delta, "logprobs": None,
                                         "finish_reason": None}]
    return {"id": head.get("id") or f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion.chunk", "created": head.get("created") or int(time.time()),
            "model": head.get("model") or model, "choices": choices}


def _guarded(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """A stream never ends in a traceback: a failure while storing becomes an error event."""
    try:
        yield from chunks
    except AmelioError as exc:
        yield _error_event(from_amelio_error(exc))
    except Exception:
        log.exception("chat completions stream failed")
        yield _error_event(OpenAICompatError(500, "Internal error; see the server log.",
                                             code="internal_error"))


# -- other providers: text turns through the provider protocol -----------------------------


def _provider_request(call: ChatCall, prompt: Prompt, settings: Settings) -> LLMRequest:
    body = call.body
    if body.get("tools") or body.get("functions") or call.tool_turn or any(
            m.get("tool_calls") or m.get("role") in _TOOL_ROLES for m in body["messages"]):
        raise OpenAICompatError(
            400, f"Tools and tool calls pass through only to an OpenAI-compatible upstream: "
            f"set AMELIO_LLM_PROVIDER=openai (with AMELIO_LLM_BASE_URL for a local server); "
            f"this Amelio uses {settings.llm_provider!r}, which takes text turns only.",
            param="tools", code="tools_unsupported")
    system = [prompt.system] + [_text(m.get("content")) for m in body["messages"]
                                if m.get("role") in _SYSTEM_ROLES]
    turns = tuple(Message(m["role"], _text(m.get("content"))) for m in body["messages"]
                  if m.get("role") in ("user", "assistant"))
    limit = body.get("max_completion_tokens") or body.get("max_tokens")
    temperature = body.get("temperature")
    return LLMRequest(
        "\n\n".join(part for part in system if part.strip()), turns,
        max_tokens=limit if isinstance(limit, int) and limit > 0 else settings.llm_max_tokens,
        temperature=float(temperature) if isinstance(temperature, int | float)
        and not isinstance(temperature, bool) else None)


def _completion_body(reply: Reply, prompt: Prompt, text: str) -> dict[str, Any]:
    c = reply.completion
    usage = None
    if c.input_tokens is not None or c.output_tokens is not None:
        usage = {"prompt_tokens": c.input_tokens or 0, "completion_tokens": c.output_tokens or 0,
                 "total_tokens": (c.input_tokens or 0) + (c.output_tokens or 0)}
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion",
        "created": int(time.time()), "model": c.model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text,
                                             "refusal": None},
                     "logprobs": None, "finish_reason": "stop"}],
        "usage": usage, "amelio": _amelio(prompt, reply),
    }


def _through_provider(ws: Workspace, call: ChatCall, prompt: Prompt, project: str,
                      started: float) -> ChatResult:
    settings = ws.settings
    if call.model not in (AMELIO_MODEL, settings.llm_model):
        settings = settings.model_copy(update={"llm_model": call.model})
    request = _provider_request(call, prompt, settings)
    provider = get_provider(settings, purpose="Chat completions")
    if not call.stream:
        reply = record_reply(ws, prompt, provider.complete(request), project=project,
                             user=call.user, started=started)
        text = reply.text if call.footnotes else reply.answer
        return ChatResult(body=_completion_body(reply, prompt, text),
                          interaction_id=reply.interaction_id)
    events = provider.stream(request)

    def chunks() -> Iterator[bytes]:
        head = {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "created": int(time.time()),
                "model": provider.model}
        yield _sse(_chunk(head, provider.model, {"role": "assistant", "content": ""}))
        completion = None
        for event in events:
            if isinstance(event, TextDelta):
                yield _sse(_chunk(head, provider.model, {"content": event.text}))
            else:
                completion = event
        if completion is None:
            raise LLMError("The provider's stream ended without a final answer.")
        reply = record_reply(ws, prompt, completion, project=project, user=call.user,
                             started=started)
        if call.footnotes and reply.footnotes:
            yield _sse(_chunk(head, provider.model, {"content": _footnote_text(reply)}))
        final = _chunk(head, provider.model, {})
        final["choices"][0]["finish_reason"] = "stop"
        yield _sse(final)
        yield _sse({**_chunk(head, provider.model, None), "amelio": _amelio(prompt, reply)})
        yield _DONE

    return ChatResult(chunks=_guarded(chunks()))


# -- entry points ----------------------------------------------------------------------------


def chat_completions(ws: Workspace, call: ChatCall, *, project: str = DEFAULT_PROJECT
                     ) -> ChatResult:
    """Answer one Chat Completions request through the respond pipeline.

    Raises :class:`OpenAICompatError` (or an :class:`AmelioError`, which
    :func:`from_amelio_error` converts) before anything is streamed.
    """
    started = time.perf_counter()
    prompt = build_prompt(ws, call.message, project=project)
    if ws.settings.llm_provider == "openai":
        return _forwarded(ws, call, prompt, project, started)
    return _through_provider(ws, call, prompt, project, started)


def list_models(ws: Workspace) -> dict[str, Any]:
    """``amelio`` (the configured default) and the upstream's models, in OpenAI's list
    shape. An upstream without a model list still leaves the configured model."""
    settings = ws.settings
    ids = [AMELIO_MODEL]
    if settings.llm_provider != "none":
        ids.append(_default_model(settings))
    if settings.llm_provider == "openai":
        try:
            found = _client(settings).get("/models", cast_to=httpx.Response).json()
            ids += [str(m["id"]) for m in found.get("data", [])
                    if isinstance(m, dict) and isinstance(m.get("id"), str)]
        except (openai.OpenAIError, httpx.HTTPError, ValueError, AttributeError) as exc:
            log.warning("the LLM server lists no models (%s); listing the configured one",
                        exc.__class__.__name__)
    data = [{"id": name, "object": "model", "created": 0,
             "owned_by": "amelio" if name == AMELIO_MODEL else settings.llm_provider}
            for name in dict.fromkeys(ids)]
    return {"object": "list", "data": data}
