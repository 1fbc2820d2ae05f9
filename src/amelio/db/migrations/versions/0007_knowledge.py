"""The knowledge loop (notebooks, sources, chunks, postings, sync queue) and
proposals for skills that do not exist yet.

Revision ID: 0007_knowledge
Revises: 0006_feedback_events
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_knowledge"
down_revision = "0006_feedback_events"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime(timezone=True)


def upgrade() -> None:
    # A generated skill is new: its proposal has no skill row yet. SQLite cannot
    # alter a column in place, so batch mode rebuilds the table (env.py turns
    # foreign keys off around it, so benchmark runs that reference proposals stay).
    with op.batch_alter_table("proposals") as batch:
        batch.alter_column("skill_id", existing_type=sa.Integer, nullable=True)
        batch.add_column(sa.Column("new_skill", sa.JSON, nullable=True))

    op.create_table(
        "knowledge_notebooks",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("project_id", sa.Integer, nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_knowledge_notebooks"),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name="fk_knowledge_notebooks_project_id_projects",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("project_id", "name", name="uq_knowledge_notebooks_project_name"),
    )
    op.create_table(
        "knowledge_sources",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("notebook_id", sa.Integer, nullable=False),
        sa.Column("source_id", sa.String(256), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("title", sa.Text, nullable=False),
        sa.Column("url", sa.Text, nullable=True),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("updated_at", Timestamp, nullable=False),
        sa.Column("indexed_at", Timestamp, nullable=False),
        sa.Column("chunk_count", sa.Integer, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_knowledge_sources"),
        sa.ForeignKeyConstraint(
            ["notebook_id"],
            ["knowledge_notebooks.id"],
            name="fk_knowledge_sources_notebook_id_knowledge_notebooks",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint(
            "notebook_id", "source_id", name="uq_knowledge_sources_notebook_source"
        ),
    )
    op.create_table(
        "knowledge_chunks",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("source_row_id", sa.Integer, nullable=False),
        sa.Column("notebook_id", sa.Integer, nullable=False),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("start_char", sa.Integer, nullable=False),
        sa.Column("end_char", sa.Integer, nullable=False),
        sa.Column("token_count", sa.Integer, nullable=False),
        sa.Column("embedding_model", sa.String(200), nullable=True),
        sa.Column("embedding", sa.JSON, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_knowledge_chunks"),
        sa.ForeignKeyConstraint(
            ["source_row_id"],
            ["knowledge_sources.id"],
            name="fk_knowledge_chunks_source_row_id_knowledge_sources",
            ondelete="CASCADE",
        ),
    )
    op.create_index("ix_knowledge_chunks_source_row_id", "knowledge_chunks", ["source_row_id"])
    op.create_index("ix_knowledge_chunks_notebook_id", "knowledge_chunks", ["notebook_id"])
    op.create_table(
        "knowledge_postings",
        sa.Column("chunk_id", sa.Integer, nullable=False),
        sa.Column("term", sa.String(64), nullable=False),
        sa.Column("notebook_id", sa.Integer, nullable=False),
        sa.Column("tf", sa.Integer, nullable=False),
        sa.PrimaryKeyConstraint("chunk_id", "term", name="pk_knowledge_postings"),
        sa.ForeignKeyConstraint(
            ["chunk_id"],
            ["knowledge_chunks.id"],
            name="fk_knowledge_postings_chunk_id_knowledge_chunks",
            ondelete="CASCADE",
        ),
    )
    op.create_index(
        "ix_knowledge_postings_notebook_term", "knowledge_postings", ["notebook_id", "term"]
    )
    op.create_table(
        "knowledge_queue",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("notebook_id", sa.Integer, nullable=False),
        sa.Column("source_id", sa.String(256), nullable=False),
        sa.Column("source_updated_at", Timestamp, nullable=False),
        sa.Column("payload", sa.JSON, nullable=False),
        sa.Column("status", sa.String(8), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("next_attempt_at", Timestamp, nullable=False),
        sa.Column("claimed_until", Timestamp, nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("failed_at", Timestamp, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_knowledge_queue"),
        sa.ForeignKeyConstraint(
            ["notebook_id"],
            ["knowledge_notebooks.id"],
            name="fk_knowledge_queue_notebook_id_knowledge_notebooks",
            ondelete="CASCADE",
        ),
        sa.CheckConstraint("status IN ('pending', 'dead')", name="ck_knowledge_queue_status"),
    )
    op.create_index("ix_knowledge_queue_due", "knowledge_queue", ["status", "next_attempt_at"])
    op.create_index("ix_knowledge_queue_source", "knowledge_queue", ["notebook_id", "source_id"])
