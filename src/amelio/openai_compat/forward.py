"""The ``openai`` path: the client's own request body goes to an OpenAI-compatible
upstream with the Amelio system message prepended, and the answer comes back as
it came, chunk by chunk when streamed.

Streams are relayed on the service's event loop (:class:`PendingStream`): a
relay that read the upstream in a worker thread would hold that thread for
the whole answer, and a few dozen open streams would leave no thread for any
other request.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import weakref
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import openai

from amelio.assistant.prompt import Prompt
from amelio.assistant.respond import Reply, record_reply
from amelio.llm import Completion
from amelio.llm.base import cost_usd
from amelio.llm.openai import DEFAULT_MODEL
from amelio.openai_compat.wire import (
    AMELIO_MODEL,
    CLIENT_STATUSES,
    DONE,
    ChatCall,
    ChatResult,
    OpenAICompatError,
    amelio_object,
    error_event,
    footnote_text,
    guarded,
    guarded_async,
    sse,
    stream_chunk,
    text_of,
    type_for,
    usage,
)
from amelio.workspace.config import Settings
from amelio.workspace.folder import Workspace

_clients: dict[tuple[Any, ...], openai.OpenAI] = {}
_clients_lock = threading.Lock()
# Async clients hold connections bound to their event loop: one set per loop.
_async_clients: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[tuple[Any, ...], openai.AsyncOpenAI]
] = weakref.WeakKeyDictionary()


def _client_config(settings: Settings) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The pool key and SDK arguments for the configured upstream."""
    if not settings.effective_llm_api_key and not settings.llm_base_url:
        raise OpenAICompatError(
            503,
            "Amelio has no API key for its OpenAI upstream: set AMELIO_LLM_API_KEY or "
            "OPENAI_API_KEY, or AMELIO_LLM_BASE_URL for a local server.",
            code="llm_not_configured",
        )
    key = (
        settings.llm_base_url,
        settings.effective_llm_api_key,
        settings.llm_timeout,
        settings.llm_max_retries,
    )
    return key, {
        "api_key": settings.effective_llm_api_key or "not-needed",
        "base_url": settings.llm_base_url or None,
        "timeout": settings.llm_timeout,
        "max_retries": settings.llm_max_retries,
    }


def upstream_client(settings: Settings) -> openai.OpenAI:
    """One SDK client per upstream configuration: its connection pool is what keeps
    the proxy's overhead in the low milliseconds (a new client per call reconnects)."""
    key, arguments = _client_config(settings)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            if len(_clients) > 16:
                _clients.clear()
            client = _clients[key] = openai.OpenAI(**arguments)
    return client


def _async_client(settings: Settings) -> openai.AsyncOpenAI:
    """:func:`_client` for the running event loop (called on it, so no lock)."""
    key, arguments = _client_config(settings)
    per_loop = _async_clients.setdefault(asyncio.get_running_loop(), {})
    client = per_loop.get(key)
    if client is None:
        if len(per_loop) > 16:
            per_loop.clear()
        client = per_loop[key] = openai.AsyncOpenAI(**arguments)
    return client


async def aclose_clients() -> None:
    """Close the running loop's async upstream clients (the service's shutdown)."""
    for client in _async_clients.pop(asyncio.get_running_loop(), {}).values():
        await client.close()


def default_model(settings: Settings) -> str:
    if settings.llm_provider == "openai":
        return settings.llm_model or DEFAULT_MODEL
    return settings.llm_model or settings.llm_provider


def _upstream_error(exc: Exception, settings: Settings) -> OpenAICompatError:
    """An upstream failure in OpenAI's shape, with a status that blames the right side:
    the client's request (400, 404, ...) passes through; the upstream's key, quota or
    outage is Amelio's (503) or the upstream's (502)."""
    where = settings.llm_base_url or "api.openai.com"
    if isinstance(exc, openai.APITimeoutError):
        return OpenAICompatError(
            503,
            f"The LLM server at {where} did not answer in time "
            "(AMELIO_LLM_TIMEOUT), after retries.",
            code="upstream_timeout",
        )
    if isinstance(exc, openai.APIConnectionError | httpx.TransportError):
        return OpenAICompatError(
            503,
            f"Amelio cannot reach its LLM server at {where}: {exc}.",
            code="upstream_unavailable",
        )
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        error = exc.body if isinstance(exc.body, dict) else {}
        message = str(error.get("message") or exc.message)
        param = error.get("param") if isinstance(error.get("param"), str) else None
        code = error.get("code") if isinstance(error.get("code"), str) else None
        if status in CLIENT_STATUSES:
            if status == 404 and code is None:
                code = "model_not_found"
            return OpenAICompatError(
                status,
                message,
                param=param,
                code=code,
                type=str(error.get("type") or type_for(status)),
            )
        if status == 429:
            retry = exc.response.headers.get("retry-after")
            return OpenAICompatError(
                429,
                f"The LLM server at {where} is rate limiting Amelio: {message}",
                code=code or "rate_limit_exceeded",
                headers={"Retry-After": retry} if retry else {},
            )
        if status in (401, 402, 403):
            return OpenAICompatError(
                503,
                f"The LLM server at {where} refused Amelio's own "
                f"credentials ({status}: {message}): check "
                "AMELIO_LLM_API_KEY.",
                code="llm_not_configured",
            )
        return OpenAICompatError(
            502, f"The LLM server at {where} answered {status}: {message}", code="upstream_error"
        )
    return OpenAICompatError(
        502, f"The call to the LLM server at {where} failed: {exc}", code="upstream_error"
    )


def _forward_body(call: ChatCall, prompt: Prompt, settings: Settings) -> dict[str, Any]:
    if call.model == AMELIO_MODEL and settings.llm_base_url and not settings.llm_model:
        raise OpenAICompatError(
            503,
            f"Which model should {settings.llm_base_url} run for {AMELIO_MODEL!r}? Set "
            "AMELIO_LLM_MODEL, or name the model in the request.",
            code="llm_not_configured",
        )
    body = dict(call.body)
    body["model"] = default_model(settings) if call.model == AMELIO_MODEL else call.model
    body["messages"] = [{"role": "system", "content": prompt.system}, *call.body["messages"]]
    return body


def forwarded(
    ws: Workspace, call: ChatCall, prompt: Prompt, project: str, started: float
) -> ChatResult | PendingStream:
    settings = ws.settings
    body = _forward_body(call, prompt, settings)
    if call.stream:
        _client_config(settings)  # no upstream configured: refused now, not when opened
        return PendingStream(ws, call, prompt, project, started, body)
    sent = time.perf_counter()
    try:
        response = upstream_client(settings).post(
            "/chat/completions", body=body, cast_to=httpx.Response
        )
        data = response.json()
    except (openai.OpenAIError, httpx.HTTPError) as exc:
        raise _upstream_error(exc, settings) from exc
    except ValueError as exc:
        raise OpenAICompatError(
            502, "The LLM server's answer is not JSON.", code="upstream_error"
        ) from exc
    llm_ms = (time.perf_counter() - sent) * 1000
    if not isinstance(data, dict):
        raise OpenAICompatError(
            502, "The LLM server's answer is not a JSON object.", code="upstream_error"
        )
    message = _first_message(data)
    reply = None
    if not message.get("tool_calls") and not message.get("function_call"):
        tin, tout = usage(data)
        completion = Completion(
            text_of(message.get("content")),
            str(data.get("model") or body["model"]),
            "openai",
            tin,
            tout,
            llm_ms,
            cost_usd(settings, tin, tout),
        )
        reply = record_reply(
            ws, prompt, completion, project=project, user=call.user, started=started
        )
        if call.footnotes and reply.footnotes:
            message["content"] = reply.text
    data["amelio"] = amelio_object(prompt, reply)
    return ChatResult(body=data, interaction_id=reply.interaction_id if reply else None)


def _first_message(data: dict[str, Any]) -> dict[str, Any]:
    """The first choice's message (the one checked), or an empty one."""
    choices = data.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    return message if isinstance(message, dict) else {}


class _Relay:
    """An upstream stream on its way to the client, line by line: chunks are relayed
    as they come while their text and usage are gathered for the evals, and from the
    finishing chunk on they are held, so that the footnotes can go before it."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.held: list[bytes] = []
        self.head: dict[str, Any] = {}
        self.tools = self.finished = self.done = self.failed = self.stop = False
        self.tin: int | None = None
        self.tout: int | None = None
        self._after = 0

    def feed(self, line: str) -> bytes | None:
        """What to send now for one upstream line, if anything; ``done`` is set at
        ``[DONE]``, and with ``failed`` at an error chunk (relayed, nothing stored)."""
        if not line.startswith("data:"):
            return None
        payload = line[5:].strip()
        if payload == "[DONE]":
            self.done = True
            return None
        try:
            chunk = json.loads(payload)
        except ValueError:
            return None
        if not isinstance(chunk, dict):
            return None
        if "error" in chunk:  # the upstream failed mid-answer
            self.done = self.failed = self.stop = True
            return f"data: {payload}\n\n".encode()
        self.head = self.head or chunk
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            delta = delta if isinstance(delta, dict) else {}
            if isinstance(delta.get("content"), str):
                self.parts.append(delta["content"])
            if delta.get("tool_calls") or delta.get("function_call"):
                self.tools = True
            self.finished = self.finished or bool(choice.get("finish_reason"))
        if chunk.get("usage"):
            self.tin, self.tout = usage(chunk)
        out = f"data: {payload}\n\n".encode()
        if self.finished:
            self.held.append(out)
            return None
        return out

    def take(self, line: str) -> bytes | None:
        """:meth:`feed`, and after ``[DONE]`` a few more lines read and dropped
        before ``stop``: reading the stream to its end puts the upstream connection
        back in the pool (one left mid-stream is closed, and the next request
        reconnects), while an upstream that goes on after ``[DONE]`` is not
        followed forever."""
        if not self.done:
            return self.feed(line)
        self._after += 1
        self.stop = self._after > 16
        return None

    def completion(self, model: str, sent: float, settings: Settings) -> Completion:
        return Completion(
            "".join(self.parts),
            str(self.head.get("model") or model),
            "openai",
            self.tin,
            self.tout,
            (time.perf_counter() - sent) * 1000,
            cost_usd(settings, self.tin, self.tout),
        )

    def tail(
        self, prompt: Prompt, reply: Reply | None, footnotes: bool, model: str
    ) -> Iterator[bytes]:
        """The end of the stream: footnotes, the held chunks, the ``amelio`` chunk, DONE."""
        if footnotes and reply is not None and reply.footnotes:
            yield sse(stream_chunk(self.head, model, {"content": footnote_text(reply)}))
        yield from self.held
        yield sse({**stream_chunk(self.head, model, None), "amelio": amelio_object(prompt, reply)})
        yield DONE


@dataclass(frozen=True)
class PendingStream:
    """A streamed request on the ``openai`` path, routed and ready to forward.

    The service opens it with :meth:`open` on its event loop, so relaying a chunk
    costs no trip to a thread (a chunk per token); a script opens it with
    :meth:`open_sync`. Either raises :class:`OpenAICompatError` when the upstream
    refuses, before anything is streamed.
    """

    ws: Workspace
    call: ChatCall
    prompt: Prompt
    project: str
    started: float
    body: dict[str, Any]

    def _store(self, relay: _Relay, sent: float) -> Reply | None:
        if relay.tools:  # a turn that ends in tool calls is not an answer
            return None
        completion = relay.completion(self.body["model"], sent, self.ws.settings)
        return record_reply(
            self.ws,
            self.prompt,
            completion,
            project=self.project,
            user=self.call.user,
            started=self.started,
        )

    def open_sync(self) -> ChatResult:
        settings = self.ws.settings
        sent = time.perf_counter()
        try:
            response = upstream_client(settings).post(
                "/chat/completions", body=self.body, cast_to=httpx.Response, stream=True
            )
        except (openai.OpenAIError, httpx.HTTPError) as exc:
            raise _upstream_error(exc, settings) from exc

        def chunks() -> Iterator[bytes]:
            relay = _Relay()
            try:
                for line in response.iter_lines():
                    if (out := relay.take(line)) is not None:
                        yield out
                    if relay.stop:
                        break
            except (openai.OpenAIError, httpx.HTTPError) as exc:
                yield error_event(_upstream_error(exc, settings))
                return
            finally:
                response.close()
            if not relay.failed:
                reply = self._store(relay, sent)
                yield from relay.tail(self.prompt, reply, self.call.footnotes, self.body["model"])

        return ChatResult(chunks=guarded(chunks()))

    async def open(self) -> ChatResult:
        settings = self.ws.settings
        sent = time.perf_counter()
        try:
            response = await _async_client(settings).post(
                "/chat/completions", body=self.body, cast_to=httpx.Response, stream=True
            )
        except (openai.OpenAIError, httpx.HTTPError) as exc:
            raise _upstream_error(exc, settings) from exc

        async def chunks() -> AsyncIterator[bytes]:
            relay = _Relay()
            try:
                async for line in response.aiter_lines():
                    if (out := relay.take(line)) is not None:
                        yield out
                    if relay.stop:
                        break
            except (openai.OpenAIError, httpx.HTTPError) as exc:
                yield error_event(_upstream_error(exc, settings))
                return
            finally:
                await response.aclose()
            if not relay.failed:
                # The one blocking step (the write) goes to a worker thread.
                reply = await anyio.to_thread.run_sync(self._store, relay, sent)
                for out in relay.tail(self.prompt, reply, self.call.footnotes, self.body["model"]):
                    yield out

        return ChatResult(chunks=guarded_async(chunks()))
