"""Every LLM call counted and traced, whichever provider makes it.

:func:`amelio.llm.get_provider` wraps what it returns in :class:`InstrumentedProvider`,
so chat, Sage, the judge and distilled learnings all show in ``/metrics``
(``amelio_llm_*``) and as GenAI spans, and no provider has to remember to report.

A model the workspace did not configure is counted as ``other``: through
``/v1/chat/completions`` a caller names the model, and each name it made up would
otherwise be a new series in every scrape from then on.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from amelio.llm.base import Completion, LLMRequest, Provider, StreamEvent
from amelio.ops.metrics import LLM_CALLS, LLM_SECONDS, LLM_TOKENS
from amelio.ops.tracing import span

if TYPE_CHECKING:
    from amelio.workspace.config import Settings

__all__ = ["OTHER_MODEL", "InstrumentedProvider"]

#: The label of every model the workspace did not configure.
OTHER_MODEL = "other"


class InstrumentedProvider:
    """Any provider, with its calls counted: every feature that asks the LLM (chat,
    Sage, the judge, distilled learnings) goes through :func:`amelio.llm.get_provider`,
    which wraps what it returns in this."""

    def __init__(self, inner: Provider, models: frozenset[str] = frozenset()) -> None:
        self.inner = inner
        self.models = models

    @staticmethod
    def labelled_models(settings: Settings) -> frozenset[str]:
        """The models that get their own label: the ones the settings name."""
        extra = (name.strip() for name in settings.metrics_models.split(","))
        named = (settings.llm_model, settings.sage_model, settings.judge_model, *extra)
        return frozenset(name for name in named if name)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def _model_label(self) -> str:
        """The requested model (not the answer's, which an upstream may echo from the
        request or date), when configured."""
        return self.model if self.model in self.models else OTHER_MODEL

    def _done(self, completion: Completion, seconds: float) -> None:
        provider, model = self.name, self._model_label
        LLM_CALLS.labels(provider, model, "ok").inc()
        LLM_SECONDS.labels(provider, model).observe(seconds)
        if completion.input_tokens:
            LLM_TOKENS.labels(provider, model, "input").inc(completion.input_tokens)
        if completion.output_tokens:
            LLM_TOKENS.labels(provider, model, "output").inc(completion.output_tokens)

    def _failed(self) -> None:
        LLM_CALLS.labels(self.name, self._model_label, "error").inc()

    def _span(self, request: LLMRequest) -> Any:
        """The call's span, as OpenTelemetry's GenAI semantic conventions name it."""
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": self.name,
            "gen_ai.request.model": self.model,
            "gen_ai.request.max_tokens": request.max_tokens,
        }
        if request.temperature is not None:
            attributes["gen_ai.request.temperature"] = request.temperature
        return span(f"chat {self.model}", attributes, client=True)

    @staticmethod
    def _usage(current: Any, completion: Completion) -> None:
        if current is None:
            return
        current.set_attribute("gen_ai.response.model", completion.model)
        if completion.input_tokens is not None:
            current.set_attribute("gen_ai.usage.input_tokens", completion.input_tokens)
        if completion.output_tokens is not None:
            current.set_attribute("gen_ai.usage.output_tokens", completion.output_tokens)

    def complete(self, request: LLMRequest) -> Completion:
        started = time.perf_counter()
        with self._span(request) as current:
            try:
                completion = self.inner.complete(request)
            except Exception:
                self._failed()
                raise
            self._usage(current, completion)
        self._done(completion, time.perf_counter() - started)
        return completion

    def stream(self, request: LLMRequest) -> Iterator[StreamEvent]:
        started = time.perf_counter()
        with self._span(request) as current:
            try:
                for event in self.inner.stream(request):
                    if isinstance(event, Completion):
                        self._usage(current, event)
                        self._done(event, time.perf_counter() - started)
                    yield event
            except GeneratorExit:
                raise
            except Exception:
                self._failed()
                raise
