"""The routing generation: one number that every skill or routing example write replaces.

A new single-row table (``routing_state``), seeded with a random generation, so that
no two databases start with the same one; nothing existing changes.

Revision ID: 0019_routing_generation
Revises: 0018_telegram_updates
"""

from __future__ import annotations

import secrets

import sqlalchemy as sa
from alembic import op

revision = "0019_routing_generation"
down_revision = "0018_telegram_updates"
branch_labels = None
depends_on = None


def upgrade() -> None:
    state = op.create_table(
        "routing_state",
        sa.Column("id", sa.Integer, autoincrement=False, nullable=False),
        sa.Column("generation", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_routing_state"),
        sa.CheckConstraint("id = 1", name="ck_routing_state_single_row"),
    )
    op.bulk_insert(state, [{"id": 1, "generation": secrets.randbits(63)}])


def downgrade() -> None:
    op.drop_table("routing_state")
