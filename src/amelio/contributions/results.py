"""Recording a browser's result: its lease checked, its shape checked against the
task, and the result stored as pending, with the task's other results read back for
verification (:mod:`~amelio.contributions.verdicts`).

The schema (:mod:`~amelio.contributions.schema`) checked what a result says about
itself; here is what needs the task: the lease is this client's and live, the
digest, task type, purpose and model are the task's, and there is one unit vector of
the model's dimensions for each text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from amelio.contributions.leases import contributor
from amelio.contributions.policy import DIMENSIONS
from amelio.contributions.schema import vectors_from_bytes
from amelio.contributions.trust import Contributor
from amelio.contributions.verdicts import Pending
from amelio.db.engine import insert_ignore
from amelio.db.schema import (
    contribution_clients,
    contribution_leases,
    contribution_results,
    contribution_tasks,
)
from amelio.errors import Conflict, InvalidInput

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from amelio.contributions.schema import Contribution

__all__ = ["Received", "record", "results_of"]


@dataclass(frozen=True)
class Received:
    """A result this client sent before: its task, its status, the client's trust."""

    task_id: str
    status: str
    trust: float


def record(
    conn: sa.Connection,
    c: Contribution,
    client_id: str,
    vectors: npt.NDArray[np.float32],
    now: int,
    *,
    lease_seconds: int,
) -> Received | tuple[sa.Row[Any], Pending, list[Pending]]:
    """Check the lease and the result (``vectors``: its decoded vectors) against the
    task, store the result as pending; the task, this result and the task's other
    pending or accepted results (or, for a result already received, what became of
    it). Six statements: every one of them does something a submit needs (this is
    the server's hottest path). ``lease_seconds`` is how long leases last (what an
    expired one's answer says)."""
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
        sa.select(r.status).where(r.task_id == task.id, r.client_id == client_id).scalar_subquery()
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
        return Received(task.id, str(known.earlier), trust)
    if found.lease_state != "leased" or found.lease_expires_ms <= now:
        raise Conflict(
            f"The lease expired {(now - found.lease_expires_ms) / 1000:.0f} s "
            f"ago (leases last {lease_seconds} s): "
            "the task was given to another client; ask for new tasks.",
            leaseId=lease_id,
        )
    _check_result(c, task, vectors)
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
        return Received(task.id, "pending", trust)
    conn.execute(contribution_leases.update().where(le.id == lease_id).values(state="submitted"))
    conn.execute(
        contribution_clients.update()
        .where(cl.id == client_id)
        .values(last_seen_ms=now, tier=c["deviceTier"])
    )
    others = results_of(conn, task.id, task.model, r.client_id != client_id)
    who = (
        contributor(known)
        if known is not None
        else Contributor(client_id, trust, network="", key_id=None, created_ms=0, checked=0)
    )
    return task, Pending(int(inserted[0]), who, "pending", vectors), others


def results_of(
    conn: sa.Connection, task_id: str, model: str, *where: sa.ColumnElement[bool]
) -> list[Pending]:
    """The task's pending and accepted results (those ``where`` also selects), oldest
    first, each with its client and its vectors of ``model``."""
    r, cl = contribution_results.c, contribution_clients.c
    dimensions = DIMENSIONS[model]
    rows = conn.execute(
        sa.select(r.id.label("result_id"), r.status, r.vectors)
        .add_columns(cl.id, cl.trust, cl.network, cl.key_id, cl.created_ms, cl.checked)
        .join(contribution_clients, cl.id == r.client_id)
        .where(r.task_id == task_id, r.status.in_(("pending", "accepted")), *where)
        .order_by(r.id)
    )
    return [
        Pending(
            row.result_id,
            contributor(row),
            row.status,
            vectors_from_bytes(row.vectors, dimensions),
        )
        for row in rows
    ]


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
