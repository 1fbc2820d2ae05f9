"""Leases, verification and trust: how browsers' idle compute becomes search vectors.

Browsers running ``amelio.js`` may embed search documents the server has not
embedded yet, so the server need not spend its own CPU on them. Nothing a browser
sends is believed on its word:

* **Tasks** are made lazily, when a client asks and too few open tasks exist: a
  batch of ``contributions_batch`` documents with no vector for the search model,
  each claimed for one open task (``contribution_task_docs``' primary key, so two
  processes leasing at once never task a document twice). A task's input is the
  exact text the server would embed (:meth:`DocumentStore.missing_vectors`) and
  its SHA-256 digest, and its cost is the server's estimate of the CPU it takes a
  browser (:func:`~amelio.contributions.policy.task_cost_ms`).
* **Leases** last ``contributions_lease_seconds``. A client never gets a task twice
  (``(task, client)`` is unique); a task is leased to two clients at a time until
  two results agree, never to two related ones (:mod:`~amelio.contributions.trust`:
  one network, or minted together by one key); an expired lease is answered 409 and
  its task goes to another. So that no group of identities can hold the queue, one
  client holds at most :data:`MAX_TASKS_PER_LEASE` live leases and one network
  ``contributions_network_tasks``.
* **Verification**: a result is accepted when an independent client's result
  agrees (every vector's cosine at least ``contributions_tolerance``), or when the
  server's own embedding does (a spot-check: every disagreement, results of related
  clients, a result no independent client matched in time, and a random
  ``contributions_spot_check`` share of agreements). A result of a client on
  probation is first checked on a sample of its texts (:data:`PROBATION_SAMPLE`).
  The task moves ``open → accepted`` by one conditional update under the task's row
  lock, then its vectors go into the store with :meth:`DocumentStore.put_vectors`:
  applied once. When a document changed since the task was made (its current text
  no longer matches) the task is cancelled and nothing is written; one that changes
  as the vectors go in is skipped by the store's own check of the texts, and tasked
  again.
* **Healing**: a submit records its result in one transaction and settles it in a
  second, after verifying (which may embed). Results a failed submit left pending
  are verified and settled again when their client sends them again, or when a
  lease finds their task stuck (:meth:`Contributions._heal`); so is a result that
  waited a lease's length for an independent second one (the server checks it).
* **Trust** starts at 0.5, rises a little with each accepted result and drops
  sharply when a spot-check proves a result wrong; a client under
  :data:`TRUST_FLOOR` gets no tasks, and fewer tasks per lease as trust falls. A new
  client is on probation until ``contributions_probation`` of its results passed the
  server's own check: peers' agreement does not end it.
* **Budgets**: each client's CPU-seconds over the last hour stay within its tier's
  :data:`CPU_SECONDS_PER_HOUR`, counted as the server's estimated cost of the tasks
  leased to it (done or not), or the client's own count when that is larger: what
  a client reports can raise the count, never lower it. ``DEGRADED`` gets nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from prometheus_client import Counter
from pydantic import ValidationError
from ulid import ULID

from amelio.contributions.policy import DIMENSIONS, task_cost_ms, unavailable
from amelio.contributions.schema import (
    CPU_SECONDS_PER_HOUR,
    HOUR_MS,
    PURPOSES,
    TASK_TYPES,
    Contribution,
    contribution_adapter,
    decode_vectors,
    vectors_from_bytes,
)
from amelio.contributions.tokens import client_tokens
from amelio.contributions.trust import Contributor, network_id, related
from amelio.db.engine import insert_ignore, reading, transaction
from amelio.db.schema import (
    contribution_clients,
    contribution_leases,
    contribution_results,
    contribution_task_docs,
    contribution_tasks,
)
from amelio.embeddings import Embedder, embed_matrix, load_embedder, search_embedder
from amelio.errors import Conflict, InvalidInput
from amelio.ops.metrics import REGISTRY
from amelio.privacy.signing import Signer, signer

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from amelio.search.store import DocumentStore
    from amelio.workspace.folder import Workspace

__all__ = [
    "INITIAL_TRUST",
    "MAX_OPEN_TASKS",
    "MAX_TASKS_PER_LEASE",
    "TRUST_FLOOR",
    "Contributions",
    "contribution_stats",
    "input_digest",
]

log = logging.getLogger("amelio.contributions")

INITIAL_TRUST = 0.5
#: Under this trust a client gets no more tasks.
TRUST_FLOOR = 0.2
#: An accepted result moves trust this share of the way to 1.
TRUST_GAIN = 0.1
#: A result proven wrong multiplies trust by this (0.5 → 0.125: under the floor).
TRUST_PENALTY = 0.25
#: The most tasks one lease may hold (at trust 1; fewer as trust falls), and the most
#: live leases one client may hold at once.
MAX_TASKS_PER_LEASE = 8
#: Distinct clients a task is leased to at once (two agreeing results accept it).
CLIENTS_PER_TASK = 2
#: Texts of a result of a client on probation that the server embeds to check it,
#: drawn at random: a forger must have every one of them right to pass, and one that
#: passes still needs an independent client's agreement to be accepted. A task of
#: no more texts is checked whole, and judged at once.
PROBATION_SAMPLE = 8
#: Open tasks kept at most: the work in flight, and the claims a new batch skips.
MAX_OPEN_TASKS = 256
#: When to ask again (``retryAfterMs``), by why no task was given.
_RETRY_MS = {"off": 600_000, "idle": 60_000, "refused": 600_000, "trust": 3_600_000, "busy": 5_000}
_DOC_ID_CHARS = 256
_WAITING = "Waiting for a second client's result for this task."
#: A submit settles its result within seconds of recording it; results pending longer
#: than this beside enough others to settle were left by a submit that failed between
#: its two transactions (:meth:`Contributions._heal`).
_SETTLE_GRACE_MS = 60_000

RESULTS = Counter(
    "amelio_contributions_results_total",
    "Contributed results by outcome (pending, accepted, rejected, cancelled, duplicate).",
    ["status"],
    registry=REGISTRY,
)
TASKS = Counter(
    "amelio_contributions_tasks_total",
    "Contribution tasks by event (created, accepted, cancelled).",
    ["event"],
    registry=REGISTRY,
)
SPOT_CHECKS = Counter(
    "amelio_contributions_spot_checks_total",
    "Contributed results the server checked by embedding the texts itself, by cause "
    "(random, disagreement, late, probation, related, lonely).",
    ["cause"],
    registry=REGISTRY,
)


def input_digest(texts: Sequence[str]) -> str:
    """``sha256:`` + the hex SHA-256 of the texts' compact JSON (the protocol's digest)."""
    raw = json.dumps(list(texts), ensure_ascii=False, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(raw.encode("utf-8")).hexdigest()


def _agree(a: npt.NDArray[np.float32], b: npt.NDArray[np.float32], tolerance: float) -> bool:
    """Every row of ``a`` has cosine at least ``tolerance`` with the same row of ``b``."""
    import numpy as np

    if a.shape != b.shape:
        return False
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    if not np.all(norms > 0):
        return False
    return bool(np.all(np.sum(a * b, axis=1) / norms >= tolerance))


def _counts(conn: sa.Connection, query: sa.Select[Any]) -> dict[str, int]:
    """``{key: count}`` from a query of (key, count) rows."""
    return {str(key): int(n) for key, n in conn.execute(query)}


@dataclass(frozen=True)
class _Outcome:
    """What verifying one result decided: verdicts for it and the task's other pending
    results (none: it waits), the vectors to store, the cause of the server's check if
    one ran, whether two clients disagreed, and the results on probation whose sampled
    check passed (their verdicts, if any, came from peers)."""

    verdicts: dict[int, _Verdict] = dataclasses.field(default_factory=dict)
    vectors: npt.NDArray[np.float32] | None = None
    cause: str | None = None
    disagreed: bool = False
    sampled: tuple[int, ...] = ()


@dataclass(frozen=True)
class _Verdict:
    """What becomes of one pending result, and whether the server's own embedding
    decided it (what ends a client's probation, when accepted)."""

    status: str  # accepted | rejected | cancelled
    reason: str
    checked: bool = False


class Contributions:
    """The contribution service of one workspace; keep one per process.

    ``store`` is the search document store (default: the workspace's, as
    :func:`~amelio.search.engines.registry.workspace_corpus` opens it); ``embedder`` the
    model spot-checks embed with (default: ``search_embedding_model``'s); ``rng``
    draws the random spot-checks; ``clock`` gives the time (leases expire by it).
    """

    def __init__(
        self,
        workspace: Workspace,
        *,
        store: DocumentStore | None = None,
        embedder: Embedder | None = None,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.workspace = workspace
        self.settings = workspace.settings
        self.tokens = client_tokens(self.settings)
        self._store = store
        self._embedder = embedder
        self._rng = rng or random.Random()  # noqa: S311 (sampling, not secrets)
        self._clock = clock
        self._lock = threading.Lock()
        self._signer: Signer | None = None

    # -- parts ------------------------------------------------------------------------

    @property
    def store(self) -> DocumentStore:
        """The search document store (opened once)."""
        if self._store is None:
            with self._lock:
                if self._store is None:
                    from amelio.search.engines.registry import workspace_corpus

                    self._store = workspace_corpus(self.settings)
        return self._store

    def _embed(self, texts: Sequence[str], model: str) -> npt.NDArray[np.float32]:
        """The server's own embedding of ``texts`` with ``model`` (a spot-check): the
        embedder given, or ``search_embedding_model``'s, or (for a task made before
        that setting changed) the task's own model."""
        if self._embedder is None and model == self.model:
            self._embedder = search_embedder(self.settings, "contributions spot-check")
        embedder = (
            self._embedder
            if self._embedder is not None and self._embedder.model == model
            else load_embedder(model)
        )
        matrix: npt.NDArray[np.float32] = embed_matrix(embedder, texts)
        return matrix

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    @property
    def model(self) -> str:
        return self.settings.search_embedding_model

    def unavailable(self) -> str | None:
        """Why this server hands out no tasks at all, or None when it does."""
        return unavailable(self.settings)

    # -- GET /v1/contributions/tasks ------------------------------------------------------

    def lease(
        self,
        *,
        tier: str,
        purposes: Sequence[str],
        types: Sequence[str] = TASK_TYPES,
        max_tasks: int = 1,
        client_token: str | None = None,
        reported_cpu_s: float | None = None,
        address: str | None = None,
        key_id: int | None = None,
    ) -> dict[str, Any]:
        """Up to ``max_tasks`` tasks for one client (a new client when ``client_token``
        is None), and its trust and budget; ``tasks`` is empty, with a ``reason``,
        when there is nothing for it to do. ``address`` (the request's remote address)
        and ``key_id`` (its API key) are where and by whom a new client is minted: two
        clients minted alike never verify each other (:mod:`.trust`)."""
        if tier not in CPU_SECONDS_PER_HOUR:
            raise InvalidInput(
                f"tier is one of {', '.join(CPU_SECONDS_PER_HOUR)}, not {tier!r}.", field="tier"
            )
        if not 1 <= max_tasks <= MAX_TASKS_PER_LEASE:
            raise InvalidInput(f"max is 1 to {MAX_TASKS_PER_LEASE}, not {max_tasks}.", field="max")
        client_id = None if client_token is None else self.tokens.read(client_token)
        budget_s = CPU_SECONDS_PER_HOUR[tier]
        now = self._now_ms()
        response: dict[str, Any] = {
            "clientId": client_id,
            "clientToken": client_token,
            "trust": None,
            "budget": {
                "cpuSecondsPerHour": budget_s,
                "usedLastHour": round(reported_cpu_s or 0.0, 3),
            },
            "leaseSeconds": self.settings.contributions_lease_seconds,
            "retryAfterMs": _RETRY_MS["off"],
            "tasks": [],
            "reason": None,
        }
        off = self.unavailable()
        if off is not None:
            # No identity is handed out while off, and a known client's row is only
            # read: clients keep polling, and each poll would otherwise be a write.
            if client_id is not None:
                with reading(self.workspace.engine) as conn:
                    trust = conn.scalar(
                        sa.select(contribution_clients.c.trust).where(
                            contribution_clients.c.id == client_id
                        )
                    )
                    used_ms, _ = self._used_last_hour(conn, client_id, now)
                response["trust"] = None if trust is None else round(float(trust), 4)
                response["budget"]["usedLastHour"] = round(
                    max(used_ms / 1000, reported_cpu_s or 0.0), 3
                )
            response["reason"] = off
            return response
        leased = _Leased([], [], [], None, 0.0)
        with transaction(self.workspace.engine) as conn:
            me = self._client(conn, client_id, tier, now, address, key_id)
            response["clientId"] = me.id
            response["clientToken"] = self.tokens.issue(me.id)
            response["trust"] = round(me.trust, 4)
            used_ms, oldest_ms = self._used_last_hour(conn, me.id, now)
            used_s = max(used_ms / 1000, reported_cpu_s or 0.0)
            reason, retry = self._refusal(tier, purposes, types, me.trust, budget_s)
            if reason is None and used_s >= budget_s:
                reason = (
                    f"The hourly CPU budget of tier {tier} ({budget_s} s) is spent "
                    f"({used_s:.1f} s in the last hour)."
                )
                retry = max((oldest_ms or now) + HOUR_MS - now, _RETRY_MS["busy"])
            if reason is None:
                wanted = min(max_tasks, _tasks_for(me.trust))
                leased = self._lease_tasks(conn, me, wanted, (budget_s - used_s) * 1000, now)
                if leased.tasks:
                    retry = 0
                else:
                    reason = leased.held or (
                        "Nothing to embed now: every search document has a vector, "
                        "or every open task already has enough clients."
                    )
                    retry = _RETRY_MS["idle"]
            response["tasks"] = leased.tasks
            response["budget"]["usedLastHour"] = round(used_s + leased.cost_ms / 1000, 3)
            response["reason"], response["retryAfterMs"] = reason, retry
        # One a poll, so that the answer is not held up for long: a task a failed submit
        # left unsettled first, else a result no independent client came to match.
        heal = [(t, False) for t in leased.stuck] + [(t, True) for t in leased.lonely]
        for task_id, lonely in heal[:1]:
            try:
                self._heal(task_id, now, lonely=lonely)
            except Exception:  # the next poll tries again; this client's lease stands
                log.warning(
                    "contributions: task %s could not be settled again", task_id, exc_info=True
                )
        return response

    @staticmethod
    def _refusal(
        tier: str, purposes: Sequence[str], types: Sequence[str], trust: float, budget_s: int
    ) -> tuple[str | None, int]:
        """Why a known client gets no task whatever the tasks are, and when to retry."""
        if budget_s <= 0:
            return f"Tier {tier} devices do not lend compute.", _RETRY_MS["refused"]
        if not set(PURPOSES) & set(purposes):
            return (
                f"No task has a purpose this client consented to; tasks are for "
                f"{', '.join(PURPOSES)}.",
                _RETRY_MS["refused"],
            )
        if not set(TASK_TYPES) & set(types):
            return (
                f"No task has a type this client runs; tasks are {', '.join(TASK_TYPES)}.",
                _RETRY_MS["refused"],
            )
        if trust < TRUST_FLOOR:
            return (
                f"This client's trust ({trust:.2f}) is under {TRUST_FLOOR}: results "
                "of it were proven wrong.",
                _RETRY_MS["trust"],
            )
        return None, 0

    def _client(
        self,
        conn: sa.Connection,
        client_id: str | None,
        tier: str,
        now: int,
        address: str | None,
        key_id: int | None,
    ) -> Contributor:
        """The client, recording its tier and when it was seen; a new client when
        ``client_id`` is None (or unknown: a genuine token whose row a restore dropped
        starts afresh), minted from ``address``'s network by ``key_id``."""
        c = contribution_clients.c
        if client_id is not None:
            row = conn.execute(
                sa.select(c.id, c.trust, c.network, c.key_id, c.created_ms, c.checked).where(
                    c.id == client_id
                )
            ).first()
            if row is not None:
                conn.execute(
                    contribution_clients.update()
                    .where(c.id == client_id)
                    .values(tier=tier, last_seen_ms=now)
                )
                return _contributor(row)
        client_id = client_id or str(ULID())
        if self._signer is None:
            self._signer = signer(self.settings)
        made = Contributor(
            id=client_id,
            trust=INITIAL_TRUST,
            network=network_id(address, self._signer),
            key_id=key_id,
            created_ms=now,
            checked=0,
        )
        if not insert_ignore(
            conn,
            contribution_clients,
            {
                "id": made.id,
                "tier": tier,
                "trust": made.trust,
                "created_ms": now,
                "last_seen_ms": now,
                "network": made.network,
                "key_id": key_id,
                "checked": 0,
            },
            ("id",),
            returning=c.id,
        ):  # another request made it
            return self._client(conn, client_id, tier, now, address, key_id)
        return made

    @staticmethod
    def _used_last_hour(conn: sa.Connection, client_id: str, now: int) -> tuple[float, int | None]:
        """The estimated CPU milliseconds of the tasks leased to the client over the last
        hour, and when the oldest of them was leased."""
        le, t = contribution_leases.c, contribution_tasks.c
        row = conn.execute(
            sa.select(sa.func.coalesce(sa.func.sum(t.cost_ms), 0.0), sa.func.min(le.leased_ms))
            .join(contribution_tasks, t.id == le.task_id)
            .where(le.client_id == client_id, le.leased_ms > now - HOUR_MS)
        ).one()
        return float(row[0]), None if row[1] is None else int(row[1])

    def _lease_tasks(
        self, conn: sa.Connection, me: Contributor, wanted: int, budget_ms: float, now: int
    ) -> _Leased:
        """Lease up to ``wanted`` tasks to the client, as long as they fit its caps and
        ``budget_ms`` is not spent, making new ones when too few are open; a task whose
        documents changed meanwhile is cancelled on the way (and its documents tasked
        again, with their new texts). Also the open tasks to settle once this
        transaction is over (:meth:`_queue`)."""
        expires = now + self.settings.contributions_lease_seconds * 1000
        queue = self._queue(conn, me, now)
        room = min(
            wanted,
            MAX_TASKS_PER_LEASE - queue.held,
            self.settings.contributions_network_tasks - queue.network_held,
        )
        if room <= 0:
            held = (
                f"This client holds {queue.held} leased tasks, the most one client may."
                if queue.held >= MAX_TASKS_PER_LEASE
                else f"Clients of this network hold {queue.network_held} leased tasks, "
                "the most one network may (contributions_network_tasks)."
            )
            return _Leased([], queue.stuck, queue.lonely, held, 0.0)
        leased: list[dict[str, Any]] = []
        cost_ms = 0.0
        for round_ in range(2):  # a second round when stale tasks were cancelled
            if round_:
                queue = self._queue(conn, me, now)
            if len(queue.eligible) < room - len(leased):
                self._create_tasks(conn, room - len(leased) - len(queue.eligible), now)
                queue = self._queue(conn, me, now)
            stale = False
            for task_id in queue.eligible:
                if len(leased) == room or cost_ms >= budget_ms:
                    break
                task = conn.execute(
                    sa.select(contribution_tasks).where(contribution_tasks.c.id == task_id)
                ).one()
                if not self._current(task):
                    self._cancel(
                        conn,
                        task.id,
                        "its documents changed, were deleted or got "
                        "vectors since the task was made",
                    )
                    stale = True
                    continue
                lease_id = str(ULID())
                if not insert_ignore(
                    conn,
                    contribution_leases,
                    {
                        "id": lease_id,
                        "task_id": task.id,
                        "client_id": me.id,
                        "leased_ms": now,
                        "expires_ms": expires,
                        "state": "leased",
                    },
                    ("task_id", "client_id"),
                    returning=contribution_leases.c.task_id,
                ):
                    continue  # this client took it in another request meanwhile
                cost_ms += float(task.cost_ms)
                leased.append(
                    {
                        "taskId": task.id,
                        "leaseId": lease_id,
                        "taskType": task.task_type,
                        "purpose": task.purpose,
                        "model": task.model,
                        "dimensions": DIMENSIONS[task.model],
                        "inputDigest": task.input_digest,
                        "input": task.input,
                        "leaseExpiresMs": expires,
                    }
                )
            if len(leased) == room or cost_ms >= budget_ms or not stale:
                break
        return _Leased(leased, queue.stuck, queue.lonely, None, cost_ms)

    def _queue(self, conn: sa.Connection, me: Contributor, now: int) -> _Queue:
        """The open tasks of the model as ``me`` sees them, in one read of their leases
        (with each lease's client and result).

        Eligible: the tasks ``me`` never leased, that fewer than
        :data:`CLIENTS_PER_TASK` clients hold (a live lease or a pending result) and
        that no client related to ``me`` holds; those already half done first, then
        the oldest. Stuck: tasks with enough pending results to settle, none received
        in the last :data:`_SETTLE_GRACE_MS` (a submit failed between recording and
        settling). Lonely: tasks whose one pending result has waited a lease's length
        and more with no other client working on it (every client that came was
        related to its own): the server checks it rather than leave it waiting. And
        the live leases ``me`` holds, and its network."""
        t, le = contribution_tasks.c, contribution_leases.c
        r, cl = contribution_results.c, contribution_clients.c
        is_open = sa.and_(t.state == "open", t.model == self.model)
        tasks = conn.scalars(sa.select(t.id).where(is_open).order_by(t.created_ms, t.id)).all()
        if not tasks:
            return _Queue([], [], [], 0, 0)
        rows = conn.execute(
            sa.select(
                le.task_id,
                le.client_id.label("id"),
                le.state,
                le.expires_ms,
                r.status,
                r.received_ms,
                cl.network,
                cl.key_id,
                cl.created_ms,
            )
            .select_from(
                contribution_leases.join(contribution_tasks, t.id == le.task_id)
                .join(contribution_clients, cl.id == le.client_id)
                .outerjoin(
                    contribution_results,
                    sa.and_(r.task_id == le.task_id, r.client_id == le.client_id),
                )
            )
            .where(is_open)
        ).all()
        window = self.settings.contributions_related_seconds * 1000
        mine: set[str] = set()
        barred: set[str] = set()
        holders: dict[str, int] = {}
        live: dict[str, int] = {}
        pending: dict[str, list[int]] = {}
        held = network_held = 0
        for row in rows:
            is_live = row.state == "leased" and row.expires_ms > now
            if row.id == me.id:
                mine.add(row.task_id)
                held += is_live
            if is_live:
                live[row.task_id] = live.get(row.task_id, 0) + 1
                network_held += bool(me.network) and row.network == me.network
            if row.status == "pending":
                pending.setdefault(row.task_id, []).append(int(row.received_ms))
            if is_live or row.status == "pending":
                holders[row.task_id] = holders.get(row.task_id, 0) + 1
                if related(me, _contributor(row), window):
                    barred.add(row.task_id)
        eligible = [
            task_id
            for task_id in tasks
            if task_id not in mine
            and task_id not in barred
            and holders.get(task_id, 0) < CLIENTS_PER_TASK
        ]
        eligible.sort(key=lambda task_id: -len(pending.get(task_id, ())))  # stable
        lonely_before = now - self.settings.contributions_lease_seconds * 1000 - _SETTLE_GRACE_MS
        stuck, lonely = [], []
        for task_id, received in pending.items():
            if len(received) >= CLIENTS_PER_TASK and max(received) < now - _SETTLE_GRACE_MS:
                stuck.append(task_id)
            elif len(received) == 1 and not live.get(task_id) and received[0] < lonely_before:
                lonely.append(task_id)
        return _Queue(eligible, stuck, lonely, held, network_held)

    def _create_tasks(self, conn: sa.Connection, count: int, now: int) -> None:
        """Up to ``count`` new tasks of documents that have no vector and are in no open
        task; a document another process claims meanwhile is left to its task."""
        t, d = contribution_tasks.c, contribution_task_docs.c
        open_tasks = conn.scalar(sa.select(sa.func.count()).where(t.state == "open")) or 0
        count = min(count, MAX_OPEN_TASKS - open_tasks)
        if count <= 0:
            return
        batch = self.settings.contributions_batch
        claimed = set(conn.scalars(sa.select(d.doc_id).where(d.model == self.model)))
        candidates = [
            (doc_id, text)
            for doc_id, text in self.store.missing_vectors(
                self.model, limit=len(claimed) + count * batch
            )
            if doc_id not in claimed and len(doc_id) <= _DOC_ID_CHARS
        ]
        for start in range(0, min(len(candidates), count * batch), batch):
            chunk = candidates[start : start + batch]
            task_id = str(ULID())
            conn.execute(
                contribution_tasks.insert().values(
                    id=task_id,
                    task_type=TASK_TYPES[0],
                    purpose=PURPOSES[0],
                    model=self.model,
                    state="open",
                    spot_checks=0,
                    disagreements=0,
                    created_ms=now,
                    **_task_input(self.model, chunk),
                )
            )
            # One INSERT … ON CONFLICT DO NOTHING RETURNING for the whole chunk (not one a
            # document: that was most of a lease's cost): the claims it made are the
            # documents it returns; one another process holds is skipped, as before.
            claimed_now = set(
                insert_ignore(
                    conn,
                    contribution_task_docs,
                    [
                        {"model": self.model, "doc_id": doc_id, "task_id": task_id}
                        for doc_id, _ in chunk
                    ],
                    ("model", "doc_id"),
                    returning=d.doc_id,
                )
            )
            got = [(doc_id, text) for doc_id, text in chunk if doc_id in claimed_now]
            if not got:
                conn.execute(contribution_tasks.delete().where(t.id == task_id))
                continue
            if len(got) < len(chunk):
                conn.execute(
                    contribution_tasks.update()
                    .where(t.id == task_id)
                    .values(**_task_input(self.model, got))
                )
            TASKS.labels("created").inc()

    def _current(self, task: sa.Row[Any]) -> bool:
        """Whether the task's texts are still its documents' (none changed, was deleted,
        or got a vector since the task was made)."""
        now = dict(self.store.missing_vectors(task.model, doc_ids=task.doc_ids))
        return bool([now.get(doc_id) for doc_id in task.doc_ids] == task.input["texts"])

    @staticmethod
    def _cancel(conn: sa.Connection, task_id: str, why: str) -> None:
        """Close an open task without writing anything, freeing its documents."""
        t, r = contribution_tasks.c, contribution_results.c
        done = conn.execute(
            contribution_tasks.update()
            .where(t.id == task_id, t.state == "open")
            .values(state="cancelled", reason=why)
        ).rowcount
        if done:
            conn.execute(
                contribution_task_docs.delete().where(contribution_task_docs.c.task_id == task_id)
            )
            conn.execute(
                contribution_results.update()
                .where(r.task_id == task_id, r.status == "pending")
                .values(status="cancelled", reason=f"The task was cancelled: {why}.")
            )
            TASKS.labels("cancelled").inc()

    # -- POST /v1/contributions -------------------------------------------------------

    def submit_json(self, body: bytes) -> dict[str, Any]:
        """:meth:`submit` for a request body (JSON), checked against the schema first."""
        try:
            # The vectors are decoded once, by submit (which uses them), not also here.
            contribution = contribution_adapter().validate_json(body, context={"decode": False})
        except ValidationError as exc:
            error = exc.errors(include_url=False)[0]
            field = ".".join(str(p) for p in error["loc"]) or None
            where = f"{field}: " if field else ""
            raise InvalidInput(
                f"The body is not a MartyContributionV1 ({where}"
                f"{error['msg']}); see GET /v1/contributions/schema.",
                field=field,
            ) from None
        return self.submit(contribution)

    def submit(self, c: Contribution) -> dict[str, Any]:
        """Record one result and verify it: ``{"status", "reason", "trust"}``.

        409 (:class:`Conflict`) when the lease is unknown, not this client's, for
        another task or expired; 422 when the result does not fit the task."""
        client_id = self.tokens.read(c["clientToken"])
        if not self.settings.contributions:
            raise Conflict(
                "Contributions are off on this server (contributions = false): "
                "the result was not used."
            )
        try:  # before the transaction: the task's row lock is not held while it runs
            sent = decode_vectors(c["result"]["vectors"], c["result"]["dimensions"])
        except ValueError as exc:  # as the schema's own check words it
            raise InvalidInput(
                f"The body is not a MartyContributionV1 (result: {exc}); see "
                "GET /v1/contributions/schema.",
                field="result",
            ) from None
        now = self._now_ms()
        with transaction(self.workspace.engine) as conn:
            recorded = self._record(conn, c, client_id, sent, now)
        if isinstance(recorded, _Received):
            return self._again(recorded, client_id, now)
        task, mine, others = recorded
        outcome = self._verify(task, mine, others)
        if not outcome.verdicts and not outcome.sampled:
            # The first result of a task: nothing to settle, so no second transaction
            # (a second client's result settles both, under the task's lock).
            status, reason, trust = "pending", _WAITING, mine.who.trust
        else:
            owners = {p.id: p.client_id for p in (mine, *others)}
            with transaction(self.workspace.engine) as conn:
                status, reason, trust = self._settle(conn, task.id, mine, owners, outcome, now)
        RESULTS.labels(status).inc()
        return _answer(status, reason, trust)

    def _again(self, earlier: _Received, client_id: str, now: int) -> dict[str, Any]:
        """The answer to a result sent again. One still pending may be one whose submit
        failed before settling it (its client retries after the error): it is settled
        now, and the answer is its verdict; otherwise ``duplicate``."""
        if earlier.status == "pending":
            self._heal(earlier.task_id, now)
            r, cl = contribution_results.c, contribution_clients.c
            with reading(self.workspace.engine) as conn:
                row = conn.execute(
                    sa.select(r.status, r.reason, cl.trust)
                    .join(contribution_clients, cl.id == r.client_id)
                    .where(r.task_id == earlier.task_id, r.client_id == client_id)
                ).first()
            if row is not None and row.status != "pending":
                RESULTS.labels(row.status).inc()
                return _answer(row.status, row.reason or "", float(row.trust))
        RESULTS.labels("duplicate").inc()
        return {
            "status": "duplicate",
            "reason": f"This client's result for the task was already received ({earlier.status}).",
            "trust": round(earlier.trust, 4),
        }

    def _heal(self, task_id: str, now: int, *, lonely: bool = False) -> None:
        """Verify and settle again the pending results of a task that a submit left
        between its two transactions (its spot-check's embedder failed, or its process
        stopped). Unsettled, they would hold the task forever: counted against
        :data:`CLIENTS_PER_TASK`, their documents claimed, each retry a ``duplicate``.
        Nothing but the database says what is left, so a process that died heals too.
        Safe beside a submit still in flight: a result is settled once, under the task's
        row lock (:meth:`_settle`). ``lonely``: the task's one pending result waited for
        an independent second one in vain (:meth:`_queue`), so the server checks it."""
        t, r = contribution_tasks.c, contribution_results.c
        with reading(self.workspace.engine) as conn:
            task = conn.execute(sa.select(contribution_tasks).where(t.id == task_id)).one()
            rows = conn.execute(
                _with_clients(sa.select(r.id.label("result_id"), r.status, r.vectors))
                .where(r.task_id == task_id, r.status.in_(("pending", "accepted")))
                .order_by(r.id)
            ).all()
        dimensions = DIMENSIONS[task.model]
        results = [
            _Pending(
                row.result_id,
                _contributor(row),
                row.status,
                vectors_from_bytes(row.vectors, dimensions),
            )
            for row in rows
        ]
        pending = [p for p in results if p.status == "pending"]
        if task.state == "open":  # one round judges them all; else waiting for a second
            last = pending[-1] if pending else None
            due = len(pending) >= CLIENTS_PER_TASK or lonely
            rounds = [(last, [p for p in results if p is not last])] if last and due else []
        else:  # late results, or a cancelled task's: each judged on its own
            accepted = [p for p in results if p.status == "accepted"]
            rounds = [(p, accepted) for p in pending]
        owners = {p.id: p.client_id for p in results}
        for mine, others in rounds:
            outcome = self._verify(task, mine, others, lonely=lonely)
            if outcome.verdicts or outcome.sampled:
                with transaction(self.workspace.engine) as conn:
                    self._settle(conn, task.id, mine, owners, outcome, now)
        if rounds:
            log.info("contributions: task %s's pending results were settled again", task_id)

    def _record(
        self,
        conn: sa.Connection,
        c: Contribution,
        client_id: str,
        vectors: npt.NDArray[np.float32],
        now: int,
    ) -> _Received | tuple[sa.Row[Any], _Pending, list[_Pending]]:
        """Check the lease and the result (``vectors``: its decoded vectors) against the
        task, store the result as pending; the task, this result and the task's other
        pending or accepted results (or, for a result already received, what became of
        it). Six statements: every one of them does something a submit needs (this is
        the server's hottest path)."""
        le, t, r = contribution_leases.c, contribution_tasks.c, contribution_results.c
        cl = contribution_clients.c
        # The lease and its task in one read, taking the task's row lock, which
        # serializes the results of one task (PostgreSQL's FOR NO KEY UPDATE, which
        # leases' foreign-key checks do not wait for; SQLite's write transactions are
        # serialized anyway). A missing lease locks nothing.
        found = conn.execute(
            sa.select(
                contribution_tasks,
                le.client_id.label("lease_client_id"),
                le.state.label("lease_state"),
                le.expires_ms.label("lease_expires_ms"),
            )
            .join(contribution_leases, le.task_id == t.id)
            .where(le.id == c["leaseId"].upper())
            .with_for_update(key_share=True, of=contribution_tasks)
        ).first()
        if found is None or found.lease_client_id != client_id or found.id != c["taskId"].upper():
            raise Conflict(
                "No such lease for this client and task: send the leaseId and "
                "taskId GET /v1/contributions/tasks gave this clientToken.",
                leaseId=c["leaseId"],
                taskId=c["taskId"],
            )
        task, lease_id = found, c["leaseId"].upper()
        earlier_status = (
            sa.select(r.status)
            .where(r.task_id == task.id, r.client_id == client_id)
            .scalar_subquery()
        )
        known = conn.execute(
            sa.select(
                cl.id,
                cl.trust,
                cl.network,
                cl.key_id,
                cl.created_ms,
                cl.checked,
                earlier_status.label("earlier"),
            ).where(cl.id == client_id)
        ).first()
        trust = float(known.trust) if known is not None else 0.0
        if known is not None and known.earlier is not None:
            return _Received(task.id, str(known.earlier), trust)
        if found.lease_state != "leased" or found.lease_expires_ms <= now:
            raise Conflict(
                f"The lease expired {(now - found.lease_expires_ms) / 1000:.0f} s "
                f"ago (leases last {self.settings.contributions_lease_seconds} s): "
                "the task was given to another client; ask for new tasks.",
                leaseId=lease_id,
            )
        self._check_result(c, task, vectors)
        compute_ms = float(c["timings"]["computeMs"])
        inserted = insert_ignore(
            conn,
            contribution_results,
            {
                "task_id": task.id,
                "client_id": client_id,
                "vectors": vectors.astype("<f4", copy=False).tobytes(),
                "status": "pending",
                "compute_ms": compute_ms,
                "received_ms": now,
            },
            ("task_id", "client_id"),
            returning=r.id,
        )
        if not inserted:  # the same client's other request recorded it meanwhile
            return _Received(task.id, "pending", trust)
        conn.execute(
            contribution_leases.update().where(le.id == lease_id).values(state="submitted")
        )
        conn.execute(
            contribution_clients.update()
            .where(cl.id == client_id)
            .values(last_seen_ms=now, tier=c["deviceTier"])
        )
        dimensions = DIMENSIONS[task.model]
        others = [
            _Pending(
                row.result_id,
                _contributor(row),
                row.status,
                vectors_from_bytes(row.vectors, dimensions),
            )
            for row in conn.execute(
                _with_clients(sa.select(r.id.label("result_id"), r.status, r.vectors))
                .where(
                    r.task_id == task.id,
                    r.client_id != client_id,
                    r.status.in_(("pending", "accepted")),
                )
                .order_by(r.id)
            )
        ]
        who = (
            _contributor(known)
            if known is not None
            else Contributor(client_id, trust, network="", key_id=None, created_ms=0, checked=0)
        )
        return task, _Pending(int(inserted[0]), who, "pending", vectors), others

    @staticmethod
    def _check_result(c: Contribution, task: sa.Row[Any], vectors: npt.NDArray[np.float32]) -> None:
        """InvalidInput unless the result (``vectors``: its decoded vectors) is one for
        this task."""
        import numpy as np

        result = c["result"]
        texts = task.input["texts"]
        count = len(vectors)
        problems = (
            (
                "taskType",
                c["taskType"] != task.task_type,
                f"the task is {task.task_type!r}, not {c['taskType']!r}",
            ),
            (
                "inputDigest",
                c["inputDigest"] != task.input_digest,
                "it is not the task's: echo the inputDigest of the lease",
            ),
            (
                "consent.purpose",
                c["consent"]["purpose"] != task.purpose,
                f"the task's purpose is {task.purpose!r}",
            ),
            ("result.model", result["model"] != task.model, f"the task's model is {task.model!r}"),
            (
                "result.dimensions",
                result["dimensions"] != DIMENSIONS[task.model],
                f"{task.model} vectors have {DIMENSIONS[task.model]} dimensions",
            ),
            (
                "result.vectors",
                count != len(texts),
                f"the task has {len(texts)} texts, so {len(texts)} vectors "
                f"({len(texts)}×{result['dimensions']}×4 bytes), not {count}",
            ),
        )
        for field, wrong, why in problems:
            if wrong:
                raise InvalidInput(f"{field} does not match the task: {why}.", field=field)
        norms = np.linalg.norm(vectors, axis=1)
        if not np.all(np.abs(norms - 1.0) <= 1e-3):
            bad = int(np.argmax(np.abs(norms - 1.0)))
            raise InvalidInput(
                f"result.vectors.{bad} is not a unit vector (norm "
                f"{float(norms[bad]):.4f}): send L2-normalised vectors.",
                field=f"result.vectors.{bad}",
            )

    def _verify(
        self, task: sa.Row[Any], mine: _Pending, others: list[_Pending], *, lonely: bool = False
    ) -> _Outcome:
        """What becomes of this result and the task's other pending ones. Runs outside
        any transaction: a check embeds.

        Agreement accepts only between independent clients. The server embeds the
        texts itself for a disagreement, for related clients' results (two of one
        party: their agreement proves nothing), for a ``lonely`` result no independent
        client came to match, and at random. A result of a client on probation is
        checked on :data:`PROBATION_SAMPLE` of its texts (all of a task that small:
        then it is judged at once); one that passes still needs an independent
        client's agreement to be accepted, and counts towards the end of probation."""
        tolerance = self.settings.contributions_tolerance
        window = self.settings.contributions_related_seconds * 1000
        new = mine.who.on_probation(self.settings.contributions_probation)
        texts = task.input["texts"]
        if task.state == "cancelled":
            reason = f"The task was cancelled: {task.reason}."
            return _Outcome({mine.id: _Verdict("cancelled", reason)})
        if task.state == "accepted":  # a late result: judged against the accepted one
            return self._verify_late(task, mine, others, new)
        pending = [o for o in others if o.status == "pending"]
        disagreed = any(not _agree(mine.vectors, o.vectors, tolerance) for o in pending)
        cause: str | None = None
        if any(related(mine.who, p.who, window) for p in pending):
            cause = "related"
        elif disagreed:
            cause = "disagreement"
        elif new and len(texts) <= PROBATION_SAMPLE:
            cause = "probation"  # the sample is the whole task: judged at once
        elif not pending and lonely:
            cause = "lonely"
        sampled: tuple[int, ...] = ()
        if cause is None and new:
            if not self._sample_agrees(task, mine):
                return _Outcome({mine.id: _checked(False)}, cause="probation")
            sampled = (mine.id,)
        if cause is None:
            if not pending:  # wait for an independent second client
                return _Outcome(cause="probation" if sampled else None, sampled=sampled)
            if self._rng.random() >= self.settings.contributions_spot_check:
                verdict = _Verdict("accepted", "Another client's result agrees.")
                return _Outcome(
                    {p.id: verdict for p in (mine, *pending)},
                    mine.vectors,
                    cause="probation" if sampled else None,
                    sampled=sampled,
                )
            cause = "random"
        truth = self._embed(texts, task.model)
        verdicts = {p.id: _checked(_agree(p.vectors, truth, tolerance)) for p in (mine, *pending)}
        right = any(v.status == "accepted" for v in verdicts.values())
        return _Outcome(verdicts, truth if right else None, cause, disagreed)

    def _verify_late(
        self, task: sa.Row[Any], mine: _Pending, others: list[_Pending], new: bool
    ) -> _Outcome:
        """A result for a task already accepted: it agrees with the accepted vectors
        (and, on probation, passes its sample), or the server checks it in full."""
        tolerance = self.settings.contributions_tolerance
        window = self.settings.contributions_related_seconds * 1000
        texts = task.input["texts"]
        done = [o for o in others if o.status == "accepted"]
        agrees = bool(done) and _agree(mine.vectors, done[0].vectors, tolerance)
        if agrees and not related(mine.who, done[0].who, window):
            already = _Verdict(
                "accepted", "The task was already done; this result agrees with the accepted one."
            )
            if not new:
                return _Outcome({mine.id: already})
            if len(texts) > PROBATION_SAMPLE:
                if self._sample_agrees(task, mine):
                    return _Outcome({mine.id: already}, cause="probation", sampled=(mine.id,))
                return _Outcome({mine.id: _checked(False)}, cause="probation")
        right = _agree(mine.vectors, self._embed(texts, task.model), tolerance)
        if right and done and not agrees:
            log.warning(
                "contributions: task %s was accepted with vectors the server's "
                "own embedding disagrees with",
                task.id,
            )
        return _Outcome(
            {mine.id: _checked(right)},
            cause="probation" if new else "late",
            disagreed=bool(done) and not agrees,
        )

    def _sample_agrees(self, task: sa.Row[Any], result: _Pending) -> bool:
        """Whether :data:`PROBATION_SAMPLE` of the task's texts, drawn at random, have
        the server's own vectors in ``result``."""
        texts = task.input["texts"]
        rows = sorted(self._rng.sample(range(len(texts)), min(PROBATION_SAMPLE, len(texts))))
        truth = self._embed([texts[i] for i in rows], task.model)
        return _agree(result.vectors[rows], truth, self.settings.contributions_tolerance)

    def _settle(
        self,
        conn: sa.Connection,
        task_id: str,
        mine: _Pending,
        owners: dict[int, str],
        outcome: _Outcome,
        now: int,
    ) -> tuple[str, str, float]:
        """Apply the outcome under the task's row lock: write the vectors (once),
        judge each result still pending, move trust, count the probation checks
        passed. This result's status, reason, and its client's trust. ``owners`` maps
        result ids to their clients (what :meth:`_record` read, so they need no
        second read)."""
        t, r, cl = contribution_tasks.c, contribution_results.c, contribution_clients.c
        verdicts, vectors = outcome.verdicts, outcome.vectors
        checked, disagreed, sampled = outcome.cause, outcome.disagreed, outcome.sampled
        task = conn.execute(
            sa.select(contribution_tasks).where(t.id == task_id).with_for_update(key_share=True)
        ).one()
        if not conn.scalar(
            sa.select(sa.func.count()).where(r.id.in_({*verdicts, *sampled}), r.status == "pending")
        ):
            # Settled meanwhile (a retry or a lease healed the task as this submit ran):
            # the vectors, checks and trust were applied then, and are not again.
            verdicts, vectors, checked, disagreed, sampled = {}, None, None, False, ()
        if vectors is not None and not self._accept(conn, task, vectors, now):
            why = "its documents changed since the task was made"
            verdicts = {
                i: _Verdict("cancelled", f"The task was cancelled: {why}.") for i in verdicts
            }
        if checked or disagreed:
            conn.execute(
                contribution_tasks.update()
                .where(t.id == task_id)
                .values(
                    spot_checks=t.spot_checks + (1 if checked else 0),
                    disagreements=t.disagreements + (1 if disagreed else 0),
                )
            )
            if checked:
                SPOT_CHECKS.labels(checked).inc()
        settled: tuple[str, str, float] | None = None
        for result_id in sorted({*verdicts, *sampled}, key=lambda i: owners.get(i, "")):
            client_id = owners.get(result_id)  # one pass in the clients' order: lock order
            if result_id not in verdicts:  # a probation sample passed; the result waits
                if client_id is not None:
                    conn.execute(
                        contribution_clients.update()
                        .where(cl.id == client_id)
                        .values(checked=cl.checked + 1)
                    )
                continue
            verdict = verdicts[result_id]
            trust = self._judge(conn, result_id, client_id, verdict, result_id in sampled)
            if result_id == mine.id and trust is not None:
                settled = verdict.status, verdict.reason, trust
        if settled is not None:
            return settled
        row = conn.execute(
            sa.select(r.status, r.reason, cl.trust)
            .join(contribution_clients, cl.id == r.client_id)
            .where(r.id == mine.id)
        ).one()
        return row.status, row.reason or _WAITING, float(row.trust or 0.0)

    @staticmethod
    def _judge(
        conn: sa.Connection,
        result_id: int,
        client_id: str | None,
        verdict: _Verdict,
        sampled: bool = False,
    ) -> float | None:
        """Settle one pending result (once: a result judged meanwhile is left alone) and
        move its client's trust: up a little when accepted, down sharply when wrong; an
        accepted result the server's own embedding checked (in full, or ``sampled``)
        counts towards the client's probation. The client's trust after it, or None
        when the result was judged meanwhile (or its client is unknown)."""
        r, cl = contribution_results.c, contribution_clients.c
        done = conn.execute(
            contribution_results.update()
            .where(r.id == result_id, r.status == "pending")
            .values(status=verdict.status, reason=verdict.reason)
        ).rowcount
        if not done or client_id is None:
            return None
        if verdict.status == "cancelled":
            trust = conn.scalar(sa.select(cl.trust).where(cl.id == client_id))
        else:
            moved = (
                cl.trust + TRUST_GAIN * (1 - cl.trust)
                if verdict.status == "accepted"
                else cl.trust * TRUST_PENALTY
            )
            confirmed = verdict.status == "accepted" and (verdict.checked or sampled)
            trust = conn.execute(
                contribution_clients.update()
                .where(cl.id == client_id)
                .values(trust=moved, checked=cl.checked + (1 if confirmed else 0))
                .returning(cl.trust)
            ).scalar()
        return None if trust is None else float(trust)

    def _accept(
        self, conn: sa.Connection, task: sa.Row[Any], vectors: npt.NDArray[np.float32], now: int
    ) -> bool:
        """Move the task ``open → accepted`` and write its vectors to the store, or
        cancel it when its documents changed; False when cancelled. A task no longer
        open (another request settled it) is left as it is. The caller holds the
        task's row lock, and the move is one conditional update: applied once."""
        t = contribution_tasks.c
        if task.state != "open":
            return True
        if not self._current(task):
            self._cancel(
                conn,
                task.id,
                "its documents changed, were deleted or got vectors since the task was made",
            )
            return False
        moved = conn.execute(
            contribution_tasks.update()
            .where(t.id == task.id, t.state == "open")
            .values(state="accepted", accepted_ms=now)
        ).rowcount
        if not moved:
            return True
        # A document updated since _current read it is skipped by the store, which
        # compares the texts inside its own write transaction: it never gets a vector
        # of its old text, and, its claim gone, it is tasked again with the new one.
        skipped = self.store.put_vectors(
            task.model,
            dict(zip(task.doc_ids, vectors, strict=True)),
            texts=dict(zip(task.doc_ids, task.input["texts"], strict=True)),
        )
        if skipped:
            log.info(
                "contributions: %d document(s) of task %s changed as its vectors were "
                "written; they are left to a new task",
                len(skipped),
                task.id,
            )
        conn.execute(
            contribution_task_docs.delete().where(contribution_task_docs.c.task_id == task.id)
        )
        TASKS.labels("accepted").inc()
        return True

    # -- GET /v1/contributions/stats ------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Clients, tasks and results by state, disagreements, spot-checks, CPU given."""
        return contribution_stats(self.workspace, now_ms=self._now_ms())


@dataclass(frozen=True)
class _Received:
    """A result this client sent before: its task, its status, the client's trust."""

    task_id: str
    status: str
    trust: float


def _checked(right: bool) -> _Verdict:
    """The verdict of the server's own embedding on a result."""
    if right:
        return _Verdict("accepted", "The server's spot-check agrees.", checked=True)
    return _Verdict("rejected", "The server's spot-check proved this result wrong.", checked=True)


def _answer(status: str, reason: str, trust: float) -> dict[str, Any]:
    """A verdict as the client gets it: a cancelled task's results are "rejected" (the
    protocol's four statuses); the reason says why, and its trust did not move."""
    return {
        "status": "rejected" if status == "cancelled" else status,
        "reason": reason,
        "trust": round(trust, 4),
    }


@dataclass(frozen=True)
class _Pending:
    """A result being verified: its row, client (as the result was recorded), status
    and vectors."""

    id: int
    who: Contributor
    status: str
    vectors: npt.NDArray[np.float32]

    @property
    def client_id(self) -> str:
        return self.who.id


def _with_clients(query: sa.Select[Any]) -> sa.Select[Any]:
    """``query`` of ``contribution_results`` with its clients' columns (the client's id
    as ``id``), as :func:`_contributor` reads them."""
    cl = contribution_clients.c
    return query.add_columns(
        cl.id, cl.trust, cl.network, cl.key_id, cl.created_ms, cl.checked
    ).join(contribution_clients, cl.id == contribution_results.c.client_id)


def _task_input(model: str, chunk: Sequence[tuple[str, str]]) -> dict[str, Any]:
    texts = [text for _, text in chunk]
    return {
        "doc_ids": [doc_id for doc_id, _ in chunk],
        "input": {"texts": texts},
        "input_digest": input_digest(texts),
        "cost_ms": task_cost_ms(model, texts),
    }


def _contributor(row: Any) -> Contributor:
    """The :class:`Contributor` of a row of ``contribution_clients`` columns (its id as
    ``id``; trust and checked count 0 where the row lacks them)."""
    m = row._mapping
    return Contributor(
        id=str(m["id"]),
        trust=float(m.get("trust") or 0.0),
        network=str(m["network"] or ""),
        key_id=None if m["key_id"] is None else int(m["key_id"]),
        created_ms=int(m["created_ms"]),
        checked=int(m.get("checked") or 0),
    )


@dataclass(frozen=True)
class _Queue:
    """The open tasks as one client sees them (:meth:`Contributions._queue`)."""

    eligible: list[str]
    stuck: list[str]
    lonely: list[str]
    #: Live leases this client holds, and the clients of its network.
    held: int
    network_held: int


@dataclass(frozen=True)
class _Leased:
    """What one lease gave: the tasks, the open tasks to settle after it, why no task
    fitted the client's or its network's cap (None: none was reached), and the
    estimated CPU milliseconds of the tasks given."""

    tasks: list[dict[str, Any]]
    stuck: list[str]
    lonely: list[str]
    held: str | None
    cost_ms: float


def _tasks_for(trust: float) -> int:
    """How many tasks one lease may hold at ``trust``: fewer as trust falls."""
    return max(1, min(MAX_TASKS_PER_LEASE, math.floor(MAX_TASKS_PER_LEASE * trust)))


def contribution_stats(ws: Workspace, *, now_ms: int | None = None) -> dict[str, Any]:
    """``GET /v1/contributions/stats``: what browsers have given and how it was checked.

    ``tasks.open`` and ``tasks.leased`` split the open tasks by whether a live lease
    holds them; ``byTier`` counts clients by the tier they last reported."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    cl, t = contribution_clients.c, contribution_tasks.c
    le, r = contribution_leases.c, contribution_results.c
    with reading(ws.engine) as conn:
        by_tier = _counts(conn, sa.select(cl.tier, sa.func.count()).group_by(cl.tier))
        low = conn.scalar(sa.select(sa.func.count()).where(cl.trust < TRUST_FLOOR)) or 0
        cpu_ms = conn.scalar(sa.select(sa.func.coalesce(sa.func.sum(r.compute_ms), 0.0))) or 0.0
        states = _counts(conn, sa.select(t.state, sa.func.count()).group_by(t.state))
        leased = (
            conn.scalar(
                sa.select(sa.func.count(sa.distinct(le.task_id)))
                .join(contribution_tasks, t.id == le.task_id)
                .where(t.state == "open", le.state == "leased", le.expires_ms > now)
            )
            or 0
        )
        results = _counts(conn, sa.select(r.status, sa.func.count()).group_by(r.status))
        checks = conn.execute(
            sa.select(
                sa.func.coalesce(sa.func.sum(t.disagreements), 0),
                sa.func.coalesce(sa.func.sum(t.spot_checks), 0),
            )
        ).one()
        embedded = sum(
            len(ids) for ids in conn.scalars(sa.select(t.doc_ids).where(t.state == "accepted"))
        )
    return {
        "clients": {"total": sum(by_tier.values()), "byTier": by_tier, "lowTrust": int(low)},
        "tasks": {
            "open": states.get("open", 0) - leased,
            "leased": int(leased),
            "accepted": states.get("accepted", 0),
            "cancelled": states.get("cancelled", 0),
        },
        "results": {
            status: results.get(status, 0)
            for status in ("accepted", "rejected", "pending", "cancelled")
        },
        "disagreements": int(checks[0]),
        "spotChecks": int(checks[1]),
        "cpuSecondsGiven": round(float(cpu_ms) / 1000, 3),
        "documentsEmbedded": embedded,
    }
