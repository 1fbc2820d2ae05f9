"""An in-process scripted provider: answers instantly, for tests and benchmarks that
measure Amelio itself rather than a network. (For the real wire protocols, use
:class:`amelio.testing.FakeLLMServer`.)"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator

from amelio.llm.base import Completion, LLMRequest, StreamEvent, TextDelta, Timer

__all__ = ["ScriptedProvider"]

Answer = str | Callable[[LLMRequest], str]


class ScriptedProvider:
    """Replies from a queue, then ``default``; records every request."""

    name = "scripted"

    def __init__(
        self, replies: Iterable[Answer] = (), *, default: Answer = "OK", model: str = "scripted"
    ) -> None:
        self.replies: deque[Answer] = deque(replies)
        self.default = default
        self.model = model
        self.requests: list[LLMRequest] = []

    def _answer(self, request: LLMRequest) -> str:
        self.requests.append(request)
        answer = self.replies.popleft() if self.replies else self.default
        return answer(request) if callable(answer) else answer

    def complete(self, request: LLMRequest) -> Completion:
        timer = Timer()
        text = self._answer(request)
        return Completion(
            text,
            self.model,
            self.name,
            len(request.prompt_text.split()),
            len(text.split()),
            timer.ms,
        )

    def stream(self, request: LLMRequest) -> Iterator[StreamEvent]:
        completion = self.complete(request)
        for word in completion.text.split(" "):
            yield TextDelta(word + " ")
        yield completion
