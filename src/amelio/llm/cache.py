"""A provider wrapper that answers identical calls from the database.

A benchmark re-run (or a Sage analysis repeated on the same evidence) sends the
same requests again; with the cache they cost nothing and return the same text,
which also makes re-runs reproducible. The key covers everything that changes
the answer: provider, model, parameters and messages.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa

from amelio import db
from amelio.db.schema import llm_cache, utcnow
from amelio.llm.base import Completion, LLMRequest, Provider, StreamEvent, whole_stream

__all__ = ["CachedProvider", "cache_key", "from_record", "to_record"]


def cache_key(provider: Provider, request: LLMRequest) -> str:
    key: dict[str, Any] = {
        "provider": provider.name,
        "model": provider.model,
        "system": request.system,
        "messages": [[m.role, m.content] for m in request.messages],
        "max_tokens": request.max_tokens,
        "temperature": request.temperature,
    }
    if request.sample:  # the first draw keeps the key it always had
        key["sample"] = request.sample
    blob = json.dumps(key, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def to_record(completion: Completion) -> dict[str, Any]:
    """What a cache keeps of a completion: its text and what it cost."""
    return {
        "text": completion.text,
        "model": completion.model,
        "provider": completion.provider,
        "input_tokens": completion.input_tokens,
        "output_tokens": completion.output_tokens,
        "cost_usd": completion.cost_usd,
    }


def from_record(data: dict[str, Any], **raw: Any) -> Completion:
    """A kept completion answered again: no latency and no cost (it was paid once)."""
    return Completion(
        data["text"],
        data["model"],
        data["provider"],
        data.get("input_tokens"),
        data.get("output_tokens"),
        0.0,
        None,
        raw=raw,
    )


class CachedProvider:
    """``provider`` with its completions cached in ``llm_cache``.

    ``hits`` and ``misses`` count this wrapper's calls; a hit reports zero
    latency and no cost, so summed costs are what was actually spent.
    """

    def __init__(self, provider: Provider, engine: sa.Engine) -> None:
        self.inner = provider
        self.engine = engine
        self.name = provider.name
        self.model = provider.model
        self.hits = 0
        self.misses = 0

    def complete(self, request: LLMRequest) -> Completion:
        key = cache_key(self.inner, request)
        with db.reading(self.engine) as conn:
            cached = conn.scalar(sa.select(llm_cache.c.response).where(llm_cache.c.key == key))
        if cached is not None:
            self.hits += 1
            return from_record(dict(cached), cached=True)
        completion = self.inner.complete(request)
        self.misses += 1
        response = to_record(completion)
        with db.transaction(self.engine) as conn:
            db.insert_ignore(
                conn, llm_cache, {"key": key, "response": response, "created_at": utcnow()}, ["key"]
            )
        return completion

    def stream(self, request: LLMRequest) -> Iterator[StreamEvent]:
        yield from whole_stream(self.complete(request))
