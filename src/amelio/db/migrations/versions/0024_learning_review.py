"""Learnings a person can trust: review states, provenance and supersession.

A learning may now wait as a ``candidate`` (``learnings_review = "queue"``, or a
rule that looks like a secret or a prompt injection), and an active one that a
newer correction contradicts becomes ``superseded`` once a person approves the
newer one. Each learning keeps its sources (feedback and interaction ids, author,
time), who reviewed it and when, why it waits, and a pending retire proposal.

Existing learnings keep their state; their sources start empty (what taught them
was not recorded before).

Revision ID: 0024_learning_review
Revises: 0023_pinned_cases
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

Timestamp = sa.DateTime(timezone=True)

revision = "0024_learning_review"
down_revision = "0023_pinned_cases"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("learnings") as batch:
        batch.add_column(sa.Column("sources", sa.JSON, nullable=False, server_default="[]"))
        batch.add_column(sa.Column("author", sa.String(200), nullable=True))
        batch.add_column(sa.Column("reviewed_by", sa.String(200), nullable=True))
        batch.add_column(sa.Column("reviewed_at", Timestamp, nullable=True))
        batch.add_column(sa.Column("held_reason", sa.Text, nullable=True))
        batch.add_column(sa.Column("supersedes_id", sa.Integer, nullable=True))
        batch.add_column(sa.Column("superseded_by", sa.Integer, nullable=True))
        batch.add_column(sa.Column("retire_proposal", sa.JSON, nullable=True))
        batch.add_column(sa.Column("embedding", sa.LargeBinary, nullable=True))
        batch.drop_constraint("ck_learnings_status", type_="check")
        batch.create_check_constraint(
            "status", "status IN ('candidate', 'active', 'superseded', 'retired')"
        )
    op.create_index(
        "ix_learnings_project_id_status", "learnings", ["project_id", "status"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_learnings_project_id_status", table_name="learnings")
    op.execute("UPDATE learnings SET status = 'retired' WHERE status <> 'active'")
    with op.batch_alter_table("learnings") as batch:
        batch.drop_constraint("ck_learnings_status", type_="check")
        batch.create_check_constraint("status", "status IN ('active', 'retired')")
        for column in (
            "embedding",
            "retire_proposal",
            "superseded_by",
            "supersedes_id",
            "held_reason",
            "reviewed_at",
            "reviewed_by",
            "author",
            "sources",
        ):
            batch.drop_column(column)
