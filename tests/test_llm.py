"""Providers: the real SDK clients against local fake servers, and the Claude CLI fake."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from amelio.errors import InvalidInput, LLMError, LLMNotConfigured, LLMUnavailable
from amelio.llm import Completion, LLMRequest, TextDelta, get_provider, provider_types
from amelio.testing import FakeLLMServer, read_fake_claude_calls, write_fake_claude_cli
from amelio.workspace.config import Settings


@pytest.fixture(scope="module")
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as s:
        yield s


@pytest.fixture(autouse=True)
def _fresh(server: FakeLLMServer) -> None:
    server.reset()


def settings(tmp_path: Path, **values: object) -> Settings:
    return Settings(workspace=tmp_path, **values)  # type: ignore[arg-type]


def anthropic_settings(tmp_path: Path, server: FakeLLMServer, **values: object) -> Settings:
    return settings(
        tmp_path,
        **{
            "llm_provider": "anthropic",
            "llm_api_key": "k",
            "llm_base_url": server.anthropic_base_url,
            "llm_model": "fake-haiku",
            **values,
        },
    )


def openai_settings(tmp_path: Path, server: FakeLLMServer, **values: object) -> Settings:
    return settings(
        tmp_path,
        llm_provider="openai",
        llm_base_url=server.openai_base_url,
        llm_model="fake-llama",
        **values,
    )


REQUEST = LLMRequest.single("Be brief.", "What is Amelio?", max_tokens=50)


@pytest.mark.parametrize("make", [anthropic_settings, openai_settings])
def test_complete(make: object, tmp_path: Path, server: FakeLLMServer) -> None:
    server.reply("Amelio improves assistants.")
    provider = get_provider(
        make(
            tmp_path,
            server,
            llm_price_input_per_mtok=1.0,  # type: ignore[operator]
            llm_price_output_per_mtok=2.0,
        )
    )
    completion = provider.complete(REQUEST)
    assert completion.text == "Amelio improves assistants."
    assert completion.input_tokens and completion.output_tokens == 3
    assert completion.cost_usd == pytest.approx((completion.input_tokens * 1.0 + 3 * 2.0) / 1e6)
    assert completion.latency_ms > 0
    seen = server.requests[-1]
    assert seen.system == "Be brief." and seen.prompt == "What is Amelio?"
    assert seen.model in ("fake-haiku", "fake-llama")


@pytest.mark.parametrize("make", [anthropic_settings, openai_settings])
def test_stream_yields_deltas_then_one_completion(
    make: object, tmp_path: Path, server: FakeLLMServer
) -> None:
    server.reply("one two three four")
    events = list(get_provider(make(tmp_path, server)).stream(REQUEST))  # type: ignore[operator]
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert len(deltas) >= 4
    assert "".join(d.text for d in deltas) == "one two three four"
    assert isinstance(events[-1], Completion)
    assert [isinstance(e, Completion) for e in events].count(True) == 1
    assert events[-1].text == "one two three four" and events[-1].output_tokens == 4


@pytest.mark.parametrize("make", [anthropic_settings, openai_settings])
def test_retries_on_429_and_5xx(make: object, tmp_path: Path, server: FakeLLMServer) -> None:
    server.fail(429, retry_after=0.01)
    server.fail(503)
    server.reply("finally")
    provider = get_provider(make(tmp_path, server, llm_max_retries=2))  # type: ignore[operator]
    assert provider.complete(REQUEST).text == "finally"
    assert len(server.requests) == 3


@pytest.mark.parametrize("make", [anthropic_settings, openai_settings])
def test_out_of_retries_is_a_clear_error(
    make: object, tmp_path: Path, server: FakeLLMServer
) -> None:
    server.fail(500, times=5)
    provider = get_provider(make(tmp_path, server, llm_max_retries=1))  # type: ignore[operator]
    with pytest.raises(LLMError, match="500"):
        provider.complete(REQUEST)
    assert len(server.requests) == 2


@pytest.mark.parametrize("make", [anthropic_settings, openai_settings])
def test_timeout(make: object, tmp_path: Path, server: FakeLLMServer) -> None:
    server.hang(2.0)
    provider = get_provider(
        make(
            tmp_path,
            server,
            llm_timeout=0.3,  # type: ignore[operator]
            llm_max_retries=0,
        )
    )
    with pytest.raises(LLMUnavailable, match="did not answer in time"):
        provider.complete(REQUEST)


def test_rejected_key_says_which_setting(tmp_path: Path) -> None:
    with FakeLLMServer(api_key="right") as strict:
        provider = get_provider(anthropic_settings(tmp_path, strict, llm_api_key="wrong"))
        with pytest.raises(LLMNotConfigured, match="ANTHROPIC_API_KEY"):
            provider.complete(REQUEST)
        provider = get_provider(openai_settings(tmp_path, strict, llm_api_key="wrong"))
        with pytest.raises(LLMNotConfigured, match="OPENAI_API_KEY"):
            provider.complete(REQUEST)


def test_unreachable_server(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    provider = get_provider(
        settings(
            tmp_path,
            llm_provider="openai",
            llm_model="m",
            llm_base_url=f"http://127.0.0.1:{port}/v1",
            llm_max_retries=0,
            llm_timeout=2,
        )
    )
    with pytest.raises(LLMUnavailable, match="Cannot reach"):
        provider.complete(REQUEST)


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({}, "AMELIO_LLM_PROVIDER"),
        ({"llm_provider": "anthropic"}, "ANTHROPIC_API_KEY"),
        ({"llm_provider": "openai"}, "OPENAI_API_KEY"),
        ({"llm_provider": "openai", "llm_base_url": "http://x/v1"}, "AMELIO_LLM_MODEL"),
        (
            {"llm_provider": "claude-cli", "claude_cli_path": "/nonexistent/claude"},
            "AMELIO_CLAUDE_CLI_PATH",
        ),
        ({"llm_provider": "local"}, "AMELIO_LLM_MODEL_PATH"),
        (
            {"llm_provider": "local", "llm_model_path": "/nonexistent/model.gguf"},
            "/nonexistent/model.gguf is not a file",
        ),
    ],
)
def test_missing_configuration_says_how_to_fix_it(
    tmp_path: Path, values: dict[str, str], needle: str
) -> None:
    with pytest.raises(LLMNotConfigured, match=needle):
        get_provider(settings(tmp_path, **values))


def test_unknown_provider(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="anthropic, claude-cli, local, openai"):
        get_provider(settings(tmp_path, llm_provider="skynet"))
    assert {"anthropic", "openai", "local", "claude-cli"} <= set(provider_types())


def test_local_provider_without_llama_cpp_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without llama-cpp-python installed (``None`` in sys.modules makes its import
    fail, whether or not this machine has it), the error says what to install."""
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF" + bytes(60))
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    with pytest.raises(LLMNotConfigured, match=r"pip install 'amelio\[local\]'"):
        get_provider(settings(tmp_path, llm_provider="local", llm_model_path=str(model)))


def test_api_key_falls_back_to_provider_env(
    tmp_path: Path, server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "from-env")
    provider = get_provider(
        settings(
            tmp_path,
            llm_provider="anthropic",
            llm_model="m",
            llm_base_url=server.anthropic_base_url,
        )
    )
    server.reply("ok")
    assert provider.complete(REQUEST).text == "ok"
    assert "from-env" in server.requests[-1].headers.get("authorization", "") + server.requests[
        -1
    ].headers.get("x-api-key", "")


def test_claude_cli(tmp_path: Path) -> None:
    cli = write_fake_claude_cli(tmp_path / "bin", reply="From the CLI")
    provider = get_provider(
        settings(tmp_path, llm_provider="claude-cli", claude_cli_path=str(cli), llm_model="sonnet")
    )
    completion = provider.complete(REQUEST)
    assert completion.text == "From the CLI" and completion.provider == "claude-cli"
    assert completion.cost_usd is not None and completion.output_tokens
    call = read_fake_claude_calls(cli)[-1]
    assert "Be brief." in call["prompt"] and "What is Amelio?" in call["prompt"]
    assert "--output-format" in call["argv"] and "sonnet" in call["argv"]
    events = list(provider.stream(REQUEST))
    assert [type(e).__name__ for e in events] == ["TextDelta", "Completion"]


def test_claude_cli_failure_and_timeout(tmp_path: Path) -> None:
    failing = write_fake_claude_cli(tmp_path / "a", exit_code=3, stderr="quota exceeded")
    provider = get_provider(
        settings(
            tmp_path, llm_provider="claude-cli", claude_cli_path=str(failing), llm_max_retries=1
        )
    )
    with pytest.raises(LLMUnavailable, match="quota exceeded"):
        provider.complete(REQUEST)
    assert len(read_fake_claude_calls(failing)) == 2  # one retry
    slow = write_fake_claude_cli(tmp_path / "b", delay=3)
    provider = get_provider(
        settings(
            tmp_path,
            llm_provider="claude-cli",
            claude_cli_path=str(slow),
            llm_timeout=0.5,
            llm_max_retries=0,
        )
    )
    with pytest.raises(LLMUnavailable, match="did not answer within"):
        provider.complete(REQUEST)
