"""Fakes for testing Amelio, and plugins written for it, without a network or an API bill.

Why fakes and not mocks: a mock of ``anthropic.Anthropic`` proves only that the code
called the method the test expected. A fake server that speaks the providers' real
wire protocols lets the *real* SDKs run end to end — their URL building, headers,
retries, timeouts and SSE parsing included — so a test fails when Amelio would
fail against the real service.

* :class:`FakeLLMServer` — a local HTTP server (uvicorn in a background thread) that
  answers the Anthropic Messages API and the OpenAI Chat Completions API, streaming
  or not, with scripted replies, scripted failures and scripted hangs, and records
  every completion request as a :class:`FakeRequest`. ``python -m amelio.testing
  fake-llm`` serves one until stopped, to point Amelio (or anything else) at by hand.
  :func:`follow_instructions` is its instruction-following mode (``--follow``): it
  repeats the "Always…"/"Never…" lines of its system prompt, so that what learnings
  and skills tell a model changes what it says (``amelio study`` is tested on it).
* :func:`write_fake_claude_cli` — an executable ``claude`` that behaves like
  ``claude -p PROMPT --output-format json`` and logs each call to ``calls.jsonl``.

Example::

    with FakeLLMServer(replies=["Bonjour"]) as server:
        client = anthropic.Anthropic(api_key="test", base_url=server.anthropic_base_url)
        ...
        assert server.requests[0].system == "Be brief."
"""

from amelio.testing.claude_cli import read_fake_claude_calls, write_fake_claude_cli
from amelio.testing.llm_server import (
    FakeLLMServer,
    FakeRequest,
    Reply,
    count_tokens,
    follow_instructions,
)
from amelio.testing.server import ThreadedServer

__all__ = [
    "FakeLLMServer",
    "FakeRequest",
    "Reply",
    "ThreadedServer",
    "count_tokens",
    "follow_instructions",
    "read_fake_claude_calls",
    "write_fake_claude_cli",
]
