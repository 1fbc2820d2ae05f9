"""Any provider other than ``openai`` (``anthropic``, ``claude-cli``, a plugin's):
text turns go through the provider protocol; tools are refused with a 400 that
names the setting that supports them."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

from amelio.assistant.prompt import Prompt
from amelio.assistant.respond import Reply, record_reply
from amelio.errors import LLMError
from amelio.llm import LLMRequest, Message, TextDelta, get_provider
from amelio.openai_compat.wire import (
    AMELIO_MODEL,
    DONE,
    SYSTEM_ROLES,
    TOOL_ROLES,
    ChatCall,
    ChatResult,
    OpenAICompatError,
    amelio_object,
    footnote_text,
    guarded,
    sse,
    stream_chunk,
    text_of,
)
from amelio.workspace.config import Settings
from amelio.workspace.folder import Workspace


def _provider_request(call: ChatCall, prompt: Prompt, settings: Settings) -> LLMRequest:
    body = call.body
    if (
        body.get("tools")
        or body.get("functions")
        or call.tool_turn
        or any(m.get("tool_calls") or m.get("role") in TOOL_ROLES for m in body["messages"])
    ):
        raise OpenAICompatError(
            400,
            f"Tools and tool calls pass through only to an OpenAI-compatible upstream: "
            f"set AMELIO_LLM_PROVIDER=openai (with AMELIO_LLM_BASE_URL for a local server); "
            f"this Amelio uses {settings.llm_provider!r}, which takes text turns only.",
            param="tools",
            code="tools_unsupported",
        )
    system = [prompt.system] + [
        text_of(m.get("content")) for m in body["messages"] if m.get("role") in SYSTEM_ROLES
    ]
    turns = tuple(
        Message(m["role"], text_of(m.get("content")))
        for m in body["messages"]
        if m.get("role") in ("user", "assistant")
    )
    limit = body.get("max_completion_tokens") or body.get("max_tokens")
    temperature = body.get("temperature")
    return LLMRequest(
        "\n\n".join(part for part in system if part.strip()),
        turns,
        max_tokens=limit if isinstance(limit, int) and limit > 0 else settings.llm_max_tokens,
        temperature=float(temperature)
        if isinstance(temperature, int | float) and not isinstance(temperature, bool)
        else None,
    )


def _completion_body(reply: Reply, prompt: Prompt, text: str) -> dict[str, Any]:
    c = reply.completion
    usage = None
    if c.input_tokens is not None or c.output_tokens is not None:
        usage = {
            "prompt_tokens": c.input_tokens or 0,
            "completion_tokens": c.output_tokens or 0,
            "total_tokens": (c.input_tokens or 0) + (c.output_tokens or 0),
        }
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": c.model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": usage,
        "amelio": amelio_object(prompt, reply),
    }


def through_provider(
    ws: Workspace, call: ChatCall, prompt: Prompt, project: str, started: float
) -> ChatResult:
    settings = ws.settings
    if call.model not in (AMELIO_MODEL, settings.llm_model):
        settings = settings.model_copy(update={"llm_model": call.model})
    request = _provider_request(call, prompt, settings)
    provider = get_provider(settings, purpose="Chat completions", configured=ws.settings)
    if not call.stream:
        reply = record_reply(
            ws, prompt, provider.complete(request), project=project, user=call.user, started=started
        )
        text = reply.text if call.footnotes else reply.answer
        return ChatResult(
            body=_completion_body(reply, prompt, text), interaction_id=reply.interaction_id
        )
    events = provider.stream(request)

    def chunks() -> Iterator[bytes]:
        head = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "created": int(time.time()),
            "model": provider.model,
        }
        yield sse(stream_chunk(head, provider.model, {"role": "assistant", "content": ""}))
        completion = None
        for event in events:
            if isinstance(event, TextDelta):
                yield sse(stream_chunk(head, provider.model, {"content": event.text}))
            else:
                completion = event
        if completion is None:
            raise LLMError("The provider's stream ended without a final answer.")
        reply = record_reply(
            ws, prompt, completion, project=project, user=call.user, started=started
        )
        if call.footnotes and reply.footnotes:
            yield sse(stream_chunk(head, provider.model, {"content": footnote_text(reply)}))
        final = stream_chunk(head, provider.model, {})
        final["choices"][0]["finish_reason"] = "stop"
        yield sse(final)
        yield sse(
            {**stream_chunk(head, provider.model, None), "amelio": amelio_object(prompt, reply)}
        )
        yield DONE

    return ChatResult(chunks=guarded(chunks()))
