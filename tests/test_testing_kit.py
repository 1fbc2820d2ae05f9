"""The fakes in amelio.testing, driven by the real Anthropic and OpenAI SDKs and a subprocess.

If these pass, a test that points Amelio (or a plugin) at FakeLLMServer exercises the
same wire protocol, retries and timeouts it would meet in production.
"""

from __future__ import annotations

import json
import logging
import queue
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from amelio.testing import FakeLLMServer, FakeRequest, read_fake_claude_calls, write_fake_claude_cli
from amelio.testing.__main__ import main as fake_llm_command
from support.processes import free_port

MODEL = "claude-test"
USER = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def _shared_server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(default="Paris is the capital.") as fake:
        yield fake


@pytest.fixture
def server(_shared_server: FakeLLMServer) -> FakeLLMServer:
    """One server for the module (stopping uvicorn takes ~0.15 s), reset for each test."""
    _shared_server.reset()
    return _shared_server


def claude(server: FakeLLMServer, **options: object) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="test-key", base_url=server.anthropic_base_url, **options)


def gpt(server: FakeLLMServer, **options: object) -> openai.OpenAI:
    return openai.OpenAI(api_key="test-key", base_url=server.openai_base_url, **options)


# -- Anthropic -------------------------------------------------------------------


def test_anthropic_message_text_usage_and_recorded_request(server: FakeLLMServer) -> None:
    message = claude(server).messages.create(
        model=MODEL, max_tokens=50, system="Answer in one sentence.", messages=USER
    )

    assert message.content[0].type == "text"
    assert message.content[0].text == "Paris is the capital."
    assert message.role == "assistant"
    assert message.model == MODEL
    assert message.stop_reason == "end_turn"
    assert message.id.startswith("msg_")
    # words: system (4) + user (6) in, answer (4) out
    assert (message.usage.input_tokens, message.usage.output_tokens) == (10, 4)

    [request] = server.requests
    assert request.protocol == "anthropic"
    assert request.path == "/v1/messages"
    assert request.model == MODEL
    assert request.system == "Answer in one sentence."
    assert request.messages == USER
    assert request.prompt == "What is the capital of France?"
    assert request.stream is False
    assert request.headers["anthropic-version"]
    assert request.body["max_tokens"] == 50


def test_anthropic_stream_sends_the_real_event_sequence(server: FakeLLMServer) -> None:
    server.reply("Bonjour tout le monde")
    client = claude(server)
    with client.messages.stream(model=MODEL, max_tokens=50, messages=USER) as stream:
        texts = list(stream.text_stream)
        final = stream.get_final_message()

    assert texts == ["Bonjour", " tout", " le", " monde"]
    assert final.content[0].type == "text"
    assert final.content[0].text == "Bonjour tout le monde"
    assert final.stop_reason == "end_turn"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (6, 4)
    assert server.requests[0].stream is True

    server.reply("Salut")
    raw = client.messages.create(model=MODEL, max_tokens=5, messages=USER, stream=True)
    kinds = [event.type for event in raw]  # the SDK drops `ping` itself
    assert kinds == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]


def test_anthropic_raw_sse_includes_ping_and_usage(server: FakeLLMServer) -> None:
    body = {"model": MODEL, "max_tokens": 5, "messages": USER, "stream": True}
    headers = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
    response = httpx.post(f"{server.url}/v1/messages", json=body, headers=headers)

    assert response.headers["content-type"].startswith("text/event-stream")
    events = [line[7:] for line in response.text.splitlines() if line.startswith("event: ")]
    assert events[:3] == ["message_start", "content_block_start", "ping"]
    assert events[-2:] == ["message_delta", "message_stop"]
    data = [json.loads(line[6:]) for line in response.text.splitlines() if line[:6] == "data: "]
    assert data[-2]["usage"] == {"output_tokens": 4}
    assert data[-2]["delta"]["stop_reason"] == "end_turn"


def test_anthropic_requires_a_key_and_a_version(server: FakeLLMServer) -> None:
    body = {"model": MODEL, "max_tokens": 5, "messages": USER}
    no_key = httpx.post(
        f"{server.url}/v1/messages", json=body, headers={"anthropic-version": "2023-06-01"}
    )
    assert no_key.status_code == 401
    assert no_key.json()["type"] == "error"
    assert no_key.json()["error"]["type"] == "authentication_error"

    no_version = httpx.post(f"{server.url}/v1/messages", json=body, headers={"x-api-key": "k"})
    assert no_version.status_code == 400
    assert no_version.json()["error"]["type"] == "invalid_request_error"


def test_anthropic_wrong_key_raises_the_sdk_authentication_error() -> None:
    with FakeLLMServer(api_key="right-key") as fake:
        with pytest.raises(anthropic.AuthenticationError) as caught:
            claude(fake, max_retries=0).messages.create(model=MODEL, max_tokens=5, messages=USER)
        assert caught.value.status_code == 401
        ok = anthropic.Anthropic(api_key="right-key", base_url=fake.anthropic_base_url)
        assert ok.messages.create(model=MODEL, max_tokens=5, messages=USER).content


def test_anthropic_429_then_success_through_sdk_retries(
    server: FakeLLMServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.fail(429, retry_after=0.01)
    caplog.set_level(logging.INFO, logger="anthropic")
    message = claude(server, max_retries=2).messages.create(
        model=MODEL, max_tokens=5, messages=USER
    )

    assert message.content[0].type == "text"
    assert message.content[0].text == "Paris is the capital."
    retries = [r.headers["x-stainless-retry-count"] for r in server.requests]
    assert retries == ["0", "1"]
    # The SDK waited what retry-after said, not its own backoff (0.375 s or more).
    waits = [
        r.args[-1]
        for r in caplog.records
        if isinstance(r.args, tuple) and str(r.msg).startswith("Retrying request")
    ]
    assert waits == [pytest.approx(0.01)]

    server.fail(429, retry_after=0.01)
    limited = httpx.post(
        f"{server.url}/v1/messages",
        json={"messages": USER},
        headers={"x-api-key": "k", "anthropic-version": "2023-06-01"},
    )
    assert limited.status_code == 429
    assert limited.headers["retry-after"] == "0.01"


def test_anthropic_500_without_retries_raises_typed_error(server: FakeLLMServer) -> None:
    server.fail(500)
    with pytest.raises(anthropic.InternalServerError) as caught:
        claude(server, max_retries=0).messages.create(model=MODEL, max_tokens=5, messages=USER)
    assert caught.value.status_code == 500
    assert caught.value.type == "api_error"

    server.fail(529)
    with pytest.raises(anthropic.OverloadedError):
        claude(server, max_retries=0).messages.create(model=MODEL, max_tokens=5, messages=USER)
    assert len(server.requests) == 2


def test_anthropic_hang_trips_the_client_timeout_and_stop_cuts_it_short() -> None:
    before = set(threading.enumerate())
    fake = FakeLLMServer().start()
    try:
        fake.hang(600)
        with pytest.raises(anthropic.APITimeoutError):
            claude(fake, max_retries=0, timeout=0.2).messages.create(
                model=MODEL, max_tokens=5, messages=USER
            )
        # The hang was used up: the next request is answered, well within a timeout
        # that a second 600 s hang would trip.
        patient = claude(fake, max_retries=0, timeout=30)
        assert patient.messages.create(model=MODEL, max_tokens=5, messages=USER).content
        # The first request's handler still sleeps out its 600 s: stop() cuts it short
        # and joins the server thread, or raises after its own 10 s limit.
        fake.stop(timeout=10)
        assert set(threading.enumerate()) == before
    finally:
        fake.stop()


# -- OpenAI ------------------------------------------------------------------------


def test_openai_completion_text_usage_and_recorded_request(server: FakeLLMServer) -> None:
    completion = gpt(server).chat.completions.create(
        model="gpt-test",
        messages=[{"role": "system", "content": "Answer in one sentence."}, *USER],
    )

    assert completion.object == "chat.completion"
    assert completion.choices[0].message.content == "Paris is the capital."
    assert completion.choices[0].message.role == "assistant"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == 10
    assert completion.usage.completion_tokens == 4
    assert completion.usage.total_tokens == 14

    [request] = server.requests
    assert request.protocol == "openai"
    assert request.path == "/v1/chat/completions"
    assert request.model == "gpt-test"
    assert request.system == "Answer in one sentence."
    assert request.messages == USER
    assert request.headers["authorization"] == "Bearer test-key"


def test_openai_stream_chunks_usage_and_done(server: FakeLLMServer) -> None:
    server.reply("Bonjour tout le monde")
    chunks = list(
        gpt(server).chat.completions.create(
            model="gpt-test", messages=USER, stream=True, stream_options={"include_usage": True}
        )
    )

    assert all(c.object == "chat.completion.chunk" for c in chunks)
    texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert texts == ["Bonjour", " tout", " le", " monde"]
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 4

    raw = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"model": "m", "messages": USER, "stream": True},
        headers={"authorization": "Bearer k"},
    )
    lines = [line for line in raw.text.splitlines() if line]
    assert lines[-1] == "data: [DONE]"
    assert all('"usage"' not in line for line in lines)  # no usage chunk unless asked


def test_openai_without_key_gets_401_in_openai_shape(server: FakeLLMServer) -> None:
    response = httpx.post(f"{server.url}/v1/chat/completions", json={"messages": USER})
    assert response.status_code == 401
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert set(error) == {"message", "type", "param", "code"}

    with FakeLLMServer(api_key="right-key") as fake, pytest.raises(openai.AuthenticationError):
        gpt(fake, max_retries=0).chat.completions.create(model="m", messages=USER)


def test_openai_429_then_success_and_500_raises(server: FakeLLMServer) -> None:
    server.fail(429, times=2, retry_after=0.01)
    completion = gpt(server, max_retries=2).chat.completions.create(model="m", messages=USER)
    assert completion.choices[0].message.content == "Paris is the capital."
    assert len(server.requests) == 3

    server.fail(500)
    with pytest.raises(openai.InternalServerError) as caught:
        gpt(server, max_retries=0).chat.completions.create(model="m", messages=USER)
    assert caught.value.status_code == 500

    server.fail(429, body={"error": {"message": "slow down", "type": "tokens", "code": None}})
    with pytest.raises(openai.RateLimitError) as limited:
        gpt(server, max_retries=0).chat.completions.create(model="m", messages=USER)
    assert limited.value.body == {"message": "slow down", "type": "tokens", "code": None}


def test_openai_hang_raises_timeout(server: FakeLLMServer) -> None:
    server.hang(3)
    with pytest.raises(openai.APITimeoutError):
        gpt(server, max_retries=0, timeout=0.2).chat.completions.create(model="m", messages=USER)


def test_openai_models_list(server: FakeLLMServer) -> None:
    assert [m.id for m in gpt(server).models.list()] == ["fake-model"]
    assert [m.id for m in claude(server).models.list()] == ["fake-model"]


# -- scripting, streaming timing, lifecycle ----------------------------------------


def test_replies_in_order_then_default_and_callables_see_the_request() -> None:
    def echo(request: FakeRequest) -> str:
        return f"{request.protocol} heard: {request.prompt}"

    with FakeLLMServer(replies=("first", "second"), default="OK") as fake:
        fake.reply(echo)
        client, other = claude(fake), gpt(fake)
        answers = [
            client.messages.create(model=MODEL, max_tokens=5, messages=USER).content[0].text,
            other.chat.completions.create(model="m", messages=USER).choices[0].message.content,
            other.chat.completions.create(model="m", messages=USER).choices[0].message.content,
            client.messages.create(model=MODEL, max_tokens=5, messages=USER).content[0].text,
        ]
    assert answers == ["first", "second", "openai heard: What is the capital of France?", "OK"]


def test_a_failing_reply_callable_is_a_500_that_is_not_retried(server: FakeLLMServer) -> None:
    def broken(request: FakeRequest) -> str:
        raise KeyError("oops")

    server.reply(broken)
    with pytest.raises(anthropic.InternalServerError, match="KeyError"):
        claude(server, max_retries=2).messages.create(model=MODEL, max_tokens=5, messages=USER)
    assert len(server.requests) == 1


@pytest.mark.parametrize("protocol", ["anthropic", "openai"])
def test_stream_delivers_the_first_delta_before_the_last_is_produced(protocol: str) -> None:
    answer = "one two three four five six"
    arrivals: list[str] = []

    # In lockstep, the server makes delta n+1 only once the client holds delta n; a
    # server that buffered the answer never lets the client see delta 1 while it
    # waits, so the wait gives up (once) and the count says so.
    with FakeLLMServer(replies=[answer]) as fake, fake.lockstep(lambda: len(arrivals)) as produced:
        if protocol == "anthropic":
            with claude(fake).messages.stream(model=MODEL, max_tokens=9, messages=USER) as s:
                for text in s.text_stream:
                    arrivals.append(text)
        else:
            stream = gpt(fake).chat.completions.create(model="m", messages=USER, stream=True)
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    arrivals.append(chunk.choices[0].delta.content)

    assert "".join(arrivals) == answer
    assert arrivals == ["one", " two", " three", " four", " five", " six"]
    # Each delta was produced only once the client held every delta before it.
    assert produced == [0, 1, 2, 3, 4, 5]


def test_start_and_stop_leave_no_threads_behind() -> None:
    before = set(threading.enumerate())
    fake = FakeLLMServer()
    with pytest.raises(RuntimeError, match="not running"):
        _ = fake.url
    fake.start()
    assert fake.openai_base_url == f"{fake.url}/v1"
    assert fake.anthropic_base_url == fake.url
    assert httpx.get(f"{fake.url}/v1/models", headers={"authorization": "Bearer k"}).is_success
    port = int(fake.url.rsplit(":", 1)[1])
    fake.stop()
    assert set(threading.enumerate()) == before
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/v1/models")


def test_fake_llm_command_serves_on_its_port_until_sigterm() -> None:
    """``python -m amelio.testing fake-llm``: the scripted replies in order, then the
    last user message echoed, at the URLs it prints; SIGTERM stops it cleanly."""
    port = free_port()
    command = [sys.executable, "-m", "amelio.testing", "fake-llm", "--port", str(port)]
    process = subprocess.Popen(
        [*command, "--reply", "First.", "--reply", "Second."],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines: queue.Queue[str] = queue.Queue()
        assert process.stdout is not None
        stdout = process.stdout

        def read() -> None:  # a thread, so that a silent server fails the wait below
            for line in stdout:
                lines.put(line)

        threading.Thread(target=read, daemon=True).start()
        exports: dict[str, dict[str, str]] = {}
        while len(exports) < 2:
            line = lines.get(timeout=30)
            if line.strip().startswith("export "):
                values = dict(w.split("=", 1) for w in shlex.split(line)[1:])
                exports[values["AMELIO_LLM_PROVIDER"]] = values
        assert exports["openai"]["AMELIO_LLM_BASE_URL"] == f"http://127.0.0.1:{port}/v1"
        assert exports["anthropic"]["AMELIO_LLM_BASE_URL"] == f"http://127.0.0.1:{port}"

        openai_env = exports["openai"]
        client = openai.OpenAI(api_key="any", base_url=openai_env["AMELIO_LLM_BASE_URL"])

        def ask(text: str) -> str | None:
            completion = client.chat.completions.create(
                model=openai_env["AMELIO_LLM_MODEL"], messages=[{"role": "user", "content": text}]
            )
            return completion.choices[0].message.content

        assert [ask("one"), ask("two"), ask("Echo me, please.")] == [
            "First.",
            "Second.",
            "Echo me, please.",
        ]
        anthropic_env = exports["anthropic"]
        message = anthropic.Anthropic(
            api_key=anthropic_env["AMELIO_LLM_API_KEY"],
            base_url=anthropic_env["AMELIO_LLM_BASE_URL"],
        ).messages.create(
            model=MODEL, max_tokens=20, messages=[{"role": "user", "content": "Echo this."}]
        )
        assert [(b.type, getattr(b, "text", None)) for b in message.content] == [
            ("text", "Echo this.")
        ]

        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=15)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/v1/models")


def test_fake_llm_command_names_a_port_it_cannot_have(capsys: pytest.CaptureFixture[str]) -> None:
    with FakeLLMServer() as busy:
        port = int(busy.url.rsplit(":", 1)[1])
        assert fake_llm_command(["fake-llm", "--port", str(port)]) == 1
    assert f"Could not listen on 127.0.0.1:{port}" in capsys.readouterr().err


# -- fake claude CLI ----------------------------------------------------------------


def test_fake_claude_cli_prints_the_json_result_and_records_the_call(tmp_path: Path) -> None:
    cli = write_fake_claude_cli(tmp_path / "bin", reply="Paris.")
    done = subprocess.run(
        [str(cli), "-p", "Capital of France?", "--output-format", "json", "--model", "sonnet"],
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    )
    result = json.loads(done.stdout)
    assert result["type"] == "result"
    assert result["subtype"] == "success"
    assert result["is_error"] is False
    assert result["result"] == "Paris."
    assert result["num_turns"] == 1
    assert result["usage"]["input_tokens"] == 3
    assert result["usage"]["output_tokens"] == 1
    assert isinstance(result["duration_ms"], int)
    assert result["session_id"]
    assert isinstance(result["total_cost_usd"], float)

    [call] = read_fake_claude_calls(cli)
    assert call["prompt"] == "Capital of France?"
    assert call["argv"] == [
        "-p",
        "Capital of France?",
        "--output-format",
        "json",
        "--model",
        "sonnet",
    ]
    assert call["options"]["--model"] == "sonnet"


def test_fake_claude_cli_reads_the_prompt_from_stdin(tmp_path: Path) -> None:
    cli = write_fake_claude_cli(tmp_path)
    done = subprocess.run(
        [str(cli), "-p", "--output-format", "json"],
        input="a long prompt\nover lines",
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    )
    assert json.loads(done.stdout)["result"] == "OK"
    text = subprocess.run([str(cli), "-p", "hi"], capture_output=True, text=True, timeout=10)
    assert text.stdout == "OK\n"
    calls = read_fake_claude_calls(tmp_path)
    assert [c["prompt"] for c in calls] == ["a long prompt\nover lines", "hi"]
    assert [c["prompt_from_stdin"] for c in calls] == [True, False]


def test_fake_claude_cli_failure_exit_code_and_stderr(tmp_path: Path) -> None:
    cli = write_fake_claude_cli(tmp_path, exit_code=2, stderr="Error: not logged in\n")
    done = subprocess.run(
        [str(cli), "-p", "hi", "--output-format", "json"],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert done.returncode == 2
    assert done.stderr == "Error: not logged in\n"
    assert done.stdout == ""
    assert len(read_fake_claude_calls(cli)) == 1


def test_fake_claude_cli_delay_lets_callers_test_timeouts(tmp_path: Path) -> None:
    cli = write_fake_claude_cli(tmp_path, delay=5)
    with pytest.raises(subprocess.TimeoutExpired):
        subprocess.run([str(cli), "-p", "hi"], capture_output=True, timeout=0.3)
