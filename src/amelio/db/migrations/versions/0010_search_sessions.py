"""Impressions record who searched: the daily-salted hashes of the session and user ids.

Without them one session could search a query forty times and never click the
results above the one it wants raised: each response counted as a fresh
examination of every document shown, so the others sank. With the hashes the
aggregator caps what one session (and one user) contributes to a query's
examinations, as it already capped clicks. Both stay NULL when the client sends
no id: such a response counts as its own session.

Revision ID: 0010_search_sessions
Revises: 0009_search_bounces
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_search_sessions"
down_revision = "0009_search_bounces"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("search_impressions") as batch:
        batch.add_column(sa.Column("session_hash", sa.String(8), nullable=True))
        batch.add_column(sa.Column("user_hash", sa.String(8), nullable=True))
