"""API keys can be bound to projects.

A bot key for project A must not read or write project B. A key's projects are
rows of ``api_key_projects``; a key without rows stays global, so every key made
before this migration keeps working as it did.

Revision ID: 0011_key_projects
Revises: 0010_search_sessions
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_key_projects"
down_revision = "0010_search_sessions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_key_projects",
        sa.Column("key_id", sa.Integer, nullable=False),
        sa.Column("project_id", sa.Integer, nullable=False),
        sa.PrimaryKeyConstraint("key_id", "project_id", name="pk_api_key_projects"),
        sa.ForeignKeyConstraint(
            ["key_id"],
            ["api_keys.id"],
            name="fk_api_key_projects_key_id_api_keys",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name="fk_api_key_projects_project_id_projects",
            ondelete="CASCADE",
        ),
    )
