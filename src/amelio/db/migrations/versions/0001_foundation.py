"""Foundation: projects, skills with their version history, API keys.

Revision ID: 0001_foundation
Revises:
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0001_foundation"
down_revision = None
branch_labels = None
depends_on = None

Timestamp = sa.DateTime(timezone=True)


def upgrade() -> None:
    projects = op.create_table(
        "projects",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_projects"),
        sa.UniqueConstraint("name", name="uq_projects_name"),
    )
    op.create_table(
        "skills",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("project_id", sa.Integer, nullable=True),
        sa.Column("description", sa.Text, nullable=False),
        sa.Column("triggers", sa.JSON, nullable=False),
        sa.Column("keywords", sa.JSON, nullable=False),
        sa.Column("extra", sa.JSON, nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("evals", sa.JSON, nullable=True),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("updated_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_skills"),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name="fk_skills_project_id_projects",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("project_id", "name", name="uq_skills_project_name"),
    )
    op.create_index(
        "uq_skills_global_name",
        "skills",
        ["name"],
        unique=True,
        sqlite_where=sa.text("project_id IS NULL"),
        postgresql_where=sa.text("project_id IS NULL"),
    )
    op.create_table(
        "skill_versions",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("skill_id", sa.Integer, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("description", sa.Text, nullable=False),
        sa.Column("triggers", sa.JSON, nullable=False),
        sa.Column("keywords", sa.JSON, nullable=False),
        sa.Column("extra", sa.JSON, nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("evals", sa.JSON, nullable=True),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("author", sa.String(200), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_skill_versions"),
        sa.ForeignKeyConstraint(
            ["skill_id"],
            ["skills.id"],
            name="fk_skill_versions_skill_id_skills",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("skill_id", "version", name="uq_skill_versions_skill_version"),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("role", sa.String(20), nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("last_used_at", Timestamp, nullable=True),
        sa.Column("revoked_at", Timestamp, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_api_keys"),
        sa.UniqueConstraint("key_hash", name="uq_api_keys_key_hash"),
        sa.CheckConstraint("role IN ('admin', 'bot', 'client')", name="ck_api_keys_role"),
    )
    # The `default` project always exists: requests and commands without a
    # project use it.
    op.bulk_insert(projects, [{"name": "default", "created_at": datetime.now(UTC)}])
