"""OpenAI's Chat Completions API through the official SDK: OpenAI itself, or any
compatible server (vLLM, Ollama, llama.cpp, LiteLLM) through ``llm_base_url``.

The SDK is imported where it is used, not with this module: the plugin
manager imports every built-in provider, and the OpenAI SDK takes about a second
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

DEFAULT_MODEL = "gpt-4o-mini"


def _error(exc: Exception, where: str) -> LLMError:
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return LLMUnavailable(
            f"The LLM server at {where} did not answer in time (AMELIO_LLM_TIMEOUT), after retries."
        )
    if isinstance(exc, openai.APIConnectionError):
        return LLMUnavailable(
            f"Cannot reach the LLM server at {where}: {exc}. Is it running? "
            "Check AMELIO_LLM_BASE_URL."
        )
    if isinstance(exc, openai.AuthenticationError):
        return LLMNotConfigured(
            f"The LLM server at {where} rejected the API key (401): set "
            "AMELIO_LLM_API_KEY or OPENAI_API_KEY."
        )
    if isinstance(exc, openai.APIStatusError):
        return LLMError(
            f"The LLM server at {where} answered {exc.status_code}: {exc.message}",
            status=exc.status_code,
        )
    return LLMError(f"The OpenAI-compatible call to {where} failed: {exc}")


class OpenAIProvider:
    name = "openai"

    def __init__(self, settings: Settings) -> None:
        import openai

        key = settings.effective_llm_api_key
        if not key and not settings.llm_base_url:
            raise LLMNotConfigured(
                "No API key for openai: set AMELIO_LLM_API_KEY or "
                "OPENAI_API_KEY, or AMELIO_LLM_BASE_URL for a local server."
            )
        if settings.llm_base_url and not settings.llm_model:
            raise LLMNotConfigured(
                f"Which model should {settings.llm_base_url} run? Set "
                "AMELIO_LLM_MODEL (e.g. llama3.1:8b for Ollama)."
            )
        self.settings = settings
        self.model = settings.llm_model or DEFAULT_MODEL
        # Local servers take any key, but the SDK insists on one.
        self.client = openai.OpenAI(
            api_key=key or "not-needed",
            base_url=settings.llm_base_url or None,
            timeout=settings.llm_timeout,
            max_retries=settings.llm_max_retries,
        )
        self._where = settings.llm_base_url or "api.openai.com"

    def _params(self, request: LLMRequest) -> dict[str, Any]:
        messages = [{"role": "system", "content": request.system}] if request.system else []
        messages += [{"role": m.role, "content": m.content} for m in request.messages]
        params: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "max_tokens": request.max_tokens,
        }
        if request.temperature is not None:
            params["temperature"] = request.temperature
        return params

    def complete(self, request: LLMRequest) -> Completion:
        import openai

        timer = Timer()
        try:
            response = self.client.chat.completions.create(**self._params(request))
        except openai.OpenAIError as exc:
            raise _error(exc, self._where) from exc
        choice = response.choices[0] if response.choices else None
        text = (choice.message.content or "") if choice else ""
        usage = response.usage
        tin = usage.prompt_tokens if usage else None
        tout = usage.completion_tokens if usage else None
        return Completion(
            text,
            response.model or self.model,
            self.name,
            tin,
            tout,
            timer.ms,
            _cost(self.settings, tin, tout),
        )

    def stream(self, request: LLMRequest) -> Iterator[StreamEvent]:
        import openai

        timer = Timer()
        parts: list[str] = []
        model = self.model
        tin = tout = None
        try:
            chunks = self.client.chat.completions.create(
                **self._params(request), stream=True, stream_options={"include_usage": True}
            )
            for chunk in chunks:
                model = chunk.model or model
                if chunk.usage is not None:
                    tin, tout = chunk.usage.prompt_tokens, chunk.usage.completion_tokens
                for choice in chunk.choices:
                    text = choice.delta.content if choice.delta else None
                    if text:
                        parts.append(text)
                        yield TextDelta(text)
        except openai.OpenAIError as exc:
            raise _error(exc, self._where) from exc
        yield Completion(
            "".join(parts), model, self.name, tin, tout, timer.ms, _cost(self.settings, tin, tout)
        )


@hookimpl
def register_llm_providers(register: Callable[[ProviderType], None]) -> None:
    register(
        ProviderType(
            "openai",
            OpenAIProvider,
            "OpenAI or any OpenAI-compatible server (vLLM, Ollama, llama.cpp)",
        )
    )
