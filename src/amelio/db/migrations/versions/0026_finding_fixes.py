"""Findings file their fixes: a proposal can add eval rules, and a finding's golden
cases are pinned when its fix is approved.

``proposals.evals`` holds the skill's rules as approval sets them (NULL: the
proposal leaves them alone), so a rule mined from a finding travels with the
skill change it belongs to. ``pinned_cases.source`` gains ``finding``: a message
from a finding's evidence, pinned when the proposal that fixes it is approved.

Revision ID: 0026_finding_fixes
Revises: 0025_findings
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0026_finding_fixes"
down_revision = "0025_findings"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("proposals") as batch:
        batch.add_column(sa.Column("evals", sa.JSON(none_as_null=True), nullable=True))
    with op.batch_alter_table("pinned_cases") as batch:
        batch.drop_constraint("ck_pinned_cases_source", type_="check")
        batch.create_check_constraint(
            "source", "source IN ('manual', 'thumbs_up', 'fixit', 'finding')"
        )


def downgrade() -> None:
    op.execute("DELETE FROM pinned_cases WHERE source = 'finding'")
    with op.batch_alter_table("pinned_cases") as batch:
        batch.drop_constraint("ck_pinned_cases_source", type_="check")
        batch.create_check_constraint("source", "source IN ('manual', 'thumbs_up', 'fixit')")
    with op.batch_alter_table("proposals") as batch:
        batch.drop_column("evals")
