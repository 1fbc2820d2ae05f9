"""Findings: failures grouped into named problems that keep their id.

Two new tables (``amelio.improve.findings``); nothing existing changes. A finding
holds its title, the skills it touches, its centroid (the mean embedding of its
evidence, so new evidence is matched to it run after run), its status and the
proposals linked to it; ``finding_evidence`` holds one row per piece of
evidence (a 👎 or Fix It, an interaction that failed a rule), each in at most one
finding of its project.

Revision ID: 0025_findings
Revises: 0024_learning_review
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

Timestamp = sa.DateTime(timezone=True)

revision = "0025_findings"
down_revision = "0024_learning_review"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "findings",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("project_id", sa.Integer, nullable=False),
        sa.Column("kind", sa.String(10), nullable=False),
        sa.Column("title", sa.Text, nullable=False),
        sa.Column("terms", sa.JSON, nullable=False),
        sa.Column("skills", sa.JSON, nullable=False),
        sa.Column("centroid", sa.LargeBinary, nullable=True),
        sa.Column("evidence_count", sa.Integer, nullable=False),
        sa.Column("share", sa.Float, nullable=False),
        sa.Column("status", sa.String(10), nullable=False),
        sa.Column("proposal_ids", sa.JSON, nullable=False),
        sa.Column("fix", sa.JSON, nullable=True),
        sa.Column("first_seen", Timestamp, nullable=False),
        sa.Column("last_seen", Timestamp, nullable=False),
        sa.Column("closed_at", Timestamp, nullable=True),
        sa.Column("closed_by", sa.String(200), nullable=True),
        sa.Column("close_reason", sa.Text, nullable=True),
        sa.Column("reopened_at", Timestamp, nullable=True),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("updated_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_findings"),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name="fk_findings_project_id_projects",
            ondelete="CASCADE",
        ),
        sa.CheckConstraint("kind IN ('assistant', 'search')", name="ck_findings_kind"),
        sa.CheckConstraint(
            "status IN ('open', 'fixing', 'closed', 'reopened')", name="ck_findings_status"
        ),
    )
    op.create_index("ix_findings_project_id_status", "findings", ["project_id", "status"])
    op.create_table(
        "finding_evidence",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("finding_id", sa.Integer, nullable=False),
        sa.Column("project_id", sa.Integer, nullable=False),
        sa.Column("ref", sa.String(100), nullable=False),
        sa.Column("skill", sa.String(100), nullable=True),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("seen_at", Timestamp, nullable=False),
        sa.Column("added_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_finding_evidence"),
        sa.ForeignKeyConstraint(
            ["finding_id"],
            ["findings.id"],
            name="fk_finding_evidence_finding_id_findings",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name="fk_finding_evidence_project_id_projects",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("project_id", "ref", name="uq_finding_evidence_project_ref"),
    )
    op.create_index("ix_finding_evidence_finding_id", "finding_evidence", ["finding_id"])


def downgrade() -> None:
    op.drop_index("ix_finding_evidence_finding_id", table_name="finding_evidence")
    op.drop_table("finding_evidence")
    op.drop_index("ix_findings_project_id_status", table_name="findings")
    op.drop_table("findings")
