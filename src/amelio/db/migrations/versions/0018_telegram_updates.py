"""Telegram: the updates the bot took, so that one delivered twice acts once.

A new table (``amelio.telegram.updates``); nothing existing changes.

Revision ID: 0018_telegram_updates
Revises: 0017_contributions
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

Timestamp = sa.DateTime(timezone=True)

revision = "0018_telegram_updates"
down_revision = "0017_contributions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "telegram_updates",
        sa.Column("bot_id", sa.BigInteger, autoincrement=False, nullable=False),
        sa.Column("update_id", sa.BigInteger, autoincrement=False, nullable=False),
        sa.Column("received_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("bot_id", "update_id", name="pk_telegram_updates"),
    )
    op.create_index("ix_telegram_updates_received_at", "telegram_updates", ["received_at"])


def downgrade() -> None:
    op.drop_index("ix_telegram_updates_received_at", table_name="telegram_updates")
    op.drop_table("telegram_updates")
