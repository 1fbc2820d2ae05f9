"""SQLite files as a backup and a restore see them, asked without changing them.

Which migration a file is at, its rows per table, whether it holds more than a
freshly migrated database, whether another process has it open. None of these
writes to the file: an empty file stays empty (SQLite would make it a database
at the first lock), and a file that is not a database is reported, not opened
as one.
"""

from __future__ import annotations

import functools
import sqlite3
import tempfile
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import TypeVar

import sqlalchemy as sa

from amelio import db
from amelio.db import engine as db_engine
from amelio.errors import AmelioError, ConfigError, Conflict
from amelio.ops.archive import row_counts

__all__ = [
    "check_not_in_use",
    "corpus_holds_data",
    "database_holds_data",
    "is_database",
    "known_migrations",
    "migration_of",
    "rows_per_table",
    "with_engine",
]

T = TypeVar("T")
#: The SQLite file header: anything else is not a database anyone holds open.
_SQLITE_HEADER = b"SQLite format 3\x00"


@functools.cache
def known_migrations() -> tuple[str, ...]:
    """Every migration this code ships, newest first."""
    return db_engine.known_revisions()


def check_not_in_use(path: Path) -> None:
    """Refuse when another connection holds the database open: in WAL mode each one
    keeps a shared lock, so an exclusive lock is only granted when none is left."""
    if not is_database(path):
        return  # nothing opens it as a database, and locking would make it one
    try:
        conn = sqlite3.connect(
            f"{path.as_uri()}?mode=rw", uri=True, timeout=0, isolation_level=None
        )
        with closing(conn):
            conn.execute("PRAGMA locking_mode=EXCLUSIVE")
            conn.execute("BEGIN EXCLUSIVE")
            conn.execute("COMMIT")
    except sqlite3.OperationalError as exc:
        if exc.sqlite_errorcode in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            raise Conflict(
                f"{path} is open in another process (is `amelio serve` running on "
                "this workspace?): stop it, then restore again. A restore swaps "
                "the files, and a running service would go on writing to the old "
                "ones."
            ) from exc
    except sqlite3.DatabaseError:
        pass  # not a database: nothing can be using it as one


def is_database(path: Path) -> bool:
    """Whether ``path`` is a SQLite file (an empty file is not yet one)."""
    try:
        with path.open("rb") as f:
            return f.read(len(_SQLITE_HEADER)) == _SQLITE_HEADER
    except OSError:
        return False


def database_holds_data(path: Path) -> bool:
    """Whether any table has more rows than a freshly migrated database has (a
    fresh one is seeded with a few: the default project, the chain's anchor)."""
    if not path.is_file() or path.stat().st_size == 0:
        return False
    try:
        migration = migration_of(path)
        if migration not in known_migrations():
            return True
        baseline = _fresh_row_counts(migration)
        return any(
            rows > baseline.get(table, 0)
            for table, rows in rows_per_table(path, cap=baseline).items()
        )
    except (AmelioError, sa.exc.DatabaseError, sqlite3.DatabaseError):
        return True  # unreadable or not Amelio's: only --force may replace it


def corpus_holds_data(path: Path) -> bool:
    """Whether the search corpus at ``path`` holds a document (anything unreadable
    counts: only --force may replace it)."""
    if not path.is_file() or path.stat().st_size == 0:
        return False
    try:
        with closing(sqlite3.connect(f"{path.as_uri()}?mode=rw", uri=True)) as conn:
            return conn.execute("SELECT 1 FROM docs LIMIT 1").fetchone() is not None
    except sqlite3.DatabaseError:
        return True


@functools.cache
def _fresh_row_counts(migration: str) -> dict[str, int]:
    """The rows a new database at ``migration`` starts with (its seeded rows)."""
    with tempfile.TemporaryDirectory(prefix="amelio-fresh-") as scratch:
        engine = db.create_engine(f"sqlite:///{Path(scratch, 'fresh.db')}")
        try:
            db.upgrade(engine, migration)
        finally:
            engine.dispose()
        return rows_per_table(Path(scratch, "fresh.db"))


def migration_of(path: Path) -> str:
    """The migration a database file is at (its alembic_version)."""
    with closing(sqlite3.connect(f"{path.as_uri()}?mode=rw", uri=True)) as conn:
        try:
            row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        except sqlite3.OperationalError as exc:
            raise ConfigError(
                f"The database {path} has no Amelio tables: run `amelio db upgrade`."
            ) from exc
    if row is None:
        raise ConfigError(
            f"The database {path} has no migration recorded: run `amelio db upgrade`."
        )
    return str(row[0])


def rows_per_table(path: Path, cap: dict[str, int] | None = None) -> dict[str, int]:
    """Rows per table of the SQLite file at ``path`` (see :func:`archive.row_counts`)."""
    return with_engine(path, lambda conn: row_counts(conn, cap=cap))


def with_engine(path: Path, read: Callable[[sa.Connection], T]) -> T:
    """``read`` on a connection to the SQLite file at ``path``."""
    engine = sa.create_engine(f"sqlite:///{path}")
    try:
        with engine.connect() as conn:
            return read(conn)
    finally:
        engine.dispose()
