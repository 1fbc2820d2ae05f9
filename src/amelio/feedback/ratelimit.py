"""Token buckets, charged all at once for a whole request or not at all.

A request of events costs one token per event from its API key's bucket and
one per event from each session's bucket. Either every bucket it touches can
pay, and all pay, or none pays and the request is refused with the seconds
until it would pass: a batch is never half-accepted because its last session
ran dry. A cost larger than a bucket's capacity is charged as the capacity
(a full bucket lets one maximal request through), so a refused request can
always pass later and ``Retry-After`` is never a promise that cannot be kept.

Buckets live in the process: with several server processes each enforces its
own limits (so the effective limit is per process, which is what protects each
process). Idle buckets, full again, are forgotten so memory stays bounded by
the sessions active within one refill period.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["Bucket", "RateLimiter", "Refusal"]


@dataclass(frozen=True)
class Bucket:
    """``rate`` tokens a second up to ``capacity``; a rate of 0 means unlimited."""

    rate: float
    capacity: float

    @property
    def unlimited(self) -> bool:
        return self.rate <= 0


@dataclass(frozen=True)
class Refusal:
    """Why a request was refused: which bucket kind, and when it would pass."""

    scope: str
    retry_after_s: float


class _Buckets:
    def __init__(self, spec: Bucket) -> None:
        self.spec = spec
        self.state: dict[str, tuple[float, float]] = {}  # name -> (tokens, at)

    def level(self, name: str, now: float) -> float:
        tokens, at = self.state.get(name, (self.spec.capacity, now))
        return min(self.spec.capacity, tokens + (now - at) * self.spec.rate)

    def wait(self, name: str, cost: float, now: float) -> float:
        """Seconds until ``name`` holds ``cost`` tokens (0 when it does now)."""
        missing = min(cost, self.spec.capacity) - self.level(name, now)
        return 0.0 if missing <= 0 else missing / self.spec.rate

    def charge(self, name: str, cost: float, now: float) -> None:
        self.state[name] = (self.level(name, now) - min(cost, self.spec.capacity), now)

    def forget_full(self, now: float) -> None:
        full = [n for n in self.state if self.level(n, now) >= self.spec.capacity]
        for name in full:
            del self.state[name]


class RateLimiter:
    """Per-key and per-session buckets behind one lock (the server runs threads)."""

    _SWEEP_EVERY = 10_000

    def __init__(
        self, *, per_key: Bucket, per_session: Bucket, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._key = _Buckets(per_key)
        self._session = _Buckets(per_session)
        self._clock = clock
        self._lock = threading.Lock()
        self._since_sweep = 0

    def try_acquire(
        self, key: str | None, sessions: Mapping[str, int], *, key_cost: int | None = None
    ) -> Refusal | None:
        """Charge ``key`` for the request (``key_cost`` events, by default those of the
        sessions) and each session for its events, or refuse and charge nothing."""
        total = sum(sessions.values()) if key_cost is None else key_cost
        with self._lock:
            now = self._clock()
            waits: list[Refusal] = []
            if key is not None and not self._key.spec.unlimited:
                waits.append(Refusal("key", self._key.wait(key, total, now)))
            if not self._session.spec.unlimited:
                slowest = max(
                    (self._session.wait(s, n, now) for s, n in sessions.items()), default=0.0
                )
                waits.append(Refusal("session", slowest))
            worst = max(waits, key=lambda r: r.retry_after_s, default=None)
            if worst is not None and worst.retry_after_s > 0:
                return worst
            if key is not None and not self._key.spec.unlimited:
                self._key.charge(key, total, now)
            if not self._session.spec.unlimited:
                for name, cost in sessions.items():
                    self._session.charge(name, cost, now)
            self._since_sweep += len(sessions)
            if self._since_sweep >= self._SWEEP_EVERY:
                self._since_sweep = 0
                self._session.forget_full(now)
                self._key.forget_full(now)
            return None

    @staticmethod
    def retry_after(refusal: Refusal) -> int:
        """Whole seconds for a ``Retry-After`` header (at least 1)."""
        return max(1, math.ceil(refusal.retry_after_s))
