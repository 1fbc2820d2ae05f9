"""The learned router's examples: messages of kept answers, and an admin's.

A new table, read per project by the router (``amelio.routing.examples``); an
empty one routes on the skills' metadata and SKILL.md ``examples:``. Proposals
gain ``routing``: the triggers and keywords a routing proposal (mined from the
examples by ``amelio skills suggest-triggers``) gives its skill; NULL for all
existing proposals, which change content only.

Revision ID: 0014_routing_examples
Revises: 0013_knowledge_on_search_engine
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

Timestamp = sa.DateTime(timezone=True)

revision = "0014_routing_examples"
down_revision = "0013_knowledge_on_search_engine"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "routing_examples",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("project_id", sa.Integer, nullable=False),
        sa.Column("skill", sa.String(100), nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("source", sa.String(20), nullable=False),
        sa.Column("interaction_id", sa.Integer, nullable=True),
        sa.Column("author", sa.String(200), nullable=True),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("removed_at", Timestamp, nullable=True),
        sa.Column("removed_by", sa.String(200), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_routing_examples"),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name="fk_routing_examples_project_id_projects",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["interaction_id"],
            ["interactions.id"],
            name="fk_routing_examples_interaction_id_interactions",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("interaction_id", name="uq_routing_examples_interaction_id"),
        sa.CheckConstraint(
            "source IN ('interaction', 'manual')", name="ck_routing_examples_source"
        ),
    )
    op.create_index(
        "ix_routing_examples_project_skill", "routing_examples", ["project_id", "skill"]
    )
    with op.batch_alter_table("proposals") as batch:
        batch.add_column(sa.Column("routing", sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("proposals") as batch:
        batch.drop_column("routing")
    op.drop_index("ix_routing_examples_project_skill", table_name="routing_examples")
    op.drop_table("routing_examples")
