"""A fake LLM server speaking the Anthropic Messages and OpenAI Chat Completions APIs."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from amelio.testing.server import ThreadedServer

ProtocolName = Literal["anthropic", "openai"]


@dataclass(frozen=True)
class FakeRequest:
    """One completion request as the fake server received it, in a protocol-neutral shape.

    ``system`` is the system prompt as one string: Anthropic's top-level ``system``
    (text blocks joined), or OpenAI's ``system``/``developer`` messages joined; those
    OpenAI messages are left out of ``messages`` so that a test reads the same fields
    whichever provider Amelio used. ``headers`` has lower-case names; ``body`` is the
    raw JSON body, for anything else.
    """

    protocol: ProtocolName
    path: str
    model: str
    system: str
    messages: list[dict[str, Any]]
    stream: bool
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def prompt(self) -> str:
        """The text of the last user message: what an echoing reply callable wants."""
        for message in reversed(self.messages):
            if message.get("role") == "user":
                return _text_of(message.get("content"))
        return ""


Reply = str | Callable[[FakeRequest], str]
"""A scripted answer: fixed text, or a function of the request (e.g. to echo it)."""

_INSTRUCTION = re.compile(r"^\s*(?:[-*•]|\d+[.)])?\s*((?:Always|Never)\b.*?)\s*$")
_JUDGE_ASKS = "score_a"


def follow_instructions(request: FakeRequest) -> str:
    """A model that does what it is told, a little: it answers with a first line,
    then every line of its system prompt that starts "Always" or "Never" (list
    markers dropped), once each. So a learning or a skill line such as "Always say
    DONE" shows in the answer, and a study can see what the loop taught. A judge's
    request (its system prompt asks for ``score_a``) gets the same score for both
    answers, and one about a single answer (``score``) a middling 5: this model has
    no taste."""
    if _JUDGE_ASKS in request.system:
        return '{"score_a": 5, "score_b": 5, "reason": "a fake judge cannot tell"}'
    if '"score"' in request.system:
        return '{"score": 5, "reason": "a fake judge cannot tell"}'
    told = [m.group(1) for line in request.system.splitlines() if (m := _INSTRUCTION.match(line))]
    return "\n".join(["Here is my answer.", *dict.fromkeys(told)])


@dataclass(frozen=True)
class _Failure:
    status: int
    retry_after: float | None
    body: dict[str, Any] | None


# Error types the APIs document; other 4xx are invalid_request_error, other 5xx
# api_error (Anthropic) or server_error (OpenAI).
_ANTHROPIC_ERROR_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
    529: "overloaded_error",
}
_OPENAI_ERROR_TYPES = {429: "requests"}
_OPENAI_ERROR_CODES = {401: "invalid_api_key", 429: "rate_limit_exceeded"}
_PIECE = re.compile(r"\s*\S+|\s+\Z")


def _text_of(content: Any) -> str:
    """Flatten a message's content (a string, or a list of typed blocks) to its text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(block.get("text", "")) for block in content if isinstance(block, dict))
    return ""


def count_tokens(text: str) -> int:
    """Deterministic token estimate (whitespace-separated words), so tests can assert usage."""
    return len(text.split())


def _pieces(text: str) -> list[str]:
    """Split an answer into word-sized deltas that join back to exactly the same text."""
    return _PIECE.findall(text)


class FakeLLMServer(ThreadedServer):
    """A real HTTP server on 127.0.0.1 that speaks the Anthropic and OpenAI chat APIs.

    Answers come from ``replies`` in order, then from ``default``. ``api_key``, when
    given, is the only key accepted; otherwise any non-empty key is. ``token_delay``
    is slept before each streamed delta, so a test can see that deltas arrive one by
    one. ``host`` and ``port`` are :class:`ThreadedServer`'s (a free loopback port by
    default). Use it as a context manager, or call :meth:`start` and :meth:`stop`.
    """

    def __init__(
        self,
        replies: Iterable[Reply] = (),
        *,
        default: Reply = "OK",
        token_delay: float = 0.0,
        api_key: str | None = None,
        models: Sequence[str] = ("fake-model",),
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.default: Reply = default
        self.token_delay = token_delay
        self.api_key = api_key
        self.models = tuple(models)
        super().__init__(host=host, port=port)
        self._lock = threading.Lock()
        self._replies: deque[Reply] = deque(replies)
        self._failures: deque[_Failure] = deque()
        self._hangs: deque[float] = deque()
        self._requests: list[FakeRequest] = []
        self.app = Starlette(
            routes=[
                Route("/v1/messages", self._anthropic_messages, methods=["POST"]),
                Route("/v1/chat/completions", self._openai_chat, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
            ]
        )

    # -- scripting -------------------------------------------------------------

    def reply(self, answer: Reply) -> None:
        """Queue one more answer, after those already queued and before the default."""
        with self._lock:
            self._replies.append(answer)

    def fail(
        self,
        status: int,
        times: int = 1,
        retry_after: float | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        """Make the next ``times`` requests fail with ``status``, as the provider would.

        The body is the provider's error JSON unless ``body`` replaces it;
        ``retry_after`` adds a ``retry-after`` header (seconds) that the SDKs honour.
        """
        with self._lock:
            self._failures.extend(_Failure(status, retry_after, body) for _ in range(times))

    def hang(self, seconds: float) -> None:
        """Delay the next response by ``seconds``, to test a client's timeout handling."""
        with self._lock:
            self._hangs.append(seconds)

    def reset(self) -> None:
        """Forget queued replies, failures, hangs and recorded requests.

        Starting a server costs little, but stopping one takes uvicorn ~0.15 s; a
        module-scoped server reset before each test keeps a large suite fast.
        """
        with self._lock:
            self._replies.clear()
            self._failures.clear()
            self._hangs.clear()
            self._requests.clear()

    @property
    def requests(self) -> list[FakeRequest]:
        """Every completion request received so far (a copy), failed ones included."""
        with self._lock:
            return list(self._requests)

    # -- addresses -------------------------------------------------------------

    @property
    def anthropic_base_url(self) -> str:
        """``base_url`` for ``anthropic.Anthropic``: the root, as that SDK adds ``/v1``."""
        return self.url

    @property
    def openai_base_url(self) -> str:
        """``base_url`` for ``openai.OpenAI``: the root plus ``/v1``, which that SDK expects."""
        return f"{self.url}/v1"

    @contextmanager
    def lockstep(self, held: Callable[[], int], *, give_up: float = 10.0) -> Iterator[list[int]]:
        """Stream in step with the client: delta n+1 is produced only once ``held()``
        (how many deltas the client holds) reaches n. Yields what the client held as
        each delta was produced: ``[0, 1, 2, ...]`` when every delta reached it
        before the next was made. Whatever buffers a stream on the way (a relay, a
        proxy) makes one wait give up after ``give_up`` seconds and the list show
        it, which tests that a stream streams without timing anything."""
        produced: list[int] = []
        sleep = self._sleep

        async def in_step(seconds: float) -> None:
            if produced == list(range(len(produced))):  # in step so far: wait for it
                deadline = time.monotonic() + give_up
                while held() < len(produced) and time.monotonic() < deadline:
                    await asyncio.sleep(0.005)
            produced.append(held())
            await sleep(seconds)

        setattr(self, "_sleep", in_step)  # noqa: B010 (an instance attribute over the method)
        try:
            yield produced
        finally:
            vars(self).pop("_sleep", None)

    # -- request handling ------------------------------------------------------

    async def _sleep(self, seconds: float) -> None:
        """Sleep, but wake up early when the server stops, so stop() never waits on a hang."""
        end = time.monotonic() + seconds
        while not self._stopping.is_set() and (left := end - time.monotonic()) > 0:
            await asyncio.sleep(min(left, 0.05))

    async def _record(self, request: Request, protocol: ProtocolName) -> FakeRequest:
        try:
            body = await request.json()
        except ValueError:
            body = {}
        if not isinstance(body, dict):
            body = {}
        raw_messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        if protocol == "anthropic":
            system = _text_of(body.get("system"))
            messages = raw_messages
        else:
            lifted = ("system", "developer")
            system = "\n".join(
                _text_of(m.get("content")) for m in raw_messages if m.get("role") in lifted
            )
            messages = [m for m in raw_messages if m.get("role") not in lifted]
        recorded = FakeRequest(
            protocol=protocol,
            path=request.url.path,
            model=str(body.get("model", "")),
            system=system,
            messages=messages,
            stream=bool(body.get("stream", False)),
            headers={k.lower(): v for k, v in request.headers.items()},
            body=body,
        )
        with self._lock:
            self._requests.append(recorded)
        return recorded

    async def _script(self, recorded: FakeRequest) -> Response | str:
        """Apply a scripted hang and failure, then pick the answer text."""
        with self._lock:
            hang = self._hangs.popleft() if self._hangs else 0.0
            failure = self._failures.popleft() if self._failures else None
            answer = self._replies.popleft() if failure is None and self._replies else None
        if hang:
            await self._sleep(hang)
        if failure is not None:
            return self._error(recorded.protocol, failure.status, None, failure)
        answer = self.default if answer is None else answer
        if isinstance(answer, str):
            return answer
        try:
            return answer(recorded)
        except Exception as err:  # a bug in the test's callable: say so, don't retry it
            message = f"FakeLLMServer reply callable raised {err!r}"
            response = self._error(recorded.protocol, 500, message)
            response.headers["x-should-retry"] = "false"
            return response

    def _error(
        self,
        protocol: ProtocolName,
        status: int,
        message: str | None = None,
        failure: _Failure | None = None,
    ) -> JSONResponse:
        """An error in the provider's own JSON shape, so the SDK raises its typed error."""
        message = message or f"Fake error {status} scripted by FakeLLMServer.fail()."
        request_id = f"req_{uuid.uuid4().hex[:24]}"
        body: dict[str, Any]
        fallback = "invalid_request_error"
        if protocol == "anthropic":
            kind = _ANTHROPIC_ERROR_TYPES.get(status, "api_error" if status >= 500 else fallback)
            error = {"type": kind, "message": message}
            body = {"type": "error", "error": error, "request_id": request_id}
            headers = {"request-id": request_id}
        else:
            kind = _OPENAI_ERROR_TYPES.get(status, "server_error" if status >= 500 else fallback)
            code = _OPENAI_ERROR_CODES.get(status)
            body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
            headers = {"x-request-id": request_id}
        if failure is not None:
            body = failure.body if failure.body is not None else body
            if failure.retry_after is not None:
                headers["retry-after"] = f"{failure.retry_after:g}"
        return JSONResponse(body, status_code=status, headers=headers)

    def _key_ok(self, key: str) -> bool:
        return bool(key) and (self.api_key is None or key == self.api_key)

    @staticmethod
    def _bearer(request: Request) -> str:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        return token.strip() if scheme.lower() == "bearer" else ""

    def _anthropic_auth(self, request: Request) -> JSONResponse | None:
        # The 2.x SDK sends `api_key` as `Authorization: Bearer`; older ones as `x-api-key`.
        key = request.headers.get("x-api-key", "") or self._bearer(request)
        if not self._key_ok(key):
            return self._error("anthropic", 401, "invalid x-api-key")
        if not request.headers.get("anthropic-version"):
            return self._error("anthropic", 400, "anthropic-version: header is required")
        return None

    def _openai_auth(self, request: Request) -> JSONResponse | None:
        key = self._bearer(request)
        if not key:
            message = "You didn't provide an API key. Use the Authorization: Bearer header."
            return self._error("openai", 401, message)
        if not self._key_ok(key):
            return self._error("openai", 401, "Incorrect API key provided.")
        return None

    async def _anthropic_messages(self, request: Request) -> Response:
        recorded = await self._record(request, "anthropic")
        if (refusal := self._anthropic_auth(request)) is not None:
            return refusal
        answer = await self._script(recorded)
        if isinstance(answer, Response):
            return answer
        input_tokens, output_tokens = _input_tokens(recorded), count_tokens(answer)
        headers = {"request-id": f"req_{uuid.uuid4().hex[:24]}"}
        message: dict[str, Any] = {
            "id": f"msg_{uuid.uuid4().hex[:24]}",
            "type": "message",
            "role": "assistant",
            "model": recorded.model,
            "content": [{"type": "text", "text": answer}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
        }
        if not recorded.stream:
            return JSONResponse(message, headers=headers)

        async def events() -> AsyncIterator[bytes]:
            usage = {"input_tokens": input_tokens, "output_tokens": 1}
            start = {**message, "content": [], "stop_reason": None, "usage": usage}
            yield _event({"type": "message_start", "message": start})
            block = {"type": "text", "text": ""}
            yield _event({"type": "content_block_start", "index": 0, "content_block": block})
            yield _event({"type": "ping"})
            for piece in _pieces(answer):
                await self._sleep(self.token_delay)
                delta = {"type": "text_delta", "text": piece}
                yield _event({"type": "content_block_delta", "index": 0, "delta": delta})
            yield _event({"type": "content_block_stop", "index": 0})
            end = {"stop_reason": "end_turn", "stop_sequence": None}
            usage = {"output_tokens": output_tokens}
            yield _event({"type": "message_delta", "delta": end, "usage": usage})
            yield _event({"type": "message_stop"})

        return _event_stream(events(), headers)

    async def _openai_chat(self, request: Request) -> Response:
        recorded = await self._record(request, "openai")
        if (refusal := self._openai_auth(request)) is not None:
            return refusal
        answer = await self._script(recorded)
        if isinstance(answer, Response):
            return answer
        prompt_tokens, completion_tokens = _input_tokens(recorded), count_tokens(answer)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        headers = {"x-request-id": f"req_{uuid.uuid4().hex[:24]}"}
        head = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "created": int(time.time()),
            "model": recorded.model,
        }
        if not recorded.stream:
            reply = {"role": "assistant", "content": answer, "refusal": None}
            choice = {"index": 0, "message": reply, "logprobs": None, "finish_reason": "stop"}
            completion = {**head, "object": "chat.completion", "choices": [choice]}
            return JSONResponse({**completion, "usage": usage}, headers=headers)
        options = recorded.body.get("stream_options") or {}
        include_usage = isinstance(options, dict) and bool(options.get("include_usage"))

        def chunk(choices: list[dict[str, Any]], **extra: Any) -> bytes:
            payload = {**head, "object": "chat.completion.chunk", "choices": choices, **extra}
            if include_usage and "usage" not in payload:
                payload["usage"] = None
            return _sse(payload)

        def delta_choice(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}

        async def chunks() -> AsyncIterator[bytes]:
            yield chunk([delta_choice({"role": "assistant", "content": ""})])
            for piece in _pieces(answer):
                await self._sleep(self.token_delay)
                yield chunk([delta_choice({"content": piece})])
            yield chunk([delta_choice({}, "stop")])
            if include_usage:
                yield chunk([], usage=usage)
            yield b"data: [DONE]\n\n"

        return _event_stream(chunks(), headers)

    async def _models(self, request: Request) -> Response:
        """List ``models`` in the shape of whichever SDK asks (Anthropic sends its version)."""
        if request.headers.get("anthropic-version"):
            if (refusal := self._anthropic_auth(request)) is not None:
                return refusal
            data: list[dict[str, Any]] = [
                {"type": "model", "id": m, "display_name": m, "created_at": "2024-01-01T00:00:00Z"}
                for m in self.models
            ]
            first, last = (data[0]["id"], data[-1]["id"]) if data else (None, None)
            page = {"data": data, "has_more": False, "first_id": first, "last_id": last}
            return JSONResponse(page)
        if (refusal := self._openai_auth(request)) is not None:
            return refusal
        data = [
            {"id": m, "object": "model", "created": 1_700_000_000, "owned_by": "amelio-fake"}
            for m in self.models
        ]
        return JSONResponse({"object": "list", "data": data})


def _input_tokens(recorded: FakeRequest) -> int:
    texts = [recorded.system, *(_text_of(m.get("content")) for m in recorded.messages)]
    return sum(count_tokens(text) for text in texts)


def _sse(data: dict[str, Any]) -> bytes:
    """One SSE ``data:`` line, as OpenAI sends them."""
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _event(data: dict[str, Any]) -> bytes:
    """One named SSE event, as Anthropic sends them: the name repeats the data's type."""
    return f"event: {data['type']}\n".encode() + _sse(data)


def _event_stream(body: AsyncIterator[bytes], headers: dict[str, str]) -> StreamingResponse:
    headers = {**headers, "cache-control": "no-cache"}
    return StreamingResponse(body, media_type="text/event-stream", headers=headers)
