"""Search: impressions (what each response showed), signals per (query, doc), the
per-session caps, and the aggregator's single-row state (checkpoints, version,
position propensities).

Revision ID: 0008_search
Revises: 0007_knowledge
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_search"
down_revision = "0007_knowledge"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "search_impressions",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("query_id", sa.String(64), nullable=False),
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("project", sa.String(100), nullable=False),
        sa.Column("query_norm", sa.Text, nullable=False),
        sa.Column("profile", sa.String(32), nullable=False),
        sa.Column("alpha", sa.Float, nullable=False),
        sa.Column("beta", sa.Float, nullable=False),
        sa.Column("results", sa.JSON, nullable=False),
        sa.Column("explored", sa.Boolean, nullable=False),
        sa.Column("created_ms", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_search_impressions"),
        sa.UniqueConstraint("query_id", name="uq_search_impressions_query_id"),
    )
    op.create_index("ix_search_impressions_created_ms", "search_impressions", ["created_ms"])
    op.create_table(
        "search_signals",
        sa.Column("query_norm", sa.String(1000), nullable=False),
        sa.Column("doc_id", sa.String(256), nullable=False),
        sa.Column("impressions", sa.Integer, nullable=False),
        sa.Column("impressions_by_rank", sa.JSON, nullable=False),
        sa.Column("clicks_by_rank", sa.JSON, nullable=False),
        sa.Column("clicks", sa.Integer, nullable=False),
        sa.Column("dwell_clicks", sa.Integer, nullable=False),
        sa.Column("pins", sa.Integer, nullable=False),
        sa.Column("hides", sa.Integer, nullable=False),
        sa.Column("votes_up", sa.Integer, nullable=False),
        sa.Column("votes_down", sa.Integer, nullable=False),
        sa.Column("reformulations", sa.Integer, nullable=False),
        sa.Column("abandonments", sa.Integer, nullable=False),
        sa.Column("updated_ms", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("query_norm", "doc_id", name="pk_search_signals"),
    )
    op.create_table(
        "search_session_marks",
        sa.Column("query_norm", sa.String(1000), nullable=False),
        sa.Column("doc_id", sa.String(256), nullable=False),
        sa.Column("session_hash", sa.String(8), nullable=False),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("hits", sa.Integer, nullable=False),
        sa.PrimaryKeyConstraint(
            "query_norm", "doc_id", "session_hash", "kind", name="pk_search_session_marks"
        ),
    )
    state = op.create_table(
        "search_state",
        sa.Column("id", sa.Integer, autoincrement=False, nullable=False),
        sa.Column("event_seq", sa.BigInteger, nullable=False),
        sa.Column("impression_id", sa.Integer, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("propensities", sa.JSON, nullable=False),
        sa.Column("recent", sa.JSON, nullable=False),
        sa.Column("updated_ms", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_search_state"),
        sa.CheckConstraint("id = 1", name="ck_search_state_single_row"),
    )
    op.bulk_insert(
        state,
        [
            {
                "id": 1,
                "event_seq": 0,
                "impression_id": 0,
                "version": 0,
                "propensities": {},
                "recent": {},
                "updated_ms": 0,
            }
        ],
    )
