"""Storage: SQLAlchemy Core tables, engines and Alembic migrations."""

from amelio.db.engine import (
    check_migrated,
    connect,
    create_engine,
    current_revision,
    head_revision,
    insert_ignore,
    reading,
    transaction,
    upgrade,
)

__all__ = [
    "check_migrated",
    "connect",
    "create_engine",
    "current_revision",
    "head_revision",
    "insert_ignore",
    "reading",
    "transaction",
    "upgrade",
]
