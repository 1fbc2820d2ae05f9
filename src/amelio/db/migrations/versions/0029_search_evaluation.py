"""Search evaluation: interleaving experiments and judgment lists.

* ``search_experiments``: two rank profiles compared by interleaving on a share
  of a project's sessions (``amelio.search.experiments``); at most one runs per
  project.
* ``search_impressions`` gains ``experiment`` (the experiment that served the
  response) and ``interleaving`` (which ranker contributed each shown result, and
  where each ranker had put it), so clicks can be credited to A or B.
* ``judgment_lists`` and ``judgments``: graded (query, document) pairs from
  clicks, an LLM or people (``amelio.search.judgments``); a human list starts
  with its pairs ungraded (``grade`` NULL).

Existing rows are unchanged: the new impression columns stay NULL.

Revision ID: 0029_search_evaluation
Revises: 0028_shadow_answers
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0029_search_evaluation"
down_revision = "0028_shadow_answers"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "search_experiments",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("project", sa.String(100), nullable=False),
        sa.Column("a", sa.JSON, nullable=False),
        sa.Column("b", sa.JSON, nullable=False),
        sa.Column("share", sa.Float, nullable=False),
        sa.Column("method", sa.String(16), nullable=False),
        sa.Column("status", sa.String(10), nullable=False),
        sa.Column("created_by", sa.String(200), nullable=False),
        sa.Column("created_ms", sa.BigInteger, nullable=False),
        sa.Column("stopped_ms", sa.BigInteger, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_search_experiments"),
        sa.UniqueConstraint("name", name="uq_search_experiments_name"),
        sa.CheckConstraint("status IN ('running', 'stopped')", name="ck_search_experiments_status"),
        sa.CheckConstraint(
            "method IN ('team-draft', 'balanced')", name="ck_search_experiments_method"
        ),
        sa.CheckConstraint("share > 0 AND share <= 1", name="ck_search_experiments_share"),
    )
    op.create_index(
        "ix_search_experiments_project_status", "search_experiments", ["project", "status"]
    )
    with op.batch_alter_table("search_impressions") as batch:
        batch.add_column(sa.Column("experiment", sa.String(100), nullable=True))
        batch.add_column(sa.Column("interleaving", sa.JSON(none_as_null=True), nullable=True))
    op.create_index("ix_search_impressions_experiment", "search_impressions", ["experiment"])
    op.create_table(
        "judgment_lists",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("source", sa.String(10), nullable=False),
        sa.Column("created_by", sa.String(200), nullable=False),
        sa.Column("created_ms", sa.BigInteger, nullable=False),
        sa.Column("meta", sa.JSON, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_judgment_lists"),
        sa.UniqueConstraint("name", name="uq_judgment_lists_name"),
        sa.CheckConstraint("source IN ('clicks', 'llm', 'human')", name="ck_judgment_lists_source"),
    )
    op.create_table(
        "judgments",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("list_id", sa.Integer, nullable=False),
        sa.Column("query", sa.String(1000), nullable=False),
        sa.Column("doc_id", sa.String(256), nullable=False),
        sa.Column("grade", sa.Integer, nullable=True),
        sa.Column("evidence", sa.JSON, nullable=False),
        sa.Column("graded_by", sa.String(200), nullable=True),
        sa.Column("graded_ms", sa.BigInteger, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_judgments"),
        sa.ForeignKeyConstraint(
            ["list_id"],
            ["judgment_lists.id"],
            name="fk_judgments_list_id_judgment_lists",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("list_id", "query", "doc_id", name="uq_judgments_list_id"),
        sa.CheckConstraint("grade IS NULL OR grade BETWEEN 0 AND 3", name="ck_judgments_grade"),
    )


def downgrade() -> None:
    op.drop_table("judgments")
    op.drop_table("judgment_lists")
    op.drop_index("ix_search_impressions_experiment", table_name="search_impressions")
    with op.batch_alter_table("search_impressions") as batch:
        batch.drop_column("interleaving")
        batch.drop_column("experiment")
    op.drop_index("ix_search_experiments_project_status", table_name="search_experiments")
    op.drop_table("search_experiments")
