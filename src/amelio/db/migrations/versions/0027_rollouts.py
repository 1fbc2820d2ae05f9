"""Canary rollouts of approved skill versions.

One row per rollout (``amelio.improve.rollouts``): the skill, the version it
replaces and the one it rolls out, the share of conversations on the new one,
its status, and the figures of its last check. Nothing existing changes.

Revision ID: 0027_rollouts
Revises: 0026_finding_fixes
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

Timestamp = sa.DateTime(timezone=True)

revision = "0027_rollouts"
down_revision = "0026_finding_fixes"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rollouts",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("project_id", sa.Integer, nullable=False),
        sa.Column("skill_id", sa.Integer, nullable=False),
        sa.Column("skill_name", sa.String(100), nullable=False),
        sa.Column("proposal_id", sa.Integer, nullable=True),
        sa.Column("from_version", sa.Integer, nullable=False),
        sa.Column("to_version", sa.Integer, nullable=False),
        sa.Column("percent", sa.Integer, nullable=False),
        sa.Column("status", sa.String(10), nullable=False),
        sa.Column("started_by", sa.String(200), nullable=False),
        sa.Column("started_at", Timestamp, nullable=False),
        sa.Column("stage_started_at", Timestamp, nullable=False),
        sa.Column("updated_at", Timestamp, nullable=False),
        sa.Column("ended_at", Timestamp, nullable=True),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("last_check", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("history", sa.JSON, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_rollouts"),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name="fk_rollouts_project_id_projects",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["skill_id"], ["skills.id"], name="fk_rollouts_skill_id_skills", ondelete="CASCADE"
        ),
        sa.CheckConstraint("percent BETWEEN 1 AND 100", name="ck_rollouts_percent"),
        sa.CheckConstraint(
            "status IN ('running', 'paused', 'aborted', 'done')", name="ck_rollouts_status"
        ),
    )
    op.create_index("ix_rollouts_skill_status", "rollouts", ["skill_id", "status"])


def downgrade() -> None:
    op.drop_index("ix_rollouts_skill_status", table_name="rollouts")
    op.drop_table("rollouts")
