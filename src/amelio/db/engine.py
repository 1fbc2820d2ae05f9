"""Engines and migrations: SQLite (WAL, foreign keys) by default, PostgreSQL by URL.

The schema is only ever changed by Alembic migrations (forward-only, named
``NNNN_what``). :func:`connect` refuses a database whose schema is behind the
code, so a service never runs against tables it does not understand.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from amelio.errors import ConfigError, DatabaseError, NotMigrated

__all__ = [
    "check_migrated",
    "connect",
    "create_engine",
    "current_revision",
    "head_revision",
    "insert_ignore",
    "known_revisions",
    "reading",
    "transaction",
    "upgrade",
]

_MIGRATIONS = Path(__file__).with_name("migrations")


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets readers run beside the one writer; busy_timeout makes a second
    # writer wait instead of failing at once; foreign keys are off by default.
    # pysqlite's own BEGIN handling is turned off so _sqlite_begin decides.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=5000")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _sqlite_begin(conn: sa.Connection) -> None:
    # A write transaction that starts DEFERRED reads, then fails with "database
    # is locked" (no waiting) when another writer committed meanwhile. IMMEDIATE
    # takes the write lock up front, so writers queue on busy_timeout instead.
    # A read (see reading()) needs no transaction at all: each statement reads a
    # consistent snapshot on its own, as on PostgreSQL in autocommit.
    options = conn.get_execution_options()
    if options.get("amelio_read", False):
        return
    conn.exec_driver_sql("BEGIN IMMEDIATE" if options.get("amelio_write", False) else "BEGIN")


@contextmanager
def transaction(engine: sa.Engine) -> Iterator[sa.Connection]:
    """A read-write transaction; on SQLite it holds the write lock from the start."""
    with engine.connect() as conn:
        conn.execution_options(amelio_write=True)
        with conn.begin():
            yield conn


def insert_ignore(
    conn: sa.Connection,
    table: sa.Table,
    values: dict[str, Any] | list[dict[str, Any]],
    key: Sequence[str],
    *,
    returning: sa.ColumnElement[Any] | None = None,
) -> list[Any]:
    """INSERT (one row or many) unless a row with the same ``key`` exists, without a
    race: a second writer's insert becomes a no-op instead of a unique-constraint
    error. With ``returning``, that column of the rows actually inserted (RETURNING:
    psycopg reports a rowcount of -1 for INSERT … ON CONFLICT, and a generated key
    needs no second statement to read back); else an empty list."""
    insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    statement = insert(table).values(values).on_conflict_do_nothing(index_elements=list(key))
    if returning is None:
        conn.execute(statement)
        return []
    return list(conn.scalars(statement.returning(returning)))


@contextmanager
def reading(bind: sa.Engine | sa.Connection) -> Iterator[sa.Connection]:
    """A connection for reads: ``bind`` itself when the caller already holds one
    (so one request can share a single connection), else a new one."""
    if isinstance(bind, sa.Connection):
        yield bind
        return
    with bind.connect() as conn:
        # Reads need no transaction: skip BEGIN and ROLLBACK (round trips on
        # PostgreSQL). Each statement still reads one consistent snapshot.
        if conn.dialect.name == "postgresql":
            conn.execution_options(isolation_level="AUTOCOMMIT")
        else:
            conn.execution_options(amelio_read=True)
        yield conn


def _private_file(path: Path) -> None:
    """Create a new SQLite file readable by its owner only (0600, in a 0700 folder
    when the folder is new): it holds every interaction. SQLite gives its -wal and
    -shm files the database file's mode."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with contextlib.suppress(FileExistsError):  # an existing one keeps its owner's mode
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def create_engine(url: str, **kwargs: Any) -> sa.Engine:
    """An engine for ``url`` with Amelio's connection settings applied."""
    try:
        parsed = sa.engine.make_url(url)
    except sa.exc.ArgumentError as exc:
        raise ConfigError(
            f"AMELIO_DATABASE_URL {url!r} is not a database URL; use "
            "sqlite:///path/amelio.db or postgresql+psycopg://user@host/db"
        ) from exc
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise ConfigError(
            f"Amelio runs on SQLite or PostgreSQL, not "
            f"{parsed.get_backend_name()!r} (AMELIO_DATABASE_URL)."
        )
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            _private_file(Path(parsed.database))
        engine = sa.create_engine(parsed, **kwargs)
        sa.event.listen(engine, "connect", _sqlite_pragmas)
        sa.event.listen(engine, "begin", _sqlite_begin)
        return engine
    try:
        engine = sa.create_engine(parsed, **kwargs)
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"The database driver for {parsed.drivername} is not installed: "
            "pip install 'amelio[postgres]'."
        ) from exc
    if not kwargs.get("pool_pre_ping"):
        _ping_when_idle(engine)
    return engine


#: A pooled PostgreSQL connection idle longer than this is pinged before use.
PING_AFTER_IDLE_S = 1.0


def _ping_when_idle(engine: sa.Engine) -> None:
    """``pool_pre_ping``, without its round trip on every checkout.

    A pooled connection goes stale when the server restarts or something in
    between drops idle connections: both strike connections that sat idle. One
    back in the pool for under :data:`PING_AFTER_IDLE_S` is handed out as it is,
    so a busy service pays no ping per request (three per chat request with
    ``pool_pre_ping``); one idle longer is pinged, and a dead one is replaced
    before anyone sees it. A connection that dies within the second is caught by
    SQLAlchemy's own disconnect handling, which empties the pool: one request
    fails with a database error, and the next gets fresh connections.
    """
    dialect = engine.dialect

    @sa.event.listens_for(engine.pool, "checkin")
    def _checked_in(_dbapi_connection: Any, record: Any) -> None:
        if record is not None:
            record.info["amelio_idle_since"] = time.monotonic()

    @sa.event.listens_for(engine.pool, "checkout")
    def _checked_out(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get("amelio_idle_since")
        if since is None or time.monotonic() - since < PING_AFTER_IDLE_S:
            return  # new (just connected) or back in the pool a moment ago
        try:
            dialect.do_ping(dbapi_connection)
        except Exception as exc:
            raise sa.exc.DisconnectionError(f"stale pooled connection: {exc}") from exc


#: The newest migration this code ships. Opening a workspace compares the database
#: with it, so that a command need not import alembic and read every migration
#: script to learn it (~0.2 s); tests/test_db.py checks it is alembic's head.
HEAD_REVISION = "0029_search_evaluation"
_CURRENT = sa.text("SELECT version_num FROM alembic_version")


def _alembic_config(engine: sa.Engine) -> Any:
    from alembic.config import Config as AlembicConfig

    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    cfg.attributes["engine"] = engine
    return cfg


def head_revision() -> str:
    """The newest migration this code ships."""
    return HEAD_REVISION


def known_revisions() -> tuple[str, ...]:
    """Every migration this code ships, newest first (a restore refuses a backup
    whose migration is not among them: it comes from newer code)."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory(str(_MIGRATIONS))
    return tuple(r.revision for r in script.walk_revisions())


def current_revision(engine: sa.Engine) -> str | None:
    """The migration the database is at (None when it was never migrated)."""
    try:
        with engine.connect() as conn:
            if not sa.inspect(conn).has_table("alembic_version"):
                return None
            return conn.execute(_CURRENT).scalar()
    except sa.exc.OperationalError as exc:
        raise DatabaseError(
            f"Cannot reach the database at "
            f"{engine.url.render_as_string(hide_password=True)}: {exc.orig}"
        ) from exc


def upgrade(engine: sa.Engine, revision: str = "head") -> tuple[str | None, str]:
    """Apply migrations up to ``revision``; returns (before, after)."""
    from alembic import command

    before = current_revision(engine)
    command.upgrade(_alembic_config(engine), revision)
    after = current_revision(engine)
    assert after is not None
    return before, after


def check_migrated(engine: sa.Engine) -> str:
    """Raise :class:`NotMigrated` unless the database is at the code's head."""
    current, head = current_revision(engine), head_revision()
    if current != head:
        state = "has no Amelio tables" if current is None else f"is at migration {current}"
        raise NotMigrated(
            f"The database {state}; this version of Amelio needs {head}. "
            "Run `amelio db upgrade` (with the same --workspace / AMELIO_DATABASE_URL).",
            current=current,
            head=head,
        )
    return current


def connect(url: str, *, migrate: bool = False) -> sa.Engine:
    """An engine on a database at the head migration (applying it when ``migrate``)."""
    engine = create_engine(url)
    if migrate:
        upgrade(engine)
    else:
        check_migrated(engine)
    return engine
