"""Knowledge notebooks are indexed by the search engine: the postings table goes.

Each notebook's chunks are now a collection of the workspace's search engine
(tantivy by default), derived from ``knowledge_chunks`` and brought up to date
before a query answers, so the hand-written BM25 over ``knowledge_postings``
and its postings are no longer read. Sources and chunks (their text, spans and
embeddings) stay exactly as they were: every citation still resolves, and the
first question asked of a notebook indexes its chunks.

Revision ID: 0013_knowledge_on_search_engine
Revises: 0012_interaction_idempotency
"""

from __future__ import annotations

from alembic import op

revision = "0013_knowledge_on_search_engine"
down_revision = "0012_interaction_idempotency"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_knowledge_postings_notebook_term", table_name="knowledge_postings")
    op.drop_table("knowledge_postings")
