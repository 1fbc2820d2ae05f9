"""Interactions can carry an idempotency key.

An answer made elsewhere (``POST /v1/interactions``, ``amelio log``, the MCP
``log_interaction`` tool) is logged over a network that may fail after the row
was written; the client retries with the same key and must find that row, not
add a second one that would count twice in the quality metrics. The key is
unique per project and NULL for answers Amelio made itself.

Revision ID: 0012_interaction_idempotency
Revises: 0011_key_projects
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_interaction_idempotency"
down_revision = "0011_key_projects"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("interactions") as batch:
        batch.add_column(sa.Column("idempotency_key", sa.String(200), nullable=True))
    op.create_index(
        "uq_interactions_project_idempotency",
        "interactions",
        ["project_id", "idempotency_key"],
        unique=True,
    )
