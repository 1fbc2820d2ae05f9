"""Learnings (reflect loop) and the learnings.md mirror state.

Revision ID: 0002_learnings
Revises: 0001_foundation
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_learnings"
down_revision = "0001_foundation"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "learnings",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("project_id", sa.Integer, nullable=False),
        sa.Column("skill", sa.String(100), nullable=True),
        sa.Column("rule", sa.Text, nullable=False),
        sa.Column("rule_key", sa.String(64), nullable=False),
        sa.Column("source", sa.String(20), nullable=False),
        sa.Column("status", sa.String(10), nullable=False),
        sa.Column("helpful", sa.Integer, nullable=False),
        sa.Column("harmful", sa.Integer, nullable=False),
        sa.Column("occurrences", sa.Integer, nullable=False),
        sa.Column("retired_reason", sa.Text, nullable=True),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("last_seen_at", Timestamp, nullable=False),
        sa.Column("updated_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_learnings"),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name="fk_learnings_project_id_projects",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("project_id", "rule_key", name="uq_learnings_project_rule"),
        sa.CheckConstraint(
            "source IN ('fixit', 'negative', 'manual', 'sage')", name="ck_learnings_source"
        ),
        sa.CheckConstraint("status IN ('active', 'retired')", name="ck_learnings_status"),
    )
    op.create_table(
        "learning_files",
        sa.Column("project_id", sa.Integer, nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("written_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("project_id", name="pk_learning_files"),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name="fk_learning_files_project_id_projects",
            ondelete="CASCADE",
        ),
    )
