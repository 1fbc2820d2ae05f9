"""A finding's status follows the proposals filed for its skills.

Kept apart from :mod:`amelio.improve.findings` because approving or rejecting a
proposal (:mod:`amelio.improve.proposals`) updates the findings at once, and
findings in turn file proposals: this module needs neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from amelio import db
from amelio.db.schema import findings, proposals, utcnow
from amelio.workspace.projects import DEFAULT_PROJECT, project_id

if TYPE_CHECKING:
    from amelio.workspace.folder import Workspace

__all__ = ["sync_with_proposals"]


def sync_with_proposals(ws: Workspace, *, project: str = DEFAULT_PROJECT) -> list[int]:
    """Link each finding that is not closed to the proposals for its skills filed
    since it was first seen, and set its status from them: ``fixing`` while one
    waits, ``closed`` once one is approved (after the finding last reopened), back
    to ``open`` when every linked one was rejected. Returns the findings closed."""
    closed: list[int] = []
    now = utcnow()
    with db.transaction(ws.engine) as conn:
        pid = project_id(conn, project)
        rows = conn.execute(
            sa.select(findings).where(findings.c.project_id == pid, findings.c.status != "closed")
        ).all()
        for row in rows:
            if not row.skills:
                continue
            linked = conn.execute(
                sa.select(
                    proposals.c.id,
                    proposals.c.status,
                    proposals.c.decided_at,
                    proposals.c.decided_by,
                )
                .where(
                    proposals.c.project_id == pid,
                    proposals.c.skill_name.in_(list(row.skills)),
                    sa.or_(
                        proposals.c.created_at >= row.first_seen,
                        proposals.c.id.in_(list(row.proposal_ids) or [-1]),
                    ),
                )
                .order_by(proposals.c.id)
            ).all()
            ids = sorted({*row.proposal_ids, *(p.id for p in linked)})
            since = row.reopened_at or row.first_seen
            fixed = [p for p in linked if p.status == "approved" and (p.decided_at or now) >= since]
            values: dict[str, Any] = {"proposal_ids": ids}
            if fixed:
                values |= {
                    "status": "closed",
                    "closed_at": now,
                    "closed_by": f"proposal #{fixed[-1].id}",
                    "close_reason": f"the fix was approved by {fixed[-1].decided_by}",
                }
                closed.append(int(row.id))
            elif any(p.status == "pending" for p in linked):
                values["status"] = "fixing"
            elif row.status == "fixing":
                values["status"] = "open"
            if values != {"proposal_ids": list(row.proposal_ids)}:
                conn.execute(
                    findings.update()
                    .where(findings.c.id == row.id)
                    .values(**values, updated_at=now)
                )
    return closed
