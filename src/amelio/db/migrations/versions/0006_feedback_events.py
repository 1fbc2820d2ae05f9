"""Feedback events (MartyFeedbackEventV1), the head of their HMAC chain, tombstones.

Revision ID: 0006_feedback_events
Revises: 0005_benchmarks
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_feedback_events"
down_revision = "0005_benchmarks"
branch_labels = None
depends_on = None

#: The chain's start: no event yet. Its MAC is empty because the key is not
#: known here; the first write signs the head.
GENESIS = "0" * 64


def upgrade() -> None:
    op.create_table(
        "feedback_events",
        sa.Column("seq", sa.BigInteger, autoincrement=False, nullable=False),
        sa.Column("event_id", sa.String(26), nullable=False),
        sa.Column("event_type", sa.String(32), nullable=False),
        sa.Column("event_time_ms", sa.BigInteger, nullable=False),
        sa.Column("received_ms", sa.BigInteger, nullable=False),
        sa.Column("session_hash", sa.String(8), nullable=False),
        sa.Column("user_hash", sa.String(8), nullable=True),
        sa.Column("query_id", sa.String(128), nullable=True),
        sa.Column("request_id", sa.String(128), nullable=True),
        sa.Column("doc_id", sa.String(256), nullable=True),
        sa.Column("rank_shown", sa.Integer, nullable=True),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("signature", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("seq", name="pk_feedback_events"),
        sa.UniqueConstraint("event_id", name="uq_feedback_events_event_id"),
    )
    op.create_index("ix_feedback_events_query", "feedback_events", ["query_id", "event_type"])
    op.create_index("ix_feedback_events_doc", "feedback_events", ["doc_id", "event_type"])
    op.create_index(
        "ix_feedback_events_type_time", "feedback_events", ["event_type", "event_time_ms"]
    )
    op.create_index("ix_feedback_events_time", "feedback_events", ["event_time_ms"])
    chain = op.create_table(
        "feedback_chain",
        sa.Column("id", sa.Integer, autoincrement=False, nullable=False),
        sa.Column("last_seq", sa.BigInteger, nullable=False),
        sa.Column("last_signature", sa.String(64), nullable=False),
        sa.Column("anchor_seq", sa.BigInteger, nullable=False),
        sa.Column("anchor_signature", sa.String(64), nullable=False),
        sa.Column("mac", sa.String(64), nullable=False),
        sa.Column("updated_ms", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_feedback_chain"),
        sa.CheckConstraint("id = 1", name="ck_feedback_chain_single_row"),
    )
    op.bulk_insert(
        chain,
        [
            {
                "id": 1,
                "last_seq": 0,
                "last_signature": GENESIS,
                "anchor_seq": 0,
                "anchor_signature": GENESIS,
                "mac": "",
                "updated_ms": 0,
            }
        ],
    )
    op.create_table(
        "feedback_tombstones",
        sa.Column("seq", sa.BigInteger, autoincrement=False, nullable=False),
        sa.Column("signature", sa.String(64), nullable=False),
        sa.Column("mac", sa.String(64), nullable=False),
        sa.Column("purged_ms", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("seq", name="pk_feedback_tombstones"),
    )
