"""Leases, verification and trust: how browsers' idle compute becomes search vectors.

Browsers running ``amelio.js`` may embed search documents the server has not
embedded yet, so the server need not spend its own CPU on them. Nothing a browser
sends is believed on its word. :class:`Contributions` is the service the routes
call; the work is in the modules beside it:

* **Tasks and leases** (:mod:`~amelio.contributions.leases`): tasks are made lazily,
  when a client asks and too few open tasks exist, each document claimed for one
  open task. Leases last ``contributions_lease_seconds``. A client never gets a task
  twice (``(task, client)`` is unique); a task is leased to two clients at a time
  until two results agree, never to two related ones
  (:mod:`~amelio.contributions.trust`: one network, or minted together by one key);
  an expired lease is answered 409 and its task goes to another. So that no group of
  identities can hold the queue, one client holds at most
  :data:`~amelio.contributions.leases.MAX_TASKS_PER_LEASE` live leases and one
  network ``contributions_network_tasks``.
* **Recording** (:mod:`~amelio.contributions.results`): a result is checked
  against its lease and task and stored as pending.
* **Verification and settling** (:mod:`~amelio.contributions.verdicts`): a result
  is accepted when an independent client's result agrees, or when the server's own
  embedding does (a spot-check); the task moves ``open → accepted`` once, and its
  vectors go into the store.
* **Healing**: a submit records its result in one transaction and settles it in a
  second, after verifying (which may embed). Results a failed submit left pending
  are verified and settled again when their client sends them again, or when a
  lease finds their task stuck (:meth:`Contributions._heal`); so is a result that
  waited a lease's length for an independent second one (the server checks it).
* **Trust** starts at 0.5, rises a little with each accepted result and drops
  sharply when a spot-check proves a result wrong; a client under
  :data:`~amelio.contributions.trust.TRUST_FLOOR` gets no tasks, and fewer tasks per
  lease as trust falls. A new client is on probation until
  ``contributions_probation`` of its results passed the server's own check: peers'
  agreement does not end it.
* **Budgets**: each client's CPU-seconds over the last hour stay within its tier's
  :data:`CPU_SECONDS_PER_HOUR`, counted as the server's estimated cost of the tasks
  leased to it (done or not), or the client's own count when that is larger: what
  a client reports can raise the count, never lower it. ``DEGRADED`` gets nothing.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from prometheus_client import Counter
from pydantic import ValidationError

from amelio.contributions.leases import (
    CLIENTS_PER_TASK,
    MAX_TASKS_PER_LEASE,
    RETRY_MS,
    Leased,
    find_or_mint_client,
    lease_tasks,
    refusal,
    tasks_for,
    used_last_hour,
)
from amelio.contributions.policy import unavailable
from amelio.contributions.results import Received, record, results_of
from amelio.contributions.schema import (
    CPU_SECONDS_PER_HOUR,
    HOUR_MS,
    TASK_TYPES,
    Contribution,
    contribution_adapter,
    decode_vectors,
)
from amelio.contributions.stats import contribution_stats
from amelio.contributions.tokens import client_tokens
from amelio.contributions.verdicts import WAITING, Verifier, settle
from amelio.db.engine import reading, transaction
from amelio.db.schema import contribution_clients, contribution_results, contribution_tasks
from amelio.embeddings import Embedder, embed_matrix, load_embedder, search_embedder
from amelio.errors import Conflict, InvalidInput
from amelio.ops.metrics import REGISTRY
from amelio.privacy.signing import Signer, signer

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from amelio.search.store import DocumentStore
    from amelio.workspace.folder import Workspace

__all__ = ["Contributions"]

log = logging.getLogger("amelio.contributions")

RESULTS = Counter(
    "amelio_contributions_results_total",
    "Contributed results by outcome (pending, accepted, rejected, cancelled, duplicate).",
    ["status"],
    registry=REGISTRY,
)


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
        self._network_signer: Signer | None = None

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

    def _signer(self) -> Signer:
        """The workspace's signer, which keeps new clients' networks as digests."""
        if self._network_signer is None:
            self._network_signer = signer(self.settings)
        return self._network_signer

    def _verifier(self) -> Verifier:
        """What decides results, as the settings are now."""
        return Verifier(self.settings, self._rng, self._embed)

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
            "retryAfterMs": RETRY_MS["off"],
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
                    used_ms, _ = used_last_hour(conn, client_id, now)
                response["trust"] = None if trust is None else round(float(trust), 4)
                response["budget"]["usedLastHour"] = round(
                    max(used_ms / 1000, reported_cpu_s or 0.0), 3
                )
            response["reason"] = off
            return response
        leased = Leased([], [], [], None, 0.0)
        with transaction(self.workspace.engine) as conn:
            me = find_or_mint_client(
                conn, client_id, tier, now, address=address, key_id=key_id, signer=self._signer
            )
            response["clientId"] = me.id
            response["clientToken"] = self.tokens.issue(me.id)
            response["trust"] = round(me.trust, 4)
            used_ms, oldest_ms = used_last_hour(conn, me.id, now)
            used_s = max(used_ms / 1000, reported_cpu_s or 0.0)
            reason, retry = refusal(tier, purposes, types, me.trust, budget_s)
            if reason is None and used_s >= budget_s:
                reason = (
                    f"The hourly CPU budget of tier {tier} ({budget_s} s) is spent "
                    f"({used_s:.1f} s in the last hour)."
                )
                retry = max((oldest_ms or now) + HOUR_MS - now, RETRY_MS["busy"])
            if reason is None:
                wanted = min(max_tasks, tasks_for(me.trust))
                leased = lease_tasks(
                    conn, self.settings, self.store, me, wanted, (budget_s - used_s) * 1000, now
                )
                if leased.tasks:
                    retry = 0
                else:
                    reason = leased.held or (
                        "Nothing to embed now: every search document has a vector, "
                        "or every open task already has enough clients."
                    )
                    retry = RETRY_MS["idle"]
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
            recorded = record(
                conn,
                c,
                client_id,
                sent,
                now,
                lease_seconds=self.settings.contributions_lease_seconds,
            )
        if isinstance(recorded, Received):
            return self._again(recorded, client_id, now)
        task, mine, others = recorded
        outcome = self._verifier().verify(task, mine, others)
        if not outcome.verdicts and not outcome.sampled:
            # The first result of a task: nothing to settle, so no second transaction
            # (a second client's result settles both, under the task's lock).
            status, reason, trust = "pending", WAITING, mine.who.trust
        else:
            owners = {p.id: p.client_id for p in (mine, *others)}
            with transaction(self.workspace.engine) as conn:
                status, reason, trust = settle(
                    conn, self.store, task.id, mine, owners, outcome, now
                )
        RESULTS.labels(status).inc()
        return _answer(status, reason, trust)

    def _again(self, earlier: Received, client_id: str, now: int) -> dict[str, Any]:
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
        row lock (:func:`~amelio.contributions.verdicts.settle`). ``lonely``: the task's
        one pending result waited for an independent second one in vain
        (:func:`~amelio.contributions.leases.open_queue`), so the server checks it."""
        t = contribution_tasks.c
        with reading(self.workspace.engine) as conn:
            task = conn.execute(sa.select(contribution_tasks).where(t.id == task_id)).one()
            results = results_of(conn, task_id, task.model)
        pending = [p for p in results if p.status == "pending"]
        if task.state == "open":  # one round judges them all; else waiting for a second
            last = pending[-1] if pending else None
            due = len(pending) >= CLIENTS_PER_TASK or lonely
            rounds = [(last, [p for p in results if p is not last])] if last and due else []
        else:  # late results, or a cancelled task's: each judged on its own
            accepted = [p for p in results if p.status == "accepted"]
            rounds = [(p, accepted) for p in pending]
        owners = {p.id: p.client_id for p in results}
        verifier = self._verifier()
        for mine, others in rounds:
            outcome = verifier.verify(task, mine, others, lonely=lonely)
            if outcome.verdicts or outcome.sampled:
                with transaction(self.workspace.engine) as conn:
                    settle(conn, self.store, task.id, mine, owners, outcome, now)
        if rounds:
            log.info("contributions: task %s's pending results were settled again", task_id)

    # -- GET /v1/contributions/stats ------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Clients, tasks and results by state, disagreements, spot-checks, CPU given."""
        return contribution_stats(self.workspace, now_ms=self._now_ms())


def _answer(status: str, reason: str, trust: float) -> dict[str, Any]:
    """A verdict as the client gets it: a cancelled task's results are "rejected" (the
    protocol's four statuses); the reason says why, and its trust did not move."""
    return {
        "status": "rejected" if status == "cancelled" else status,
        "reason": reason,
        "trust": round(trust, 4),
    }
