"""The searcher's caches: small, thread-safe, least recently used out first."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Generic, TypeVar

__all__ = ["LRUCache"]

V = TypeVar("V")


class LRUCache(Generic[V]):
    """A small thread-safe LRU: the searcher's ranking and candidate caches."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._data: OrderedDict[tuple[Any, ...], V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[Any, ...]) -> V | None:
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
            return value

    def put(self, key: tuple[Any, ...], value: V) -> None:
        if self.size <= 0:
            return
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.size:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
