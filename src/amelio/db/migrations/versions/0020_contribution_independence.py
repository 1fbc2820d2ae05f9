"""Idle compute: where and by which key each browser identity was minted, its results
the server confirmed itself, and each task's estimated cost to a browser.

Two identities of one network, or minted together by one key, never verify each
other; a new identity is checked by the server until ``checked`` results were
confirmed; the hourly CPU budget is charged with ``cost_ms``, not the client's word.
Identities minted before this revision keep an empty network (related to none by it)
and start on probation; tasks made before it cost nothing.

Revision ID: 0020_contribution_independence
Revises: 0019_routing_generation
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020_contribution_independence"
down_revision = "0019_routing_generation"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("contribution_clients") as batch:
        batch.add_column(sa.Column("network", sa.String(32), nullable=False, server_default=""))
        batch.add_column(sa.Column("key_id", sa.Integer, nullable=True))
        batch.add_column(sa.Column("checked", sa.Integer, nullable=False, server_default="0"))
    with op.batch_alter_table("contribution_tasks") as batch:
        batch.add_column(sa.Column("cost_ms", sa.Float, nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("contribution_tasks") as batch:
        batch.drop_column("cost_ms")
    with op.batch_alter_table("contribution_clients") as batch:
        batch.drop_column("checked")
        batch.drop_column("key_id")
        batch.drop_column("network")
