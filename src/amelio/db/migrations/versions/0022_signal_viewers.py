"""Search signals count the distinct people a document was shown to.

A document held to two ranks (fewer than ``search_min_actors`` people behind its
interactions) is measured against the ranking on what enough people said, so
documents many people passed over do not keep it down. Those people are counted
in ``viewers``: the distinct session and user hashes shown the document for the
query. Impressions without a session or user count no one, or one client's forty
sessionless searches would be forty people.

Existing rows get an estimate from the cap's per-session ``shown`` marks (marks
older than a rebuild are gone, and one person's several sessions count several
times): `amelio search signals rebuild` recounts exactly.

Revision ID: 0022_signal_viewers
Revises: 0021_signal_actors
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022_signal_viewers"
down_revision = "0021_signal_actors"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("search_signals") as batch:
        batch.add_column(sa.Column("viewers", sa.Integer, nullable=False, server_default="0"))
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
        sa.column("viewers", sa.Integer),
    )
    sessions = (
        sa.select(sa.func.count(sa.distinct(marks.c.session_hash)))
        .where(
            marks.c.query_norm == signals.c.query_norm,
            marks.c.doc_id == signals.c.doc_id,
            marks.c.kind == "shown",
        )
        .scalar_subquery()
    )
    op.execute(signals.update().values(viewers=sessions))


def downgrade() -> None:
    with op.batch_alter_table("search_signals") as batch:
        batch.drop_column("viewers")
