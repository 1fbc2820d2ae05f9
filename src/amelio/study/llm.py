"""The study's one LLM: deterministic, shared by every arm, counted, and named when
it fails.

Every arm asks the same provider. A request is sent once per study: an identical
request from another arm (round 0 of ``skills``, ``learnings`` and ``loop`` is the
same prompt three times) gets the first answer back, which is what the model would
say again at temperature 0. The study asks for temperature 0 where the caller left
it to the provider, so that a difference between arms is the loop's and not a
sampling draw's. ``calls`` counts what reached the model; ``reused`` what did not.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator

from amelio.errors import LLMError
from amelio.llm import Completion, LLMRequest, Provider, StreamEvent
from amelio.llm.cache import cache_key

__all__ = ["StudyLLM", "StudyStopped"]


class StudyStopped(LLMError):
    """An LLM call failed: ``step`` says which (arm, round, what it was doing)."""

    code = "study_stopped"


class StudyLLM:
    """A provider for the study: temperature 0, exact requests answered once."""

    def __init__(self, inner: Provider) -> None:
        self.inner = inner
        self.name = inner.name
        self.model = inner.model
        self.calls = 0
        self.reused = 0
        self.seconds = 0.0
        #: Tokens read and written by the calls made: on a CPU the written ones cost
        #: most (a 0.5B model reads ~100 tokens/s on 2 cores, writes ~33).
        self.input_tokens = 0
        self.output_tokens = 0
        #: What the study is doing, for the error that stops it.
        self.step = "starting"
        self._answers: dict[str, Completion] = {}
        self._lock = threading.Lock()

    def complete(self, request: LLMRequest) -> Completion:
        if request.temperature is None:
            request = dataclasses.replace(request, temperature=0.0)
        key = cache_key(self.inner, request)
        with self._lock:
            known = self._answers.get(key)
            if known is not None:
                self.reused += 1
                return known
        started = time.perf_counter()
        try:
            completion = self.inner.complete(request)
        except LLMError as exc:
            raise StudyStopped(f"{self.step}: the LLM call failed: {exc.message}") from exc
        finally:
            self.seconds += time.perf_counter() - started
        with self._lock:
            self.calls += 1
            self.input_tokens += completion.input_tokens or 0
            self.output_tokens += completion.output_tokens or 0
            self._answers[key] = completion
        return completion

    def stream(self, request: LLMRequest) -> Iterator[StreamEvent]:
        yield self.complete(request)
