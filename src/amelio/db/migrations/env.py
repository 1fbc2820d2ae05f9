"""Alembic environment: runs on the engine Amelio hands over, never on a URL in a file."""

from __future__ import annotations

from alembic import context

from amelio.db.schema import metadata

engine = context.config.attributes["engine"]

with engine.begin() as connection:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    context.run_migrations()
