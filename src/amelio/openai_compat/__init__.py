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

import time
from typing import Any

import httpx
import openai

from amelio.assistant.prompt import build_prompt
from amelio.improve.rollouts import unit_of
from amelio.openai_compat.forward import (
    PendingStream,
    aclose_clients,
    default_model,
    forwarded,
    upstream_client,
)
from amelio.openai_compat.providers import through_provider
from amelio.openai_compat.wire import (
    AMELIO_MODEL,
    ChatCall,
    ChatResult,
    OpenAICompatError,
    from_amelio_error,
    log,
    parse_chat_request,
)
from amelio.workspace.folder import Workspace
from amelio.workspace.projects import DEFAULT_PROJECT

__all__ = [
    "AMELIO_MODEL",
    "ChatCall",
    "ChatResult",
    "OpenAICompatError",
    "PendingStream",
    "aclose_clients",
    "chat_completions",
    "from_amelio_error",
    "list_models",
    "parse_chat_request",
    "start_chat",
]


def start_chat(
    ws: Workspace, call: ChatCall, *, project: str = DEFAULT_PROJECT
) -> ChatResult | PendingStream:
    """Route, and answer one Chat Completions request, except a stream forwarded to an
    OpenAI upstream, which comes back as a :class:`PendingStream` to open.

    The service calls this in a worker thread, then opens the stream on its event
    loop. Raises :class:`OpenAICompatError` (or an :class:`AmelioError`, which
    :func:`from_amelio_error` converts) before anything is streamed.
    """
    started = time.perf_counter()
    prompt = build_prompt(ws, call.message, project=project, unit=unit_of(call.user, None))
    if ws.settings.llm_provider == "openai":
        return forwarded(ws, call, prompt, project, started)
    return through_provider(ws, call, prompt, project, started)


def chat_completions(
    ws: Workspace, call: ChatCall, *, project: str = DEFAULT_PROJECT
) -> ChatResult:
    """Answer one Chat Completions request through the respond pipeline (blocking).

    Raises :class:`OpenAICompatError` (or an :class:`AmelioError`, which
    :func:`from_amelio_error` converts) before anything is streamed.
    """
    result = start_chat(ws, call, project=project)
    return result.open_sync() if isinstance(result, PendingStream) else result


def list_models(ws: Workspace) -> dict[str, Any]:
    """``amelio`` (the configured default) and the upstream's models, in OpenAI's list
    shape. An upstream without a model list still leaves the configured model."""
    settings = ws.settings
    ids = [AMELIO_MODEL]
    if settings.llm_provider != "none":
        ids.append(default_model(settings))
    if settings.llm_provider == "openai":
        try:
            found = upstream_client(settings).get("/models", cast_to=httpx.Response).json()
            ids += [
                str(m["id"])
                for m in found.get("data", [])
                if isinstance(m, dict) and isinstance(m.get("id"), str)
            ]
        except (openai.OpenAIError, httpx.HTTPError, ValueError, AttributeError) as exc:
            log.warning(
                "the LLM server lists no models (%s); listing the configured one",
                exc.__class__.__name__,
            )
    data = [
        {
            "id": name,
            "object": "model",
            "created": 0,
            "owned_by": "amelio" if name == AMELIO_MODEL else settings.llm_provider,
        }
        for name in dict.fromkeys(ids)
    ]
    return {"object": "list", "data": data}
