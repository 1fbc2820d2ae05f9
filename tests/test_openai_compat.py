"""The OpenAI-compatible endpoint, driven by the official openai SDK over real HTTP,
with the fake LLM server behind Amelio as its upstream."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from amelio import skills
from amelio.assistant.quality import quality_metrics
from amelio.assistant.respond import get_interaction
from amelio.db.schema import interactions
from amelio.openai_compat import chat_completions, parse_chat_request
from amelio.server import create_app
from amelio.testing import FakeLLMServer, ThreadedServer
from amelio.workspace import keys
from amelio.workspace.folder import Workspace, open_workspace

FORCE = "Run git push --force and you are done."
SAFE = "Run `git pull --rebase`, then git push --force-with-lease."
QUESTION = "git push rejected, help"
FOOTNOTE = "⚠️ Never suggest --force (use --force-with-lease)"
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "git_status",
        "description": "Show the working tree status.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    },
}


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(models=("fake-model", "fake-large")) as s:
        yield s


@pytest.fixture
def ws(
    workspace: Workspace, examples: Path, upstream: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Workspace]:
    upstream.reset()
    skills.import_skills(workspace.engine, examples)
    monkeypatch.setenv("AMELIO_LLM_PROVIDER", "openai")
    monkeypatch.setenv("AMELIO_LLM_BASE_URL", upstream.openai_base_url)
    monkeypatch.setenv("AMELIO_LLM_API_KEY", "upstream-key")
    monkeypatch.setenv("AMELIO_LLM_MODEL", "fake-model")
    monkeypatch.setenv("AMELIO_LLM_MAX_RETRIES", "0")
    opened = open_workspace(workspace.root)
    yield opened
    opened.dispose()


@pytest.fixture
def client(ws: Workspace) -> Iterator[openai.OpenAI]:
    _, token = keys.create_key(ws.engine, name="bot", role="bot")
    with ThreadedServer(create_app(ws)) as server:
        yield openai.OpenAI(api_key=token, base_url=f"{server.url}/v1", max_retries=0)


def _rows(ws: Workspace) -> int:
    with ws.engine.connect() as conn:
        return int(conn.scalar(sa.select(sa.func.count()).select_from(interactions)) or 0)


def test_plain_completion_prepends_the_block_passes_the_rest_and_logs(
    ws: Workspace, client: openai.OpenAI, upstream: FakeLLMServer
) -> None:
    upstream.reply(FORCE)
    raw = client.chat.completions.with_raw_response.create(
        model="amelio",
        temperature=0.2,
        max_tokens=50,
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": "Hi!"},
            {"role": "user", "content": QUESTION},
        ],
    )
    completion = raw.parse()
    assert completion.choices[0].message.content == FORCE  # no footnotes unless asked
    extra: dict[str, Any] = completion.model_extra["amelio"]  # type: ignore[index]
    assert raw.headers["x-amelio-interaction-id"] == str(extra["interactionId"])
    assert extra["appliedSkill"] == "git-help" and extra["skills"][0]["name"] == "git-help"
    assert extra["evals"]["success"] is False and extra["footnotes"] == [FOOTNOTE]

    sent = upstream.requests[-1].body
    assert sent["model"] == "fake-model" and sent["temperature"] == 0.2
    assert sent["max_tokens"] == 50 and "amelio" not in sent
    assert sent["messages"][0]["role"] == "system"
    assert "SKILLS_HINT" in sent["messages"][0]["content"]
    assert sent["messages"][1:] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "Hi!"},
        {"role": "user", "content": QUESTION},
    ]

    stored = get_interaction(ws, extra["interactionId"])
    assert stored["message"] == QUESTION and stored["answer"] == FORCE
    assert stored["provider"] == "openai" and stored["model"] == "fake-model"
    assert stored["inputTokens"] and stored["success"] is False
    [metrics] = [m for m in quality_metrics(ws, "default") if m.skill == "git-help"]
    assert metrics.applied_count == 1 and metrics.rule_failures == {"gh-001": 1}


def test_footnotes_are_appended_when_the_request_asks(
    client: openai.OpenAI, upstream: FakeLLMServer
) -> None:
    upstream.reply(FORCE)
    completion = client.chat.completions.create(
        model="amelio",
        messages=[{"role": "user", "content": QUESTION}],
        extra_body={"amelio": {"footnotes": True}},
    )
    assert completion.choices[0].message.content == f"{FORCE}\n\n{FOOTNOTE}"
    upstream.reply(FORCE)
    completion = client.chat.completions.create(
        model="amelio",
        messages=[{"role": "user", "content": QUESTION}],
        extra_headers={"X-Amelio-Footnotes": "1"},
    )
    assert completion.choices[0].message.content == f"{FORCE}\n\n{FOOTNOTE}"


def test_streaming_relays_chunks_then_the_amelio_chunk(
    ws: Workspace, client: openai.OpenAI, upstream: FakeLLMServer
) -> None:
    upstream.reply(FORCE)
    stream = client.chat.completions.create(
        model="fake-large",
        stream=True,
        stream_options={"include_usage": True},
        messages=[{"role": "user", "content": QUESTION}],
        extra_body={"amelio": {"footnotes": True}},
    )
    text, finish, extra, usage = [], None, None, None
    for chunk in stream:
        for choice in chunk.choices:
            text.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
        usage = chunk.usage or usage
        if chunk.model_extra and "amelio" in chunk.model_extra:
            extra = chunk.model_extra["amelio"]
    assert "".join(text) == f"{FORCE}\n\n{FOOTNOTE}" and finish == "stop"
    assert usage is not None and extra is not None
    sent = upstream.requests[-1]
    assert sent.stream and sent.model == "fake-large"
    stored = get_interaction(ws, extra["interactionId"])
    assert stored["answer"] == FORCE and stored["model"] == "fake-large"
    assert stored["outputTokens"] == usage.completion_tokens


def test_the_library_relays_a_stream_without_the_service(
    ws: Workspace, upstream: FakeLLMServer
) -> None:
    """chat_completions() (a script, no event loop) relays the same stream as the
    service does on its loop: the chunks, the footnotes before the finish, the
    amelio chunk, one stored interaction."""
    upstream.reply(FORCE)
    raw = json.dumps(
        {
            "model": "amelio",
            "stream": True,
            "amelio": {"footnotes": True},
            "messages": [{"role": "user", "content": QUESTION}],
        }
    ).encode()
    result = chat_completions(ws, parse_chat_request(raw, ws.settings))
    assert result.chunks is not None and isinstance(result.chunks, Iterator)
    events = [
        line[6:]
        for part in result.chunks
        for line in part.decode().split("\n")
        if line.startswith("data: ")
    ]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(
        c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices")
    )
    assert text == f"{FORCE}\n\n{FOOTNOTE}"
    finishing = [
        i for i, c in enumerate(chunks) if c.get("choices") and c["choices"][0].get("finish_reason")
    ]
    footnote = next(
        i
        for i, c in enumerate(chunks)
        if c.get("choices") and FOOTNOTE in (c["choices"][0]["delta"].get("content") or "")
    )
    assert finishing and footnote < finishing[0]
    extra = chunks[-1]["amelio"]
    assert get_interaction(ws, extra["interactionId"])["answer"] == FORCE
    assert _rows(ws) == 1


def test_tools_pass_through_and_the_answer_after_the_tool_result_is_logged(
    ws: Workspace, client: openai.OpenAI, upstream: FakeLLMServer
) -> None:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "git_status", "arguments": '{"path": "."}'},
    }
    # The fake server answers text only; a scripted body is how it returns a tool call.
    upstream.fail(
        200,
        body={
            "id": "chatcmpl-tool",
            "object": "chat.completion",
            "created": 1,
            "model": "fake-model",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "logprobs": None,
                    "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                }
            ],
            "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
        },
    )
    asked = [{"role": "user", "content": QUESTION}]
    first = client.chat.completions.create(
        model="amelio",
        messages=asked,  # type: ignore[arg-type]
        tools=[WEATHER_TOOL],
        tool_choice="auto",
    )
    tool_calls = first.choices[0].message.tool_calls
    assert tool_calls and tool_calls[0].function.name == "git_status"
    assert first.model_extra["amelio"]["interactionId"] is None  # type: ignore[index]
    assert upstream.requests[-1].body["tools"] == [WEATHER_TOOL]
    assert upstream.requests[-1].body["tool_choice"] == "auto"
    assert _rows(ws) == 0  # a tool call is not an answer

    upstream.reply(SAFE)
    turn = [
        *asked,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "rejected: non-fast-forward"},
    ]
    second = client.chat.completions.create(
        model="amelio",
        messages=turn,  # type: ignore[arg-type]
        tools=[WEATHER_TOOL],
    )
    assert second.choices[0].message.content == SAFE
    sent = upstream.requests[-1].body
    assert sent["messages"][1:] == turn and sent["tools"] == [WEATHER_TOOL]
    assert sent["messages"][0]["content"] == upstream.requests[0].body["messages"][0]["content"]
    stored = get_interaction(ws, second.model_extra["amelio"]["interactionId"])  # type: ignore[index]
    assert stored["message"] == QUESTION and stored["answer"] == SAFE and stored["success"]
    assert _rows(ws) == 1


def test_models_lists_amelio_and_the_upstreams(client: openai.OpenAI) -> None:
    ids = [m.id for m in client.models.list()]
    assert ids == ["amelio", "fake-model", "fake-large"]


def test_errors_are_openai_shaped(
    ws: Workspace, client: openai.OpenAI, upstream: FakeLLMServer
) -> None:
    user = [{"role": "user", "content": QUESTION}]
    upstream.fail(
        404,
        body={
            "error": {
                "message": "The model `nope` does not exist.",
                "type": "invalid_request_error",
                "param": None,
                "code": "model_not_found",
            }
        },
    )
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="nope", messages=user)  # type: ignore[arg-type]
    assert missing.value.code == "model_not_found" and "nope" in missing.value.message
    with pytest.raises(openai.BadRequestError) as empty:
        client.chat.completions.create(model="amelio", messages=[])
    assert empty.value.code == "empty_messages" and empty.value.param == "messages"
    upstream.fail(429, retry_after=7)
    with pytest.raises(openai.RateLimitError) as limited:
        client.chat.completions.create(model="amelio", messages=user)  # type: ignore[arg-type]
    assert limited.value.response.headers["retry-after"] == "7"
    upstream.fail(500)
    with pytest.raises(openai.InternalServerError) as failed:
        client.chat.completions.create(model="amelio", messages=user)  # type: ignore[arg-type]
    assert failed.value.status_code == 502 and failed.value.code == "upstream_error"
    upstream.fail(401)  # the upstream refuses Amelio's key: not the client's fault
    with pytest.raises(openai.InternalServerError) as refused:
        client.chat.completions.create(model="amelio", messages=user)  # type: ignore[arg-type]
    assert refused.value.status_code == 503 and "AMELIO_LLM_API_KEY" in refused.value.message
    with pytest.raises(openai.NotFoundError) as project:
        client.chat.completions.create(
            model="amelio",
            messages=user,  # type: ignore[arg-type]
            extra_headers={"X-Amelio-Project": "nowhere"},
        )
    assert project.value.code == "project_not_found"
    wrong = openai.OpenAI(api_key="not-a-key", base_url=client.base_url, max_retries=0)
    with pytest.raises(openai.AuthenticationError) as auth:
        wrong.chat.completions.create(model="amelio", messages=user)  # type: ignore[arg-type]
    assert auth.value.code == "invalid_api_key"
    assert _rows(ws) == 0


def test_bad_bodies_get_openai_errors_in_process(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AMELIO_MAX_TEXT_CHARS", "100")
    small = open_workspace(ws.root)
    _, token = keys.create_key(small.engine, name="bot", role="bot")
    auth = {"Authorization": f"Bearer {token}"}
    try:
        with TestClient(create_app(small)) as http:
            cases: list[tuple[Any, int, str | None]] = [
                (b"{not json", 400, "invalid_json"),
                (b"[]", 400, "invalid_json"),
                (
                    json.dumps({"messages": [{"role": "user", "content": "x"}]}),
                    400,
                    "invalid_model",
                ),
                (
                    json.dumps({"model": "amelio", "messages": [{"role": "robot"}]}),
                    400,
                    "invalid_message",
                ),
                (
                    json.dumps({"model": "amelio", "messages": [{"role": {}}]}),
                    400,
                    "invalid_message",
                ),  # found by schemathesis: an unhashable role
                (
                    json.dumps(
                        {"model": "amelio", "messages": [{"role": "system", "content": "x"}]}
                    ),
                    400,
                    "no_user_message",
                ),
                (
                    json.dumps(
                        {"model": "amelio", "messages": [{"role": "user", "content": "x" * 101}]}
                    ),
                    413,
                    "input_too_large",
                ),
            ]
            for body, status, code in cases:
                response = http.post("/v1/chat/completions", content=body, headers=auth)
                assert response.status_code == status, body
                error = response.json()["error"]
                assert set(error) == {"message", "type", "param", "code"}
                assert error["code"] == code and error["message"]
            chunked = http.post(
                "/v1/chat/completions", headers=auth, content=iter([b"{" + b" " * 1_000_000] * 3)
            )
            assert chunked.status_code == 413
            assert chunked.json()["error"]["type"] == "invalid_request_error"
            assert http.get("/v1/models").json()["error"]["type"] == "authentication_error"
    finally:
        small.dispose()


def test_choices_and_tokens_are_capped_and_deep_json_is_422(
    ws: Workspace, upstream: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """n and the token limits multiply what one request costs upstream: the settings
    bound them. A body nested past the parser's stack is the caller's fault (422)."""
    monkeypatch.setenv("AMELIO_LLM_MAX_TOKENS", "300")
    monkeypatch.setenv("AMELIO_OPENAI_MAX_N", "2")
    capped = open_workspace(ws.root)
    _, token = keys.create_key(capped.engine, name="bot", role="bot")
    auth = {"Authorization": f"Bearer {token}"}
    turn = [{"role": "user", "content": QUESTION}]
    try:
        with TestClient(create_app(capped)) as http:
            sent: list[dict[str, Any]] = []
            for extra in (
                {"max_tokens": 100_000, "n": 2},
                {"max_completion_tokens": 100_000},
                {"max_tokens": 40},
                {},
            ):
                upstream.reply(SAFE)
                r = http.post(
                    "/v1/chat/completions",
                    headers=auth,
                    json={"model": "amelio", "messages": turn, **extra},
                )
                assert r.status_code == 200, r.text
                sent.append(upstream.requests[-1].body)
            assert sent[0]["max_tokens"] == 300 and sent[0]["n"] == 2
            assert sent[1]["max_completion_tokens"] == 300 and "max_tokens" not in sent[1]
            assert sent[2]["max_tokens"] == 40
            assert sent[3]["max_tokens"] == 300
            for extra, param in (
                ({"n": 3}, "n"),
                ({"n": 0}, "n"),
                ({"n": True}, "n"),
                ({"max_tokens": "many"}, "max_tokens"),
                ({"max_completion_tokens": -1}, "max_completion_tokens"),
            ):
                r = http.post(
                    "/v1/chat/completions",
                    headers=auth,
                    json={"model": "amelio", "messages": turn, **extra},
                )
                assert r.status_code == 400, extra
                assert r.json()["error"]["param"] == param
            for body in (b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 70 + b"1" + b"}" * 70):
                r = http.post("/v1/chat/completions", headers=auth, content=body)
                assert r.status_code == 422, body[:20]
                assert r.json()["error"]["code"] == "invalid_json"
    finally:
        capped.dispose()


def test_scoped_key_uses_its_project(ws: Workspace, upstream: FakeLLMServer) -> None:
    _, token = keys.create_key(ws.engine, name="team", role="bot", projects=["team-a"])
    with TestClient(create_app(ws)) as http:
        auth = {"Authorization": f"Bearer {token}"}
        body = {"model": "amelio", "messages": [{"role": "user", "content": QUESTION}]}
        upstream.reply(SAFE)
        done = http.post("/v1/chat/completions", json=body, headers=auth)
        assert done.status_code == 200
        stored = get_interaction(ws, int(done.headers["x-amelio-interaction-id"]))
        assert stored["project"] == "team-a"
        other = http.post(
            "/v1/chat/completions", json=body, headers={**auth, "X-Amelio-Project": "default"}
        )
        assert other.status_code == 403 and other.json()["error"]["code"] == "forbidden"


def test_other_providers_take_text_turns_and_refuse_tools(
    ws: Workspace, upstream: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AMELIO_LLM_PROVIDER", "anthropic")
    monkeypatch.setenv("AMELIO_LLM_BASE_URL", upstream.anthropic_base_url)
    other = open_workspace(ws.root)
    _, token = keys.create_key(other.engine, name="bot", role="bot")
    try:
        with ThreadedServer(create_app(other)) as server:
            client = openai.OpenAI(api_key=token, base_url=f"{server.url}/v1", max_retries=0)
            upstream.reply(FORCE)
            done = client.chat.completions.create(
                model="amelio",
                max_tokens=40,
                messages=[
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": QUESTION},
                ],
                extra_body={"amelio": {"footnotes": True}},
            )
            assert done.choices[0].message.content == f"{FORCE}\n\n{FOOTNOTE}"
            sent = upstream.requests[-1]
            assert sent.protocol == "anthropic" and sent.body["max_tokens"] == 40
            assert "SKILLS_HINT" in sent.system and sent.system.endswith("Be brief.")
            upstream.reply(SAFE)
            parts = [
                c.choices[0].delta.content or ""
                for c in client.chat.completions.create(
                    model="amelio", stream=True, messages=[{"role": "user", "content": QUESTION}]
                )
                if c.choices
            ]
            assert "".join(parts) == SAFE
            with pytest.raises(openai.BadRequestError) as refused:
                client.chat.completions.create(
                    model="amelio",
                    messages=[{"role": "user", "content": QUESTION}],
                    tools=[WEATHER_TOOL],
                )  # type: ignore[list-item]
            assert refused.value.code == "tools_unsupported"
            assert "AMELIO_LLM_PROVIDER=openai" in refused.value.message
    finally:
        other.dispose()
    assert _rows(ws) == 2
