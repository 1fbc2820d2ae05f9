"""Interactions, their eval results, and feedback on them.

Revision ID: 0003_interactions
Revises: 0002_learnings
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_interactions"
down_revision = "0002_learnings"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "interactions",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("project_id", sa.Integer, nullable=False),
        sa.Column("user_ref", sa.String(64), nullable=True),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("hinted", sa.JSON, nullable=False),
        sa.Column("applied_skill", sa.String(100), nullable=True),
        sa.Column("skill_version", sa.Integer, nullable=True),
        sa.Column("prompt_hash", sa.String(64), nullable=False),
        sa.Column("learning_ids", sa.JSON, nullable=False),
        sa.Column("answer", sa.Text, nullable=False),
        sa.Column("success", sa.Boolean, nullable=False),
        sa.Column("provider", sa.String(50), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("llm_ms", sa.Float, nullable=False),
        sa.Column("total_ms", sa.Float, nullable=False),
        sa.Column("input_tokens", sa.Integer, nullable=True),
        sa.Column("output_tokens", sa.Integer, nullable=True),
        sa.Column("cost_usd", sa.Float, nullable=True),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_interactions"),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name="fk_interactions_project_id_projects",
            ondelete="CASCADE",
        ),
    )
    op.create_index(
        "ix_interactions_project_skill", "interactions", ["project_id", "applied_skill"]
    )
    op.create_table(
        "eval_results",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("interaction_id", sa.Integer, nullable=False),
        sa.Column("rule_id", sa.String(200), nullable=False),
        sa.Column("rule_name", sa.Text, nullable=False),
        sa.Column("rule_type", sa.String(100), nullable=False),
        sa.Column("severity", sa.String(10), nullable=False),
        sa.Column("passed", sa.Boolean, nullable=False),
        sa.Column("detail", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_eval_results"),
        sa.ForeignKeyConstraint(
            ["interaction_id"],
            ["interactions.id"],
            name="fk_eval_results_interaction_id_interactions",
            ondelete="CASCADE",
        ),
    )
    op.create_index("ix_eval_results_interaction_id", "eval_results", ["interaction_id"])
    op.create_table(
        "feedback",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("interaction_id", sa.Integer, nullable=False),
        sa.Column("user_ref", sa.String(64), nullable=False),
        sa.Column("channel", sa.String(10), nullable=False),
        sa.Column("kind", sa.String(10), nullable=False),
        sa.Column("comment", sa.Text, nullable=True),
        sa.Column("learning_id", sa.Integer, nullable=True),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("updated_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_feedback"),
        sa.ForeignKeyConstraint(
            ["interaction_id"],
            ["interactions.id"],
            name="fk_feedback_interaction_id_interactions",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("interaction_id", "user_ref", "channel", name="uq_feedback_vote"),
        sa.CheckConstraint("kind IN ('up', 'down', 'fixit')", name="ck_feedback_kind"),
    )
