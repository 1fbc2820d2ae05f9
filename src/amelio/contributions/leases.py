"""Clients and the task queue: who gets which task, and when a task is made.

* **Clients** are found by their token's id, or minted with where and by whom they
  were minted (:mod:`~amelio.contributions.trust`); a known client is refused
  tasks it cannot run, has not consented to, cannot afford in its tier's budget,
  or is no longer trusted with (:func:`refusal`).
* **Tasks** are made lazily, when a client asks and too few open tasks exist: a
  batch of ``contributions_batch`` documents with no vector for the search model,
  each claimed for one open task (``contribution_task_docs``' primary key, so two
  processes leasing at once never task a document twice). A task's input is the
  exact text the server would embed (:meth:`DocumentStore.missing_vectors`) and
  its SHA-256 digest, and its cost is the server's estimate of the CPU it takes a
  browser (:func:`~amelio.contributions.policy.task_cost_ms`).
* **Leases** go to the tasks a client may take (:func:`open_queue`): never one it
  leased before, never one that :data:`CLIENTS_PER_TASK` clients hold, never one a
  related client holds; a task whose documents changed meanwhile is cancelled on
  the way (:func:`cancel`).

Everything here runs inside the caller's transaction.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from prometheus_client import Counter
from ulid import ULID

from amelio.contributions.policy import DIMENSIONS, task_cost_ms
from amelio.contributions.schema import HOUR_MS, PURPOSES, TASK_TYPES, input_digest
from amelio.contributions.trust import (
    INITIAL_TRUST,
    TRUST_FLOOR,
    Contributor,
    network_id,
    related,
)
from amelio.db.engine import insert_ignore
from amelio.db.schema import (
    contribution_clients,
    contribution_leases,
    contribution_results,
    contribution_task_docs,
    contribution_tasks,
)
from amelio.ops.metrics import REGISTRY

if TYPE_CHECKING:
    from amelio.privacy.signing import Signer
    from amelio.search.store import DocumentStore
    from amelio.workspace.config import Settings

__all__ = [
    "CLIENTS_PER_TASK",
    "MAX_OPEN_TASKS",
    "MAX_TASKS_PER_LEASE",
    "RETRY_MS",
    "TASKS",
    "Leased",
    "Queue",
    "cancel",
    "contributor",
    "create_tasks",
    "find_or_mint_client",
    "is_current",
    "lease_tasks",
    "open_queue",
    "refusal",
    "tasks_for",
    "used_last_hour",
]

#: The most tasks one lease may hold (at trust 1; fewer as trust falls), and the most
#: live leases one client may hold at once.
MAX_TASKS_PER_LEASE = 8
#: Distinct clients a task is leased to at once (two agreeing results accept it).
CLIENTS_PER_TASK = 2
#: Open tasks kept at most: the work in flight, and the claims a new batch skips.
MAX_OPEN_TASKS = 256
#: When to ask again (``retryAfterMs``), by why no task was given.
RETRY_MS = {"off": 600_000, "idle": 60_000, "refused": 600_000, "trust": 3_600_000, "busy": 5_000}
_DOC_ID_CHARS = 256
#: A submit settles its result within seconds of recording it; results pending longer
#: than this beside enough others to settle were left by a submit that failed between
#: its two transactions (:meth:`Contributions._heal`).
_SETTLE_GRACE_MS = 60_000
_STALE = "its documents changed, were deleted or got vectors since the task was made"

TASKS = Counter(
    "amelio_contributions_tasks_total",
    "Contribution tasks by event (created, accepted, cancelled).",
    ["event"],
    registry=REGISTRY,
)


# -- clients ----------------------------------------------------------------------------


def refusal(
    tier: str, purposes: Sequence[str], types: Sequence[str], trust: float, budget_s: int
) -> tuple[str | None, int]:
    """Why a known client gets no task whatever the tasks are, and when to retry."""
    if budget_s <= 0:
        return f"Tier {tier} devices do not lend compute.", RETRY_MS["refused"]
    if not set(PURPOSES) & set(purposes):
        return (
            f"No task has a purpose this client consented to; tasks are for {', '.join(PURPOSES)}.",
            RETRY_MS["refused"],
        )
    if not set(TASK_TYPES) & set(types):
        return (
            f"No task has a type this client runs; tasks are {', '.join(TASK_TYPES)}.",
            RETRY_MS["refused"],
        )
    if trust < TRUST_FLOOR:
        return (
            f"This client's trust ({trust:.2f}) is under {TRUST_FLOOR}: results "
            "of it were proven wrong.",
            RETRY_MS["trust"],
        )
    return None, 0


def find_or_mint_client(
    conn: sa.Connection,
    client_id: str | None,
    tier: str,
    now: int,
    *,
    address: str | None,
    key_id: int | None,
    signer: Callable[[], Signer],
) -> Contributor:
    """The client, recording its tier and when it was seen; a new client when
    ``client_id`` is None (or unknown: a genuine token whose row a restore dropped
    starts afresh), minted from ``address``'s network (kept as a digest by
    ``signer()``'s signer) by ``key_id``."""
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
            return contributor(row)
    client_id = client_id or str(ULID())
    made = Contributor(
        id=client_id,
        trust=INITIAL_TRUST,
        network=network_id(address, signer()),
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
        return find_or_mint_client(
            conn, client_id, tier, now, address=address, key_id=key_id, signer=signer
        )
    return made


def used_last_hour(conn: sa.Connection, client_id: str, now: int) -> tuple[float, int | None]:
    """The estimated CPU milliseconds of the tasks leased to the client over the last
    hour, and when the oldest of them was leased."""
    le, t = contribution_leases.c, contribution_tasks.c
    row = conn.execute(
        sa.select(sa.func.coalesce(sa.func.sum(t.cost_ms), 0.0), sa.func.min(le.leased_ms))
        .join(contribution_tasks, t.id == le.task_id)
        .where(le.client_id == client_id, le.leased_ms > now - HOUR_MS)
    ).one()
    return float(row[0]), None if row[1] is None else int(row[1])


def tasks_for(trust: float) -> int:
    """How many tasks one lease may hold at ``trust``: fewer as trust falls."""
    return max(1, min(MAX_TASKS_PER_LEASE, math.floor(MAX_TASKS_PER_LEASE * trust)))


def contributor(row: Any) -> Contributor:
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


# -- tasks and leases -------------------------------------------------------------------


@dataclass(frozen=True)
class Queue:
    """The open tasks as one client sees them (:func:`open_queue`)."""

    eligible: list[str]
    stuck: list[str]
    lonely: list[str]
    #: Live leases this client holds, and the clients of its network.
    held: int
    network_held: int


@dataclass(frozen=True)
class Leased:
    """What one lease gave: the tasks, the open tasks to settle after it, why no task
    fitted the client's or its network's cap (None: none was reached), and the
    estimated CPU milliseconds of the tasks given."""

    tasks: list[dict[str, Any]]
    stuck: list[str]
    lonely: list[str]
    held: str | None
    cost_ms: float


def lease_tasks(
    conn: sa.Connection,
    settings: Settings,
    store: DocumentStore,
    me: Contributor,
    wanted: int,
    budget_ms: float,
    now: int,
) -> Leased:
    """Lease up to ``wanted`` tasks to the client, as long as they fit its caps and
    ``budget_ms`` is not spent, making new ones when too few are open; a task whose
    documents changed meanwhile is cancelled on the way (and its documents tasked
    again, with their new texts). Also the open tasks to settle once this
    transaction is over (:func:`open_queue`)."""
    expires = now + settings.contributions_lease_seconds * 1000
    queue = open_queue(conn, settings, me, now)
    room = min(
        wanted,
        MAX_TASKS_PER_LEASE - queue.held,
        settings.contributions_network_tasks - queue.network_held,
    )
    if room <= 0:
        held = (
            f"This client holds {queue.held} leased tasks, the most one client may."
            if queue.held >= MAX_TASKS_PER_LEASE
            else f"Clients of this network hold {queue.network_held} leased tasks, "
            "the most one network may (contributions_network_tasks)."
        )
        return Leased([], queue.stuck, queue.lonely, held, 0.0)
    leased: list[dict[str, Any]] = []
    cost_ms = 0.0
    for round_ in range(2):  # a second round when stale tasks were cancelled
        if round_:
            queue = open_queue(conn, settings, me, now)
        if len(queue.eligible) < room - len(leased):
            create_tasks(conn, settings, store, room - len(leased) - len(queue.eligible), now)
            queue = open_queue(conn, settings, me, now)
        stale = False
        for task_id in queue.eligible:
            if len(leased) == room or cost_ms >= budget_ms:
                break
            task = conn.execute(
                sa.select(contribution_tasks).where(contribution_tasks.c.id == task_id)
            ).one()
            if not is_current(store, task):
                cancel(conn, task.id)
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
    return Leased(leased, queue.stuck, queue.lonely, None, cost_ms)


def open_queue(conn: sa.Connection, settings: Settings, me: Contributor, now: int) -> Queue:
    """The open tasks of the search model as ``me`` sees them, in one read of their
    leases (with each lease's client and result).

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
    is_open = sa.and_(t.state == "open", t.model == settings.search_embedding_model)
    tasks = conn.scalars(sa.select(t.id).where(is_open).order_by(t.created_ms, t.id)).all()
    if not tasks:
        return Queue([], [], [], 0, 0)
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
    window = settings.contributions_related_seconds * 1000
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
            if related(me, contributor(row), window):
                barred.add(row.task_id)
    eligible = [
        task_id
        for task_id in tasks
        if task_id not in mine
        and task_id not in barred
        and holders.get(task_id, 0) < CLIENTS_PER_TASK
    ]
    eligible.sort(key=lambda task_id: -len(pending.get(task_id, ())))  # stable
    lonely_before = now - settings.contributions_lease_seconds * 1000 - _SETTLE_GRACE_MS
    stuck, lonely = [], []
    for task_id, received in pending.items():
        if len(received) >= CLIENTS_PER_TASK and max(received) < now - _SETTLE_GRACE_MS:
            stuck.append(task_id)
        elif len(received) == 1 and not live.get(task_id) and received[0] < lonely_before:
            lonely.append(task_id)
    return Queue(eligible, stuck, lonely, held, network_held)


def create_tasks(
    conn: sa.Connection, settings: Settings, store: DocumentStore, count: int, now: int
) -> None:
    """Up to ``count`` new tasks of documents that have no vector for the search model
    and are in no open task; a document another process claims meanwhile is left to
    its task."""
    t, d = contribution_tasks.c, contribution_task_docs.c
    model = settings.search_embedding_model
    open_tasks = conn.scalar(sa.select(sa.func.count()).where(t.state == "open")) or 0
    count = min(count, MAX_OPEN_TASKS - open_tasks)
    if count <= 0:
        return
    batch = settings.contributions_batch
    claimed = set(conn.scalars(sa.select(d.doc_id).where(d.model == model)))
    candidates = [
        (doc_id, text)
        for doc_id, text in store.missing_vectors(model, limit=len(claimed) + count * batch)
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
                model=model,
                state="open",
                spot_checks=0,
                disagreements=0,
                created_ms=now,
                **_task_input(model, chunk),
            )
        )
        # One INSERT … ON CONFLICT DO NOTHING RETURNING for the whole chunk (not one a
        # document: that was most of a lease's cost): the claims it made are the
        # documents it returns; one another process holds is skipped, as before.
        claimed_now = set(
            insert_ignore(
                conn,
                contribution_task_docs,
                [{"model": model, "doc_id": doc_id, "task_id": task_id} for doc_id, _ in chunk],
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
                contribution_tasks.update().where(t.id == task_id).values(**_task_input(model, got))
            )
        TASKS.labels("created").inc()


def _task_input(model: str, chunk: Sequence[tuple[str, str]]) -> dict[str, Any]:
    texts = [text for _, text in chunk]
    return {
        "doc_ids": [doc_id for doc_id, _ in chunk],
        "input": {"texts": texts},
        "input_digest": input_digest(texts),
        "cost_ms": task_cost_ms(model, texts),
    }


def is_current(store: DocumentStore, task: sa.Row[Any]) -> bool:
    """Whether the task's texts are still its documents' (none changed, was deleted,
    or got a vector since the task was made)."""
    now = dict(store.missing_vectors(task.model, doc_ids=task.doc_ids))
    return bool([now.get(doc_id) for doc_id in task.doc_ids] == task.input["texts"])


def cancel(conn: sa.Connection, task_id: str) -> None:
    """Close an open task whose documents changed (:func:`is_current`) without writing
    anything, freeing its documents."""
    t, r = contribution_tasks.c, contribution_results.c
    done = conn.execute(
        contribution_tasks.update()
        .where(t.id == task_id, t.state == "open")
        .values(state="cancelled", reason=_STALE)
    ).rowcount
    if done:
        conn.execute(
            contribution_task_docs.delete().where(contribution_task_docs.c.task_id == task_id)
        )
        conn.execute(
            contribution_results.update()
            .where(r.task_id == task_id, r.status == "pending")
            .values(status="cancelled", reason=f"The task was cancelled: {_STALE}.")
        )
        TASKS.labels("cancelled").inc()
