"""Anthropic's Messages API through the official SDK.

The SDK is imported where it is used, not with this module: the plugin
manager imports every built-in provider, and the Anthropic SDK takes about a second
to import, which every command that only checks or routes would pay."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from amelio.errors import LLMError, LLMNotConfigured, LLMUnavailable
from amelio.hookspecs import hookimpl
from amelio.llm.base import Completion, LLMRequest, ProviderType, StreamEvent, TextDelta, Timer
from amelio.llm.base import cost_usd as _cost

if TYPE_CHECKING:
    from amelio.workspace.config import Settings

DEFAULT_MODEL = "claude-haiku-4-5"


def _error(exc: Exception, where: str) -> LLMError:
    """The SDK's exception as Amelio's, with what to do about it."""
    import anthropic

    if isinstance(exc, anthropic.APITimeoutError):
        return LLMUnavailable(
            f"The Anthropic API at {where} did not answer in time "
            "(AMELIO_LLM_TIMEOUT), after retries."
        )
    if isinstance(exc, anthropic.APIConnectionError):
        return LLMUnavailable(
            f"Cannot reach the Anthropic API at {where}: {exc}. "
            "Check AMELIO_LLM_BASE_URL and the network."
        )
    if isinstance(exc, anthropic.AuthenticationError):
        return LLMNotConfigured(
            "The Anthropic API rejected the API key (401): set "
            "AMELIO_LLM_API_KEY or ANTHROPIC_API_KEY to a valid key."
        )
    if isinstance(exc, anthropic.APIStatusError):
        return LLMError(
            f"The Anthropic API answered {exc.status_code}: {exc.message}", status=exc.status_code
        )
    return LLMError(f"The Anthropic API call failed: {exc}")


class AnthropicProvider:
    name = "anthropic"

    def __init__(self, settings: Settings) -> None:
        import anthropic

        key = settings.effective_llm_api_key
        if not key:
            raise LLMNotConfigured(
                "No API key for anthropic: set AMELIO_LLM_API_KEY or ANTHROPIC_API_KEY."
            )
        self.settings = settings
        self.model = settings.llm_model or DEFAULT_MODEL
        self.client = anthropic.Anthropic(
            api_key=key,
            base_url=settings.llm_base_url or None,
            timeout=settings.llm_timeout,
            max_retries=settings.llm_max_retries,
        )
        self._where = settings.llm_base_url or "api.anthropic.com"

    def _params(self, request: LLMRequest) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.model,
            "max_tokens": request.max_tokens,
            "messages": [{"role": m.role, "content": m.content} for m in request.messages],
        }
        if request.system:
            params["system"] = request.system
        if request.temperature is not None:
            params["temperature"] = request.temperature
        return params

    def _completion(self, message: Any, timer: Timer) -> Completion:
        text = "".join(b.text for b in message.content if getattr(b, "type", "") == "text")
        usage = message.usage
        return Completion(
            text,
            message.model,
            self.name,
            usage.input_tokens,
            usage.output_tokens,
            timer.ms,
            _cost(self.settings, usage.input_tokens, usage.output_tokens),
        )

    def complete(self, request: LLMRequest) -> Completion:
        import anthropic

        timer = Timer()
        try:
            message = self.client.messages.create(**self._params(request))
        except anthropic.AnthropicError as exc:
            raise _error(exc, self._where) from exc
        return self._completion(message, timer)

    def stream(self, request: LLMRequest) -> Iterator[StreamEvent]:
        import anthropic

        timer = Timer()
        try:
            with self.client.messages.stream(**self._params(request)) as stream:
                for text in stream.text_stream:
                    if text:
                        yield TextDelta(text)
                final = stream.get_final_message()
        except anthropic.AnthropicError as exc:
            raise _error(exc, self._where) from exc
        yield self._completion(final, timer)


@hookimpl
def register_llm_providers(register: Callable[[ProviderType], None]) -> None:
    register(ProviderType("anthropic", AnthropicProvider, "Anthropic Messages API"))
