"""Search signals count the distinct people behind a document's interactions.

One person's capped, satisfied click could still lift a deep result to the top
of a query whose lexical scores are close. ``actors`` counts the distinct
session and user hashes that clicked, dwelt, bounced, pinned, hid or voted on
(query, document); the feedback score counts those interactions only once
``search_min_actors`` people are behind them.

Existing rows get an estimate from the per-session marks kept for the cap (the
sessions that left an interaction mark; marks older than a rebuild are gone, and
one person's several sessions count several times): `amelio search signals
rebuild` recounts exactly from the stored impressions and events.

Revision ID: 0021_signal_actors
Revises: 0020_contribution_independence
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021_signal_actors"
down_revision = "0020_contribution_independence"
branch_labels = None
depends_on = None

_INTERACTIONS = ("click", "dwell", "bounce", "pin", "hide", "up", "down")


def upgrade() -> None:
    with op.batch_alter_table("search_signals") as batch:
        batch.add_column(sa.Column("actors", sa.Integer, nullable=False, server_default="0"))
    marks = sa.table(
        "search_session_marks",
        sa.column("query_norm", sa.String),
        sa.column("doc_id", sa.String),
        sa.column("session_hash", sa.String),
        sa.column("kind", sa.String),
    )
    signals = sa.table(
        "search_signals",
        sa.column("query_norm", sa.String),
        sa.column("doc_id", sa.String),
        sa.column("actors", sa.Integer),
    )
    sessions = (
        sa.select(sa.func.count(sa.distinct(marks.c.session_hash)))
        .where(
            marks.c.query_norm == signals.c.query_norm,
            marks.c.doc_id == signals.c.doc_id,
            marks.c.kind.in_(_INTERACTIONS),
        )
        .scalar_subquery()
    )
    op.execute(signals.update().values(actors=sessions))


def downgrade() -> None:
    with op.batch_alter_table("search_signals") as batch:
        batch.drop_column("actors")
