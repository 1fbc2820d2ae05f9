"""The schedule: one row per job that `amelio serve` runs on its own.

A new table (``amelio.ops.schedule``); nothing existing changes.

Revision ID: 0016_scheduled_jobs
Revises: 0015_telegram
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

Timestamp = sa.DateTime(timezone=True)

revision = "0016_scheduled_jobs"
down_revision = "0015_telegram"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "scheduled_jobs",
        sa.Column("name", sa.String(50), nullable=False),
        sa.Column("holder", sa.String(200), nullable=True),
        sa.Column("lease_expires_at", Timestamp, nullable=True),
        sa.Column("due_at", Timestamp, nullable=True),
        sa.Column("started_at", Timestamp, nullable=True),
        sa.Column("finished_at", Timestamp, nullable=True),
        sa.Column("outcome", sa.String(20), nullable=True),
        sa.Column("detail", sa.Text, nullable=True),
        sa.Column("runs", sa.Integer, nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_scheduled_jobs"),
        sa.CheckConstraint(
            "outcome IN ('running', 'ok', 'error')", name="ck_scheduled_jobs_outcome"
        ),
    )


def downgrade() -> None:
    op.drop_table("scheduled_jobs")
