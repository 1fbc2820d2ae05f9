"""The provider protocol: one ``complete`` and one ``stream``, values in and out.

A provider turns an :class:`LLMRequest` (system prompt + messages) into a
:class:`Completion` (text, token usage, latency, model, cost when known), or into
a stream of :class:`TextDelta` ending with the :class:`Completion`. Providers
register through the ``register_llm_providers`` hook, as a plugin's would; the
built-ins are ``anthropic``, ``openai`` (any OpenAI-compatible server),
``claude-cli`` and ``none``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from amelio.errors import LLMNotConfigured

if TYPE_CHECKING:
    from amelio.workspace.config import Settings

__all__ = [
    "Completion",
    "LLMRequest",
    "Message",
    "Provider",
    "ProviderType",
    "StreamEvent",
    "TextDelta",
    "Timer",
    "cost_usd",
    "not_configured",
    "whole_stream",
]


@dataclass(frozen=True)
class Message:
    """One turn of the conversation: what the user said, or what the model answered."""

    role: Literal["user", "assistant"]
    content: str


@dataclass(frozen=True)
class LLMRequest:
    """What a provider is asked: the system prompt, the conversation so far, and the
    limits of the answer (``temperature`` None: the provider's default).

    ``sample`` numbers draws of the same request and is never sent: a caller that
    wants several answers to one question (a judge asked three times) gives each a
    number, so that a cache (:mod:`amelio.llm.cache`) keeps them apart instead of
    answering all from the first.
    """

    system: str
    messages: tuple[Message, ...]
    max_tokens: int = 1024
    temperature: float | None = None
    sample: int = 0

    @classmethod
    def single(cls, system: str, user: str, **kwargs: Any) -> LLMRequest:
        return cls(system, (Message("user", user),), **kwargs)

    @property
    def prompt_text(self) -> str:
        """Everything as one text, for providers that take a single prompt."""
        turns = "\n\n".join(f"{m.role.upper()}:\n{m.content}" for m in self.messages)
        return f"{self.system}\n\n{turns}" if self.system else turns


@dataclass(frozen=True)
class Completion:
    """A whole answer, with what it cost: tokens as the provider counted them (None
    when it does not say), wall time, and dollars when prices are configured
    (:func:`cost_usd`). ``raw`` keeps the provider's own response for debugging."""

    text: str
    model: str
    provider: str
    input_tokens: int | None = None
    output_tokens: int | None = None
    latency_ms: float = 0.0
    cost_usd: float | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "model": self.model,
            "provider": self.provider,
            "inputTokens": self.input_tokens,
            "outputTokens": self.output_tokens,
            "latencyMs": round(self.latency_ms, 2),
            "costUsd": self.cost_usd,
        }


@dataclass(frozen=True)
class TextDelta:
    """A piece of the answer as it streams; the pieces joined are the completion's text."""

    text: str


#: What :meth:`Provider.stream` yields: deltas, then exactly one completion.
StreamEvent = TextDelta | Completion


class Provider(Protocol):
    """What every LLM provider offers."""

    name: str
    model: str

    def complete(self, request: LLMRequest) -> Completion: ...

    def stream(self, request: LLMRequest) -> Iterator[StreamEvent]:
        """Text deltas as they arrive, then exactly one :class:`Completion`."""
        ...


def whole_stream(completion: Completion) -> Iterator[StreamEvent]:
    """A whole answer as a stream: one delta with all its text, then the completion,
    for a provider (or wrapper) that gets its answer at once."""
    if completion.text:
        yield TextDelta(completion.text)
    yield completion


@dataclass(frozen=True)
class ProviderType:
    """A registered provider: ``build`` makes one from the settings (or raises
    :class:`LLMNotConfigured` naming the setting that is missing)."""

    name: str
    build: Callable[[Settings], Provider]
    description: str = ""


class Timer:
    """Wall time of one call, in milliseconds."""

    def __init__(self) -> None:
        self.start = time.perf_counter()

    @property
    def ms(self) -> float:
        return (time.perf_counter() - self.start) * 1000


def cost_usd(
    settings: Settings, input_tokens: int | None, output_tokens: int | None
) -> float | None:
    """The cost from the configured prices, or None when no price is set."""
    if not (settings.llm_price_input_per_mtok or settings.llm_price_output_per_mtok):
        return None
    return round(
        (
            (input_tokens or 0) * settings.llm_price_input_per_mtok
            + (output_tokens or 0) * settings.llm_price_output_per_mtok
        )
        / 1e6,
        8,
    )


def not_configured(what: str = "This") -> LLMNotConfigured:
    return LLMNotConfigured(
        f"{what} needs an LLM, and none is configured. Set AMELIO_LLM_PROVIDER to "
        "anthropic (with ANTHROPIC_API_KEY), openai (with OPENAI_API_KEY, or "
        "AMELIO_LLM_BASE_URL=http://localhost:11434/v1 for Ollama, vLLM or llama.cpp) or "
        "claude-cli, and AMELIO_LLM_MODEL; or put llm_provider/llm_model in amelio.toml."
    )
