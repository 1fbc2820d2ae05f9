"""Leases, verification and trust: how browsers' idle compute becomes search vectors.

Browsers running ``amelio.js`` may embed search documents the server has not
embedded yet, so the server need not spend its own CPU on them. Nothing a browser
sends is believed on its word:

* **Tasks** are made lazily, when a client asks and too few open tasks exist: a
  batch of ``contributions_batch`` documents with no vector for the search model,
  each claimed for one open task (``contribution_task_docs``' primary key, so two
  processes leasing at once never task a document twice). A task's input is the
  exact text the server would embed (:meth:`DocumentStore.missing_vectors`) and
  its SHA-256 digest.
* **Leases** last ``contributions_lease_seconds``. A client never gets a task twice
  (``(task, client)`` is unique); a task is leased to two clients at a time until
  two results agree; an expired lease is answered 409 and its task goes to another.
* **Verification**: a result is accepted when a second, distinct client's result
  agrees (every vector's cosine at least ``contributions_tolerance``), or when the
  server's own embedding does (a spot-check: every disagreement, and a random
  ``contributions_spot_check`` share of agreements). The task moves ``open →
  accepted`` by one conditional update under the task's row lock, then its vectors
  go into the store with :meth:`DocumentStore.put_vectors`: applied once. When a
  document changed since the task was made (its current text no longer matches)
  the task is cancelled and nothing is written; one that changes as the vectors go
  in is skipped by the store's own check of the texts, and tasked again.
* **Healing**: a submit records its result in one transaction and settles it in a
  second, after verifying (which may embed). Results a failed submit left pending
  are verified and settled again when their client sends them again, or when a
  lease finds their task stuck (:meth:`Contributions._heal`).
* **Trust** starts at 0.5, rises a little with each accepted result and drops
  sharply when a spot-check proves a result wrong; a client under
  :data:`TRUST_FLOOR` gets no tasks, and fewer tasks per lease as trust falls.
* **Budgets**: each client's CPU-seconds over the last hour (the ``computeMs`` of
  its results) stay within its tier's :data:`CPU_SECONDS_PER_HOUR`; ``DEGRADED``
  gets nothing.
"""

from __future__ import annotations

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

from amelio.contributions.policy import DIMENSIONS, unavailable
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
#: The most tasks one lease may hold (at trust 1; fewer as trust falls).
MAX_TASKS_PER_LEASE = 8
#: Distinct clients a task is leased to at once (two agreeing results accept it).
CLIENTS_PER_TASK = 2
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
    "Contributed results the server checked by "
    "embedding the texts itself, by cause (random, disagreement, late).",
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
class _Verdict:
    """What becomes of one pending result."""

    status: str  # accepted | rejected | cancelled
    reason: str


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
    ) -> dict[str, Any]:
        """Up to ``max_tasks`` tasks for one client (a new client when ``client_token``
        is None), and its trust and budget; ``tasks`` is empty, with a ``reason``,
        when there is nothing for it to do."""
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
        with transaction(self.workspace.engine) as conn:
            client_id, trust = self._client(conn, client_id, tier, now)
            response["clientId"] = client_id
            response["clientToken"] = self.tokens.issue(client_id)
            response["trust"] = round(trust, 4)
            used_ms, oldest_ms = self._used_last_hour(conn, client_id, now)
            used_s = max(used_ms / 1000, reported_cpu_s or 0.0)
            response["budget"]["usedLastHour"] = round(used_s, 3)
            reason, retry = self._refusal(tier, purposes, types, trust, budget_s)
            if reason is None and used_s >= budget_s:
                reason = (
                    f"The hourly CPU budget of tier {tier} ({budget_s} s) is spent "
                    f"({used_s:.1f} s in the last hour)."
                )
                retry = max((oldest_ms or now) + HOUR_MS - now, _RETRY_MS["busy"])
            stuck: list[str] = []
            if reason is None:
                wanted = min(max_tasks, _tasks_for(trust))
                response["tasks"], stuck = self._lease_tasks(conn, client_id, wanted, now)
                if response["tasks"]:
                    retry = 0
                else:
                    reason = (
                        "Nothing to embed now: every search document has a vector, "
                        "or every open task already has enough clients."
                    )
                    retry = _RETRY_MS["idle"]
            response["reason"], response["retryAfterMs"] = reason, retry
        for task_id in stuck[:1]:  # one a poll: the answer is not held up for long
            try:
                self._heal(task_id, now)
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
        self, conn: sa.Connection, client_id: str | None, tier: str, now: int
    ) -> tuple[str, float]:
        """The client's id and trust, recording its tier and when it was seen; a new
        client when ``client_id`` is None (or unknown: a genuine token whose row a
        restore dropped starts afresh)."""
        c = contribution_clients.c
        if client_id is not None:
            trust = conn.scalar(sa.select(c.trust).where(c.id == client_id))
            if trust is not None:
                conn.execute(
                    contribution_clients.update()
                    .where(c.id == client_id)
                    .values(tier=tier, last_seen_ms=now)
                )
                return client_id, float(trust)
        client_id = client_id or str(ULID())
        if not insert_ignore(
            conn,
            contribution_clients,
            {
                "id": client_id,
                "tier": tier,
                "trust": INITIAL_TRUST,
                "created_ms": now,
                "last_seen_ms": now,
            },
            ("id",),
            returning=c.id,
        ):
            return self._client(conn, client_id, tier, now)  # another request made it
        return client_id, INITIAL_TRUST

    @staticmethod
    def _used_last_hour(conn: sa.Connection, client_id: str, now: int) -> tuple[float, int | None]:
        """The client's CPU milliseconds over the last hour, and its oldest result in it."""
        r = contribution_results.c
        row = conn.execute(
            sa.select(
                sa.func.coalesce(sa.func.sum(r.compute_ms), 0.0), sa.func.min(r.received_ms)
            ).where(r.client_id == client_id, r.received_ms > now - HOUR_MS)
        ).one()
        return float(row[0]), None if row[1] is None else int(row[1])

    def _lease_tasks(
        self, conn: sa.Connection, client_id: str, wanted: int, now: int
    ) -> tuple[list[dict[str, Any]], list[str]]:
        """Lease up to ``wanted`` tasks to the client, making new ones when too few are
        open; a task whose documents changed meanwhile is cancelled on the way (and its
        documents tasked again, with their new texts). Also the open tasks a failed
        submit left unsettled (:meth:`_eligible`), for the caller to settle once this
        transaction is over."""
        expires = now + self.settings.contributions_lease_seconds * 1000
        leased: list[dict[str, Any]] = []
        for _ in range(2):  # a second round when stale tasks were cancelled
            eligible, stuck = self._eligible(conn, client_id, now)
            if len(eligible) < wanted - len(leased):
                self._create_tasks(conn, wanted - len(leased) - len(eligible), now)
                eligible, stuck = self._eligible(conn, client_id, now)
            stale = False
            for task_id in eligible:
                if len(leased) == wanted:
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
                        "client_id": client_id,
                        "leased_ms": now,
                        "expires_ms": expires,
                        "state": "leased",
                    },
                    ("task_id", "client_id"),
                    returning=contribution_leases.c.task_id,
                ):
                    continue  # this client took it in another request meanwhile
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
            if len(leased) == wanted or not stale:
                break
        return leased, stuck

    def _eligible(
        self, conn: sa.Connection, client_id: str, now: int
    ) -> tuple[list[str], list[str]]:
        """The open tasks of the model that this client never leased and that fewer than
        :data:`CLIENTS_PER_TASK` clients hold (a live lease or a pending result): those
        already half done first, then the oldest. And the open tasks stuck with enough
        pending results to settle, none of them received in the last
        :data:`_SETTLE_GRACE_MS` (a submit failed between recording and settling)."""
        t, le, r = contribution_tasks.c, contribution_leases.c, contribution_results.c
        is_open = sa.and_(t.state == "open", t.model == self.model)
        tasks = conn.scalars(sa.select(t.id).where(is_open).order_by(t.created_ms, t.id)).all()
        if not tasks:
            return [], []
        mine = set(
            conn.scalars(
                sa.select(le.task_id)
                .join(contribution_tasks, t.id == le.task_id)
                .where(is_open, le.client_id == client_id)
            )
        )
        live = _counts(
            conn,
            sa.select(le.task_id, sa.func.count())
            .join(contribution_tasks, t.id == le.task_id)
            .where(is_open, le.state == "leased", le.expires_ms > now)
            .group_by(le.task_id),
        )
        pending: dict[str, int] = {}
        stuck: list[str] = []
        for task_id, count, newest in conn.execute(
            sa.select(r.task_id, sa.func.count(), sa.func.max(r.received_ms))
            .join(contribution_tasks, t.id == r.task_id)
            .where(is_open, r.status == "pending")
            .group_by(r.task_id)
        ):
            pending[task_id] = int(count)
            if count >= CLIENTS_PER_TASK and newest < now - _SETTLE_GRACE_MS:
                stuck.append(task_id)
        found = [
            task_id
            for task_id in tasks
            if task_id not in mine
            and live.get(task_id, 0) + pending.get(task_id, 0) < CLIENTS_PER_TASK
        ]
        found.sort(key=lambda task_id: -pending.get(task_id, 0))  # stable: then the oldest
        return found, stuck

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
                    **_task_input(chunk),
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
                    contribution_tasks.update().where(t.id == task_id).values(**_task_input(got))
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
        verdicts, vectors, checked, disagreed = self._verify(task, mine, others)
        if not verdicts:
            # The first result of a task: nothing to settle, so no second transaction
            # (a second client's result settles both, under the task's lock).
            status, reason, trust = "pending", _WAITING, mine.trust
        else:
            owners = {p.id: p.client_id for p in (mine, *others)}
            with transaction(self.workspace.engine) as conn:
                status, reason, trust = self._settle(
                    conn, task.id, mine, owners, verdicts, vectors, checked, disagreed, now
                )
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

    def _heal(self, task_id: str, now: int) -> None:
        """Verify and settle again the pending results of a task that a submit left
        between its two transactions (its spot-check's embedder failed, or its process
        stopped). Unsettled, they would hold the task forever: counted against
        :data:`CLIENTS_PER_TASK`, their documents claimed, each retry a ``duplicate``.
        Nothing but the database says what is left, so a process that died heals too.
        Safe beside a submit still in flight: a result is settled once, under the task's
        row lock (:meth:`_settle`)."""
        t, r = contribution_tasks.c, contribution_results.c
        with reading(self.workspace.engine) as conn:
            task = conn.execute(sa.select(contribution_tasks).where(t.id == task_id)).one()
            rows = conn.execute(
                sa.select(r.id, r.client_id, r.status, r.vectors)
                .where(r.task_id == task_id, r.status.in_(("pending", "accepted")))
                .order_by(r.id)
            ).all()
        dimensions = DIMENSIONS[task.model]
        results = [
            _Pending(row.id, row.client_id, row.status, vectors_from_bytes(row.vectors, dimensions))
            for row in rows
        ]
        pending = [p for p in results if p.status == "pending"]
        if task.state == "open":  # one round judges them all; fewer than two: waiting
            rounds = (
                [(pending[-1], [p for p in results if p is not pending[-1]])]
                if len(pending) >= CLIENTS_PER_TASK
                else []
            )
        else:  # late results, or a cancelled task's: each judged on its own
            accepted = [p for p in results if p.status == "accepted"]
            rounds = [(p, accepted) for p in pending]
        owners = {p.id: p.client_id for p in results}
        for mine, others in rounds:
            verdicts, vectors, checked, disagreed = self._verify(task, mine, others)
            if verdicts:
                with transaction(self.workspace.engine) as conn:
                    self._settle(
                        conn, task.id, mine, owners, verdicts, vectors, checked, disagreed, now
                    )
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
        known = conn.execute(sa.select(cl.trust, earlier_status).where(cl.id == client_id)).first()
        trust = float(known[0]) if known is not None else 0.0
        if known is not None and known[1] is not None:
            return _Received(task.id, str(known[1]), trust)
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
            _Pending(row.id, row.client_id, row.status, vectors_from_bytes(row.vectors, dimensions))
            for row in conn.execute(
                sa.select(r.id, r.client_id, r.status, r.vectors)
                .where(
                    r.task_id == task.id,
                    r.client_id != client_id,
                    r.status.in_(("pending", "accepted")),
                )
                .order_by(r.id)
            )
        ]
        return task, _Pending(int(inserted[0]), client_id, "pending", vectors, trust), others

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
        self, task: sa.Row[Any], mine: _Pending, others: list[_Pending]
    ) -> tuple[dict[int, _Verdict], npt.NDArray[np.float32] | None, str | None, bool]:
        """Verdicts for this result and the task's other pending ones, the vectors to
        store (None: none yet), the spot-check's cause if one ran, and whether two
        clients disagreed. Runs outside any transaction: a spot-check embeds."""
        tolerance = self.settings.contributions_tolerance
        texts = task.input["texts"]
        if task.state == "cancelled":
            return (
                {mine.id: _Verdict("cancelled", f"The task was cancelled: {task.reason}.")},
                None,
                None,
                False,
            )
        if task.state == "accepted":  # a late result: judged against the accepted one
            done = [o for o in others if o.status == "accepted"]
            if done and _agree(mine.vectors, done[0].vectors, tolerance):
                return (
                    {
                        mine.id: _Verdict(
                            "accepted",
                            "The task was already done; this result agrees with the accepted one.",
                        )
                    },
                    None,
                    None,
                    False,
                )
            right = _agree(mine.vectors, self._embed(texts, task.model), tolerance)
            if right and done:
                log.warning(
                    "contributions: task %s was accepted with vectors the server's "
                    "own embedding disagrees with",
                    task.id,
                )
            return (
                {
                    mine.id: _Verdict("accepted", "The server's spot-check agrees.")
                    if right
                    else _Verdict("rejected", "The server's spot-check proved this result wrong.")
                },
                None,
                "late",
                bool(done),
            )
        pending = [o for o in others if o.status == "pending"]
        if not pending:
            return {}, None, None, False  # wait for a second client
        disagreed = any(not _agree(mine.vectors, o.vectors, tolerance) for o in pending)
        cause = (
            "disagreement"
            if disagreed
            else ("random" if self._rng.random() < self.settings.contributions_spot_check else None)
        )
        if cause is None:
            verdict = _Verdict("accepted", "Another client's result agrees.")
            return ({p.id: verdict for p in (mine, *pending)}, mine.vectors, None, False)
        truth = self._embed(texts, task.model)
        verdicts = {
            p.id: _Verdict("accepted", "The server's spot-check agrees.")
            if _agree(p.vectors, truth, tolerance)
            else _Verdict("rejected", "The server's spot-check proved this result wrong.")
            for p in (mine, *pending)
        }
        right = any(v.status == "accepted" for v in verdicts.values())
        return verdicts, truth if right else None, cause, disagreed

    def _settle(
        self,
        conn: sa.Connection,
        task_id: str,
        mine: _Pending,
        owners: dict[int, str],
        verdicts: dict[int, _Verdict],
        vectors: npt.NDArray[np.float32] | None,
        checked: str | None,
        disagreed: bool,
        now: int,
    ) -> tuple[str, str, float]:
        """Apply the verdicts under the task's row lock: write the vectors (once),
        judge each result still pending, move trust. This result's status, reason,
        and its client's trust. ``owners`` maps result ids to their clients (what
        :meth:`_record` read, so they need no second read)."""
        t, r, cl = contribution_tasks.c, contribution_results.c, contribution_clients.c
        task = conn.execute(
            sa.select(contribution_tasks).where(t.id == task_id).with_for_update(key_share=True)
        ).one()
        if not conn.scalar(
            sa.select(sa.func.count()).where(r.id.in_(verdicts), r.status == "pending")
        ):
            # Settled meanwhile (a retry or a lease healed the task as this submit ran):
            # the vectors, checks and trust were applied then, and are not again.
            verdicts, vectors, checked, disagreed = {}, None, None, False
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
        for result_id in sorted(verdicts, key=lambda i: owners.get(i, "")):  # lock order
            trust = self._judge(conn, result_id, owners.get(result_id), verdicts[result_id])
            if result_id == mine.id and trust is not None:
                settled = verdicts[result_id].status, verdicts[result_id].reason, trust
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
        conn: sa.Connection, result_id: int, client_id: str | None, verdict: _Verdict
    ) -> float | None:
        """Settle one pending result (once: a result judged meanwhile is left alone) and
        move its client's trust: up a little when accepted, down sharply when wrong.
        The client's trust after it, or None when the result was judged meanwhile (or
        its client is unknown)."""
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
            trust = conn.execute(
                contribution_clients.update()
                .where(cl.id == client_id)
                .values(trust=moved)
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
    """A result being verified: its row, client, status and vectors."""

    id: int
    client_id: str
    status: str
    vectors: npt.NDArray[np.float32]
    #: The client's trust when the result was recorded (this request's result only).
    trust: float = 0.0


def _task_input(chunk: Sequence[tuple[str, str]]) -> dict[str, Any]:
    texts = [text for _, text in chunk]
    return {
        "doc_ids": [doc_id for doc_id, _ in chunk],
        "input": {"texts": texts},
        "input_digest": input_digest(texts),
    }


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
