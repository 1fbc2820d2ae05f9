"""``GET /v1/contributions/stats``: what browsers have given and how it was checked."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from amelio.contributions.trust import TRUST_FLOOR
from amelio.db.engine import reading
from amelio.db.schema import (
    contribution_clients,
    contribution_leases,
    contribution_results,
    contribution_tasks,
)

if TYPE_CHECKING:
    from amelio.workspace.folder import Workspace

__all__ = ["contribution_stats"]


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


def _counts(conn: sa.Connection, query: sa.Select[Any]) -> dict[str, int]:
    """``{key: count}`` from a query of (key, count) rows."""
    return {str(key): int(n) for key, n in conn.execute(query)}
