"""The study's one LLM: deterministic, shared by every arm, counted, and named when
it fails.

Every arm asks the same provider. A request is sent once per study: an identical
request from another arm (round 0 of ``skills``, ``learnings`` and ``loop`` is the
same prompt three times) gets the first answer back, which is what the model would
say again at temperature 0. The study asks for temperature 0 where the caller left
it to the provider, so that a difference between arms is the loop's and not a
sampling draw's. ``calls`` counts what reached the model; ``reused`` what did not.

With an answer store (``amelio study --llm-cache FILE``) the answers outlive the
study: a second study that changes one setting (a benchmark part turned off, the
approval policy) sends only the requests that setting changed. What came from the
file is counted apart (``stored``), because its seconds were spent by an earlier
study and the report's timings no longer say what a cold run costs.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from amelio.errors import InvalidInput, LLMError
from amelio.llm import Completion, LLMRequest, Provider, StreamEvent
from amelio.llm.cache import cache_key, from_record, to_record

__all__ = ["AnswerStore", "StudyLLM", "StudyStopped"]


class StudyStopped(LLMError):
    """An LLM call failed: ``step`` says which (arm, round, what it was doing)."""

    code = "study_stopped"


class AnswerStore:
    """Answers kept in a SQLite file between studies, by the request's cache key.

    The key covers the provider's name and model, every message and parameter, so a
    different model or prompt never reads another's answer. Only successful
    completions are written, each as one committed row: a study stopped halfway
    leaves every answer it got."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._db = sqlite3.connect(path, check_same_thread=False)
        except sqlite3.DatabaseError as exc:  # a folder, a folder that does not exist
            raise InvalidInput(
                f"--llm-cache {path} cannot be opened: {exc}", field="llm_cache"
            ) from exc
        try:
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS answers"
                " (key TEXT PRIMARY KEY, completion TEXT NOT NULL)"
            )
            self._db.commit()
        except sqlite3.DatabaseError as exc:  # a file that is not SQLite
            self._db.close()
            raise InvalidInput(
                f"--llm-cache {path} is not an answer store: {exc}", field="llm_cache"
            ) from exc

    def get(self, key: str) -> Completion | None:
        row = self._db.execute("SELECT completion FROM answers WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        return from_record(json.loads(row[0]), stored=True)

    def put(self, key: str, completion: Completion) -> None:
        with self._db:
            self._db.execute(
                "INSERT OR IGNORE INTO answers (key, completion) VALUES (?, ?)",
                (key, json.dumps(to_record(completion), ensure_ascii=False)),
            )

    def close(self) -> None:
        self._db.close()


class StudyLLM:
    """A provider for the study: temperature 0, exact requests answered once."""

    def __init__(self, inner: Provider, store: AnswerStore | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self.model = inner.model
        self.calls = 0
        self.reused = 0
        #: Of ``reused``, the answers read from the store (an earlier study's).
        self.stored = 0
        self.store = store
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
            if known is None and self.store is not None:
                known = self.store.get(key)
                if known is not None:
                    self.stored += 1
                    self._answers[key] = known
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
            if self.store is not None:
                self.store.put(key, completion)
        return completion

    def stream(self, request: LLMRequest) -> Iterator[StreamEvent]:
        yield self.complete(request)
