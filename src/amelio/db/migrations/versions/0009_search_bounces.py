"""Search signals count bounces; impressions record which adjacent pair was swapped.

A bounce (a click followed by a dwell under 8 s) says the result looked right and
was not; without its own count it could not be told from a click whose client
reports no dwell at all. ``swapped_rank`` makes each exploration swap a
randomized experiment the position-bias estimate can read.

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
        batch.add_column(sa.Column("bounces", sa.Integer, nullable=False, server_default="0"))
    with op.batch_alter_table("search_impressions") as batch:
        batch.add_column(sa.Column("swapped_rank", sa.Integer, nullable=True))
