"""Shadow answers: a candidate model's answers to a share of live requests.

One row per shadow answer (``amelio.improve.shadow``): the interaction it
shadows, the model, its answer, whether it passed the applied skill's rules (and
the share it passed), its latency, or the error it met. Nothing existing changes.

Revision ID: 0028_shadow_answers
Revises: 0027_rollouts
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

Timestamp = sa.DateTime(timezone=True)

revision = "0028_shadow_answers"
down_revision = "0027_rollouts"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "shadow_answers",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("interaction_id", sa.Integer, nullable=False),
        sa.Column("project_id", sa.Integer, nullable=False),
        sa.Column("skill", sa.String(100), nullable=True),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("answer", sa.Text, nullable=False),
        sa.Column("success", sa.Boolean, nullable=False),
        sa.Column("passed_share", sa.Float, nullable=False),
        sa.Column("failed_rules", sa.JSON, nullable=False),
        sa.Column("latency_ms", sa.Float, nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_shadow_answers"),
        sa.ForeignKeyConstraint(
            ["interaction_id"],
            ["interactions.id"],
            name="fk_shadow_answers_interaction_id_interactions",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name="fk_shadow_answers_project_id_projects",
            ondelete="CASCADE",
        ),
    )
    op.create_index("ix_shadow_answers_model", "shadow_answers", ["model", "project_id"])
    op.create_index("ix_shadow_answers_interaction_id", "shadow_answers", ["interaction_id"])


def downgrade() -> None:
    op.drop_index("ix_shadow_answers_interaction_id", table_name="shadow_answers")
    op.drop_index("ix_shadow_answers_model", table_name="shadow_answers")
    op.drop_table("shadow_answers")
