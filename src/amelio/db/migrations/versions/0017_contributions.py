"""Idle compute lent by browsers (MartyContributionV1): clients, tasks, leases, results.

New tables only (``amelio.contributions``); nothing existing changes.

Revision ID: 0017_contributions
Revises: 0016_scheduled_jobs
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017_contributions"
down_revision = "0016_scheduled_jobs"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "contribution_clients",
        sa.Column("id", sa.String(26), nullable=False),
        sa.Column("tier", sa.String(10), nullable=False),
        sa.Column("trust", sa.Float, nullable=False),
        sa.Column("created_ms", sa.BigInteger, nullable=False),
        sa.Column("last_seen_ms", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_contribution_clients"),
    )
    op.create_table(
        "contribution_tasks",
        sa.Column("id", sa.String(26), nullable=False),
        sa.Column("task_type", sa.String(32), nullable=False),
        sa.Column("purpose", sa.String(32), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("doc_ids", sa.JSON, nullable=False),
        sa.Column("input_digest", sa.String(71), nullable=False),
        sa.Column("input", sa.JSON, nullable=False),
        sa.Column("state", sa.String(10), nullable=False),
        sa.Column("spot_checks", sa.Integer, nullable=False),
        sa.Column("disagreements", sa.Integer, nullable=False),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("created_ms", sa.BigInteger, nullable=False),
        sa.Column("accepted_ms", sa.BigInteger, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_contribution_tasks"),
        sa.CheckConstraint(
            "state IN ('open', 'accepted', 'cancelled')", name="ck_contribution_tasks_state"
        ),
    )
    op.create_index("ix_contribution_tasks_state", "contribution_tasks", ["state", "model"])
    op.create_table(
        "contribution_task_docs",
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("doc_id", sa.String(256), nullable=False),
        sa.Column("task_id", sa.String(26), nullable=False),
        sa.PrimaryKeyConstraint("model", "doc_id", name="pk_contribution_task_docs"),
        sa.ForeignKeyConstraint(
            ["task_id"],
            ["contribution_tasks.id"],
            name="fk_contribution_task_docs_task_id_contribution_tasks",
            ondelete="CASCADE",
        ),
    )
    op.create_index("ix_contribution_task_docs_task_id", "contribution_task_docs", ["task_id"])
    op.create_table(
        "contribution_leases",
        sa.Column("id", sa.String(26), nullable=False),
        sa.Column("task_id", sa.String(26), nullable=False),
        sa.Column("client_id", sa.String(26), nullable=False),
        sa.Column("leased_ms", sa.BigInteger, nullable=False),
        sa.Column("expires_ms", sa.BigInteger, nullable=False),
        sa.Column("state", sa.String(10), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_contribution_leases"),
        sa.ForeignKeyConstraint(
            ["task_id"],
            ["contribution_tasks.id"],
            name="fk_contribution_leases_task_id_contribution_tasks",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["client_id"],
            ["contribution_clients.id"],
            name="fk_contribution_leases_client_id_contribution_clients",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("task_id", "client_id", name="uq_contribution_leases_task_client"),
        sa.CheckConstraint("state IN ('leased', 'submitted')", name="ck_contribution_leases_state"),
    )
    op.create_index("ix_contribution_leases_client_id", "contribution_leases", ["client_id"])
    op.create_table(
        "contribution_results",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("task_id", sa.String(26), nullable=False),
        sa.Column("client_id", sa.String(26), nullable=False),
        sa.Column("vectors", sa.LargeBinary, nullable=False),
        sa.Column("status", sa.String(10), nullable=False),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("compute_ms", sa.Float, nullable=False),
        sa.Column("received_ms", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_contribution_results"),
        sa.ForeignKeyConstraint(
            ["task_id"],
            ["contribution_tasks.id"],
            name="fk_contribution_results_task_id_contribution_tasks",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["client_id"],
            ["contribution_clients.id"],
            name="fk_contribution_results_client_id_contribution_clients",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("task_id", "client_id", name="uq_contribution_results_task_client"),
        sa.CheckConstraint(
            "status IN ('pending', 'accepted', 'rejected', 'cancelled')",
            name="ck_contribution_results_status",
        ),
    )
    op.create_index(
        "ix_contribution_results_client_time", "contribution_results", ["client_id", "received_ms"]
    )


def downgrade() -> None:
    op.drop_index("ix_contribution_results_client_time", table_name="contribution_results")
    op.drop_table("contribution_results")
    op.drop_index("ix_contribution_leases_client_id", table_name="contribution_leases")
    op.drop_table("contribution_leases")
    op.drop_index("ix_contribution_task_docs_task_id", table_name="contribution_task_docs")
    op.drop_table("contribution_task_docs")
    op.drop_index("ix_contribution_tasks_state", table_name="contribution_tasks")
    op.drop_table("contribution_tasks")
    op.drop_table("contribution_clients")
