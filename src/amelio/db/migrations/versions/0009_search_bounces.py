"""Search signals count bounces: clicks followed by a dwell under 8 s.

A bounce says the result looked right and was not; without its own count it
could not be told from a click whose client reports no dwell at all.

Revision ID: 0009_search_bounces
Revises: 0008_search
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_search_bounces"
down_revision = "0008_search"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("search_signals") as batch:
        batch.add_column(sa.Column("bounces", sa.Integer, nullable=False,
                                   server_default="0"))
