"""Fakes for testing Amelio, and plugins written for it, without a network or an API bill.

Why fakes and not mocks: a mock of ``anthropic.Anthropic`` proves only that the code
called the method the test expected. A fake server that speaks the providers' real
wire protocols lets the *real* SDKs run end to end — their URL building, headers,
retries, timeouts and SSE parsing included — so a test fails when Amelio would
fail against the real service.

* :class:`FakeLLMServer` — a local HTTP server (uvicorn in a background thread) that
  answers the Anthropic Messages API and the OpenAI Chat Completions API, streaming
  or not, with scripted replies, scripted failures and scripted hangs, and records
  every completion request as a :class:`FakeRequest`.
* :func:`write_fake_claude_cli` — an executable ``claude`` that behaves like
  ``claude -p PROMPT --output-format json`` and logs each call to ``calls.jsonl``.

Example::

    with FakeLLMServer(replies=["Bonjour"]) as server:
        client = anthropic.Anthropic(api_key="test", base_url=server.anthropic_base_url)
        ...
        assert server.requests[0].system == "Be brief."
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

__all__ = [
    "IMPORT_PROBE",
    "FakeLLMServer",
    "FakeRequest",
    "FakeTelegramServer",
    "LiveServer",
    "Reply",
    "ThreadedServer",
    "count_tokens",
    "import_time",
    "postgres_database",
    "read_fake_claude_calls",
    "write_fake_claude_cli",
]

if TYPE_CHECKING:
    from amelio.fake_telegram import FakeTelegramServer


def __getattr__(name: str) -> Any:
    """``FakeTelegramServer`` is imported from :mod:`amelio.fake_telegram` on first use,
    so that importing this module stays as cheap as it was for tests that never use it."""
    if name == "FakeTelegramServer":
        from amelio.fake_telegram import FakeTelegramServer

        return FakeTelegramServer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

#: A ``python -c`` script that runs ``amelio ARGS`` as ``python -m amelio`` does, for
#: measuring start-up under ``python -X importtime`` (tests/test_cli_startup.py,
#: benchmarks/cli_startup.py). ``importlib.import_module`` (which the lazy command
#: group and the plugins use) goes through ``__import__``, so that ``-X importtime``,
#: which logs only import statements, counts the modules it loads; with
#: $STARTUP_MODULES_OUT set, every module left in ``sys.modules`` is written there.
IMPORT_PROBE = """
import atexit, importlib, json, os, runpy, sys
out = os.environ.get("STARTUP_MODULES_OUT")
if out:
    atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
_import_module = importlib.import_module
def _logged(name, package=None):
    if package or name.startswith("."):
        return _import_module(name, package)
    __import__(name)
    return sys.modules[name]
importlib.import_module = _logged
sys.argv = ["amelio", *sys.argv[1:]]
runpy.run_module("amelio", run_name="__main__", alter_sys=True)
"""

def import_time(stderr: str) -> tuple[float, list[str]]:
    """From ``python -X importtime`` output: the sum of the top-level cumulative
    entries in ms (everything the process imported) and every module, in order."""
    total_us, modules = 0, []
    for line in stderr.splitlines():
        fields = line.removeprefix("import time:").split("|")
        if not line.startswith("import time:") or len(fields) != 3 \
                or not fields[1].strip().isdigit():
            continue  # other output, or the header line
        modules.append(fields[2].strip())
        if not fields[2].startswith("  ", 1):  # nested imports are indented by two spaces
            total_us += int(fields[1])
    return total_us / 1000, modules


ProtocolName = Literal["anthropic", "openai"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServeProcess:
    """``amelio serve`` on ``workspace`` in its own process, on a free loopback port.

    Entering starts it and waits until ``/v1/health`` answers 200 (a server that
    exits or stays silent for ``timeout`` seconds is a :class:`RuntimeError` quoting
    the end of its log); leaving stops it. For benchmarks, the CI fuzzer and tests
    that must not share an interpreter (and its GIL) with the server they measure.
    """

    def __init__(self, workspace: Path, *, workers: int = 1, env: dict[str, str] | None = None,
                 log: Path | None = None, timeout: float = 60.0) -> None:
        self.workspace = workspace
        self.workers = workers
        self.env = env
        self.log = log or workspace / "serve.log"
        self.timeout = timeout
        self.base = ""
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Self:
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        with self.log.open("wb") as out:  # the child keeps its own descriptor
            self.process = subprocess.Popen(  # noqa: S603 (our own interpreter and CLI)
                [sys.executable, "-m", "amelio", "--workspace", str(self.workspace), "serve",
                 "--host", "127.0.0.1", "--port", str(port), "--workers", str(self.workers)],
                env=self.env, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                if httpx.get(f"{self.base}/v1/health", timeout=5).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.__exit__()
        tail = self.log.read_text(encoding="utf-8", errors="replace")[-3000:]
        raise RuntimeError(f"amelio serve did not start:\n{tail}")

    @property
    def pid(self) -> int:
        assert self.process is not None, "not started"
        return self.process.pid

    def cpu_seconds(self) -> float | None:
        """The server process's user + system CPU seconds (Linux), else None."""
        if self.process is None:
            return None
        try:
            stat_line = Path(f"/proc/{self.process.pid}/stat").read_text()
        except OSError:
            return None
        fields = stat_line.rsplit(")", 1)[1].split()  # after the name, which may hold spaces
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def __exit__(self, *exc_info: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@contextmanager
def postgres_database(server_url: str, *, prefix: str = "amelio_test",
                      template: str | None = None) -> Iterator[str]:
    """A new, empty PostgreSQL database on the server at ``server_url`` (whose own
    database is only used to create and drop it); yields its URL and drops it,
    connections and all, afterwards. For tests, benchmarks and fuzzing runs that
    must not share state. ``template`` names a database to copy instead (one
    migrated once: PostgreSQL copies it in a fraction of the migrations' time)."""
    import sqlalchemy as sa

    admin = sa.create_engine(server_url, isolation_level="AUTOCOMMIT")
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    copy = f' TEMPLATE "{template}"' if template else ""
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"{copy}'))
        yield admin.url.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


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


@dataclass(frozen=True)
class _Failure:
    status: int
    retry_after: float | None
    body: dict[str, Any] | None


# Error types the APIs document; other 4xx are invalid_request_error, other 5xx
# api_error (Anthropic) or server_error (OpenAI).
_ANTHROPIC_ERROR_TYPES = {
    401: "authentication_error", 403: "permission_error", 404: "not_found_error",
    413: "request_too_large", 429: "rate_limit_error", 504: "timeout_error",
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
        return "\n".join(
            str(block.get("text", "")) for block in content if isinstance(block, dict)
        )
    return ""


def count_tokens(text: str) -> int:
    """Deterministic token estimate (whitespace-separated words), so tests can assert usage."""
    return len(text.split())


def _pieces(text: str) -> list[str]:
    """Split an answer into word-sized deltas that join back to exactly the same text."""
    return _PIECE.findall(text)


class ThreadedServer:
    """An ASGI ``app`` served by uvicorn in a background thread on a free loopback
    port: what every fake server here shares. Use it as a context manager, or call
    :meth:`start` and :meth:`stop`; :meth:`_wake` releases what waits on the server
    (long polls, scripted hangs) as it stops."""

    app: Any

    def __init__(self) -> None:
        self._stopping = threading.Event()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._port = 0

    @property
    def url(self) -> str:
        """The server's root, e.g. ``http://127.0.0.1:54321``."""
        if not self._port:
            raise RuntimeError(f"{type(self).__name__} is not running: call start() or use "
                               "`with`.")
        return f"http://127.0.0.1:{self._port}"

    def start(self, timeout: float = 10.0) -> Self:
        """Start serving on a free port; return once the port accepts connections."""
        if self._thread is not None:
            return self
        self._stopping.clear()
        # h11/asyncio/no websockets: no optional extras, no deprecation warnings;
        # log_config=None: a test helper must not reconfigure the host's logging.
        config = uvicorn.Config(
            self.app, host="127.0.0.1", port=0, http="h11", ws="none", loop="asyncio",
            lifespan="off", log_config=None, log_level="warning", access_log=False,
            timeout_graceful_shutdown=2,
        )
        server = uvicorn.Server(config)
        name = f"amelio-{type(self).__name__}"
        thread = threading.Thread(target=server.run, name=name, daemon=True)
        self._server, self._thread = server, thread
        thread.start()
        deadline = time.monotonic() + timeout
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{type(self).__name__} did not start (see the uvicorn "
                                   "log above).")
            time.sleep(0.005)
        self._port = server.servers[0].sockets[0].getsockname()[1]
        with socket.create_connection(("127.0.0.1", self._port), timeout=timeout):
            pass
        return self

    def _wake(self) -> None:
        """Release whatever waits on the server, so that it can stop at once."""

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server and join its thread; waiting responses are cut short."""
        self._stopping.set()
        self._wake()
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise RuntimeError(f"{type(self).__name__}'s thread did not stop in time.")
        self._server, self._thread, self._port = None, None, 0

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class FakeLLMServer(ThreadedServer):
    """A real HTTP server on 127.0.0.1 that speaks the Anthropic and OpenAI chat APIs.

    Answers come from ``replies`` in order, then from ``default``. ``api_key``, when
    given, is the only key accepted; otherwise any non-empty key is. ``token_delay``
    is slept before each streamed delta, so a test can see that deltas arrive one by
    one. Use it as a context manager, or call :meth:`start` and :meth:`stop`.
    """

    def __init__(
        self,
        replies: Iterable[Reply] = (),
        *,
        default: Reply = "OK",
        token_delay: float = 0.0,
        api_key: str | None = None,
        models: Sequence[str] = ("fake-model",),
    ) -> None:
        self.default: Reply = default
        self.token_delay = token_delay
        self.api_key = api_key
        self.models = tuple(models)
        super().__init__()
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
    def lockstep(self, held: Callable[[], int], *, give_up: float = 10.0
                 ) -> Iterator[list[int]]:
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
            "id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant",
            "model": recorded.model, "content": [{"type": "text", "text": answer}],
            "stop_reason": "end_turn", "stop_sequence": None,
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
            "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        headers = {"x-request-id": f"req_{uuid.uuid4().hex[:24]}"}
        head = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "created": int(time.time()),
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


# -- fake `claude` command line ---------------------------------------------------

_CLAUDE_SCRIPT = '''\
#!{python}
"""Fake `claude` CLI written by amelio.testing.write_fake_claude_cli (a test double)."""
import json
import os
import sys
import time
import uuid

CONFIG = json.loads({config!r})
# Options of the real CLI that take a value; any other option is a flag.
VALUE_OPTIONS = {{
    "--output-format", "--input-format", "--model", "--fallback-model", "--system-prompt",
    "--append-system-prompt", "--max-turns", "--allowedTools", "--allowed-tools",
    "--disallowedTools", "--disallowed-tools", "--permission-mode", "--session-id",
    "--resume", "-r", "--mcp-config", "--settings", "--add-dir", "--agents",
    "--permission-prompt-tool", "--setting-sources",
}}


def main():
    started = time.monotonic()
    args = sys.argv[1:]
    positional, options, i = [], {{}}, 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            positional.extend(args[i + 1:])
            break
        if arg.startswith("-") and arg != "-":
            name, eq, value = arg.partition("=")
            if name in VALUE_OPTIONS and not eq:
                i += 1
                value = args[i] if i < len(args) else ""
            options[name] = value if (eq or name in VALUE_OPTIONS) else True
        else:
            positional.append(arg)
        i += 1
    from_stdin = not positional
    prompt = " ".join(positional) if positional else (
        "" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.read())
    here = os.path.dirname(os.path.abspath(__file__))
    call = {{"argv": args, "prompt": prompt, "prompt_from_stdin": from_stdin,
            "options": options, "cwd": os.getcwd()}}
    with open(os.path.join(here, "calls.jsonl"), "a", encoding="utf-8") as log:
        log.write(json.dumps(call) + "\\n")
    time.sleep(CONFIG["delay"])
    if CONFIG["stderr"]:
        sys.stderr.write(CONFIG["stderr"])
        sys.stderr.flush()
    if CONFIG["exit_code"]:
        return CONFIG["exit_code"]
    reply = CONFIG["reply"]
    session_id = options.get("--session-id") or str(uuid.uuid4())
    usage = {{"input_tokens": len(prompt.split()), "output_tokens": len(reply.split()),
             "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}
    elapsed = int((time.monotonic() - started) * 1000)
    result = {{"type": "result", "subtype": "success", "is_error": False,
              "duration_ms": elapsed, "duration_api_ms": elapsed, "num_turns": 1,
              "result": reply, "session_id": session_id,
              "total_cost_usd": round(1e-6 * (usage["input_tokens"] + usage["output_tokens"]), 6),
              "usage": usage}}
    print(json.dumps(result) if options.get("--output-format") == "json" else reply)
    return 0


sys.exit(main())
'''


def write_fake_claude_cli(
    directory: Path,
    *,
    reply: str = "OK",
    exit_code: int = 0,
    stderr: str = "",
    delay: float = 0.0,
) -> Path:
    """Write an executable ``claude`` into ``directory`` and return its path.

    It answers like ``claude -p PROMPT --output-format json`` (the bare reply for the
    default ``text`` format), reading the prompt from its arguments or else from
    stdin, and appends each call (``argv``, ``prompt``, ``options``, ``cwd``) to
    ``calls.jsonl`` beside it — see :func:`read_fake_claude_calls`. It writes
    ``stderr`` (if any) to stderr; with ``exit_code`` other than 0 it then exits with
    that code and prints nothing, as the real CLI does on failure. ``delay`` seconds
    pass before it answers, to test a caller's timeout. Put ``directory`` first on
    ``PATH``, or run the returned path, to use it.
    """
    directory.mkdir(parents=True, exist_ok=True)
    python = sys.executable
    if not python or re.search(r"\s", python) or len(python) > 120:
        python = "/usr/bin/env python3"  # a shebang cannot hold spaces or long paths
    config = json.dumps({"reply": reply, "exit_code": exit_code, "stderr": stderr, "delay": delay})
    script = directory / "claude"
    script.write_text(_CLAUDE_SCRIPT.format(python=python, config=config), encoding="utf-8")
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return script


def read_fake_claude_calls(path: Path) -> list[dict[str, Any]]:
    """The calls a fake ``claude`` recorded, oldest first (``path``: its script or folder)."""
    log = (path.parent if path.is_file() else path) / "calls.jsonl"
    if not log.exists():
        return []
    lines = log.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


class LiveServer:
    """Any ASGI app (say ``amelio.server.create_app(ws)``) on a real loopback port,
    for end-to-end tests over real HTTP: ``with LiveServer(app) as base_url: ...``."""

    def __init__(self, app: Any, *, lifespan: Literal["on", "off"] = "off") -> None:
        self.app = app
        self.lifespan = lifespan
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> str:
        config = uvicorn.Config(self.app, host="127.0.0.1", port=0, http="h11", ws="none",
                                loop="asyncio", lifespan=self.lifespan, log_config=None,
                                log_level="warning", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="amelio-live",
                                        daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("LiveServer did not start.")
            time.sleep(0.005)
        port = self._server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc_info: object) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)
