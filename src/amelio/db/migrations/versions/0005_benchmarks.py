"""A/B benchmarks of proposals, their scenarios, and the LLM call cache.

Revision ID: 0005_benchmarks
Revises: 0004_proposals
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_benchmarks"
down_revision = "0004_proposals"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "benchmark_runs",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("proposal_id", sa.Integer, nullable=False),
        sa.Column("status", sa.String(10), nullable=False),
        sa.Column("verdict", sa.String(10), nullable=True),
        sa.Column("improvement_pct", sa.Float, nullable=True),
        sa.Column("summary", sa.JSON, nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("finished_at", Timestamp, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_benchmark_runs"),
        sa.ForeignKeyConstraint(
            ["proposal_id"],
            ["proposals.id"],
            name="fk_benchmark_runs_proposal_id_proposals",
            ondelete="CASCADE",
        ),
    )
    op.create_index("ix_benchmark_runs_proposal_id", "benchmark_runs", ["proposal_id"])
    op.create_table(
        "benchmark_scenarios",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("run_id", sa.Integer, nullable=False),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("source", sa.String(10), nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("old_output", sa.Text, nullable=False),
        sa.Column("new_output", sa.Text, nullable=False),
        sa.Column("result", sa.JSON, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_benchmark_scenarios"),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["benchmark_runs.id"],
            name="fk_benchmark_scenarios_run_id_benchmark_runs",
            ondelete="CASCADE",
        ),
    )
    op.create_index("ix_benchmark_scenarios_run_id", "benchmark_scenarios", ["run_id"])
    op.create_table(
        "llm_cache",
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("response", sa.JSON, nullable=False),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_llm_cache"),
    )
