"""Proposals, the skill evolution log and improve runs.

Revision ID: 0004_proposals
Revises: 0003_interactions
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_proposals"
down_revision = "0003_interactions"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "proposals",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("skill_id", sa.Integer, nullable=False),
        sa.Column("skill_name", sa.String(100), nullable=False),
        sa.Column("project_id", sa.Integer, nullable=False),
        sa.Column("base_version", sa.Integer, nullable=False),
        sa.Column("current_content", sa.Text, nullable=False),
        sa.Column("proposed_content", sa.Text, nullable=False),
        sa.Column("rationale", sa.Text, nullable=False),
        sa.Column("evidence", sa.JSON, nullable=False),
        sa.Column("status", sa.String(12), nullable=False),
        sa.Column("proposed_by", sa.String(12), nullable=False),
        sa.Column("author", sa.String(200), nullable=False),
        sa.Column("decided_by", sa.String(200), nullable=True),
        sa.Column("decision_reason", sa.Text, nullable=True),
        sa.Column("decided_at", Timestamp, nullable=True),
        sa.Column("result_version", sa.Integer, nullable=True),
        sa.Column("run_id", sa.Integer, nullable=True),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_proposals"),
        sa.ForeignKeyConstraint(
            ["skill_id"], ["skills.id"], name="fk_proposals_skill_id_skills", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name="fk_proposals_project_id_projects",
            ondelete="CASCADE",
        ),
        sa.CheckConstraint(
            "status IN ('pending', 'approved', 'rejected', 'superseded')",
            name="ck_proposals_status",
        ),
        sa.CheckConstraint(
            "proposed_by IN ('template', 'sage', 'generator', 'human')",
            name="ck_proposals_proposed_by",
        ),
    )
    op.create_index("ix_proposals_skill_id", "proposals", ["skill_id"])
    op.create_table(
        "skill_events",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("skill_id", sa.Integer, nullable=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("version", sa.Integer, nullable=True),
        sa.Column("proposal_id", sa.Integer, nullable=True),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_skill_events"),
        sa.ForeignKeyConstraint(
            ["skill_id"], ["skills.id"], name="fk_skill_events_skill_id_skills", ondelete="CASCADE"
        ),
    )
    op.create_index("ix_skill_events_skill_id", "skill_events", ["skill_id"])
    op.create_table(
        "improve_runs",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("started_at", Timestamp, nullable=False),
        sa.Column("finished_at", Timestamp, nullable=False),
        sa.Column("mode", sa.String(12), nullable=False),
        sa.Column("report", sa.JSON, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_improve_runs"),
    )
    # Every skill version so far becomes an event, so the log starts complete.
    op.execute(
        "INSERT INTO skill_events (skill_id, kind, version, proposal_id, actor, reason, "
        "created_at) SELECT skill_id, CASE WHEN version = 1 THEN 'import' ELSE 'edit' END, "
        "version, NULL, author, reason, created_at FROM skill_versions"
    )
