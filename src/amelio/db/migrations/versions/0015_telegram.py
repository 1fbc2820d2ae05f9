"""Telegram: one-time invite codes, and the chats linked to a project with a role.

Two new tables (``amelio.telegram.links``); nothing existing changes.

Revision ID: 0015_telegram
Revises: 0014_routing_examples
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

Timestamp = sa.DateTime(timezone=True)

revision = "0015_telegram"
down_revision = "0014_routing_examples"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "telegram_invites",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("code_hash", sa.String(64), nullable=False),
        sa.Column("project_id", sa.Integer, nullable=False),
        sa.Column("role", sa.String(20), nullable=False),
        sa.Column("created_by", sa.String(200), nullable=True),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("expires_at", Timestamp, nullable=False),
        sa.Column("used_at", Timestamp, nullable=True),
        sa.Column("used_by_chat", sa.BigInteger, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_telegram_invites"),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name="fk_telegram_invites_project_id_projects",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("code_hash", name="uq_telegram_invites_code_hash"),
        sa.CheckConstraint("role IN ('user', 'admin')", name="ck_telegram_invites_role"),
    )
    op.create_table(
        "telegram_chats",
        sa.Column("chat_id", sa.BigInteger, autoincrement=False, nullable=False),
        sa.Column("project_id", sa.Integer, nullable=False),
        sa.Column("role", sa.String(20), nullable=False),
        sa.Column("title", sa.String(200), nullable=True),
        sa.Column("linked_by", sa.String(200), nullable=True),
        sa.Column("linked_at", Timestamp, nullable=False),
        sa.Column("invite_id", sa.Integer, nullable=True),
        sa.PrimaryKeyConstraint("chat_id", name="pk_telegram_chats"),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name="fk_telegram_chats_project_id_projects",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["invite_id"],
            ["telegram_invites.id"],
            name="fk_telegram_chats_invite_id_telegram_invites",
            ondelete="SET NULL",
        ),
        sa.CheckConstraint("role IN ('user', 'admin')", name="ck_telegram_chats_role"),
    )
    op.create_index("ix_telegram_chats_project_role", "telegram_chats", ["project_id", "role"])


def downgrade() -> None:
    op.drop_index("ix_telegram_chats_project_role", table_name="telegram_chats")
    op.drop_table("telegram_chats")
    op.drop_table("telegram_invites")
