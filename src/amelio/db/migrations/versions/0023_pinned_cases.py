"""Pinned cases: answers that must keep passing when a skill changes.

A new table (``amelio.assistant.cases``); nothing existing changes. A 👍 pins the
answer for its skill (``pin_on_thumbs_up``), a Fix It pins the message with its
correction, and a person pins or unpins by hand; every benchmark of a proposal
re-answers the skill's pinned cases with both versions.

Revision ID: 0023_pinned_cases
Revises: 0022_signal_viewers
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

Timestamp = sa.DateTime(timezone=True)

revision = "0023_pinned_cases"
down_revision = "0022_signal_viewers"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pinned_cases",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("project_id", sa.Integer, nullable=False),
        sa.Column("skill", sa.String(100), nullable=False),
        sa.Column("interaction_id", sa.Integer, nullable=False),
        sa.Column("source", sa.String(10), nullable=False),
        sa.Column("correction", sa.Text, nullable=True),
        sa.Column("note", sa.Text, nullable=True),
        sa.Column("author", sa.String(200), nullable=True),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("unpinned_at", Timestamp, nullable=True),
        sa.Column("unpinned_by", sa.String(200), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_pinned_cases"),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name="fk_pinned_cases_project_id_projects",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["interaction_id"],
            ["interactions.id"],
            name="fk_pinned_cases_interaction_id_interactions",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("interaction_id", name="uq_pinned_cases_interaction_id"),
        sa.CheckConstraint(
            "source IN ('manual', 'thumbs_up', 'fixit')", name="ck_pinned_cases_source"
        ),
    )
    op.create_index("ix_pinned_cases_project_skill", "pinned_cases", ["project_id", "skill"])


def downgrade() -> None:
    op.drop_index("ix_pinned_cases_project_skill", table_name="pinned_cases")
    op.drop_table("pinned_cases")
