"""Alembic environment: runs on the engine Amelio hands over, never on a URL in a file.

On SQLite, altering a table means rebuilding it (batch mode): create a copy,
drop the old one, rename. With foreign keys on, that drop cascades and deletes
every row that references the table, so migrations run with foreign keys off
(SQLite's documented procedure for schema changes) and are checked before the
commit instead.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context

from amelio.db.schema import metadata

engine = context.config.attributes["engine"]


def _sqlite_foreign_keys(connection: sa.Connection, on: bool) -> None:
    # The pragma is a no-op inside a transaction, so it goes to the driver's
    # connection directly (autocommit), before BEGIN and after COMMIT.
    cursor = connection.connection.cursor()
    try:
        cursor.execute(f"PRAGMA foreign_keys={'ON' if on else 'OFF'}")
    finally:
        cursor.close()


with engine.connect() as connection:
    sqlite = connection.dialect.name == "sqlite"
    if sqlite:
        _sqlite_foreign_keys(connection, on=False)
    try:
        with connection.begin():
            context.configure(
                connection=connection,
                target_metadata=metadata,
                render_as_batch=sqlite,
                compare_type=True,
            )
            context.run_migrations()
            if sqlite:
                broken = connection.exec_driver_sql("PRAGMA foreign_key_check").all()
                if broken:
                    raise RuntimeError(f"A migration broke foreign keys: {broken[:5]}")
    finally:
        if sqlite:
            _sqlite_foreign_keys(connection, on=True)
