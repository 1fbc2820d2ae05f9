"""Migrations on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from amelio import db
from amelio.db.schema import metadata, projects
from amelio.errors import DatabaseError, NotMigrated


def test_upgrade_creates_schema_matching_the_code(database_url: str) -> None:
    engine = db.create_engine(database_url)
    try:
        assert db.current_revision(engine) is None
        before, after = db.upgrade(engine)
        assert (before, after) == (None, db.head_revision())
        assert db.upgrade(engine) == (after, after)  # idempotent
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), metadata)
            names = conn.scalars(sa.select(projects.c.name)).all()
        assert diff == [], f"migrations and schema.py disagree: {diff}"
        assert names == ["default"]
    finally:
        engine.dispose()


def test_connect_refuses_an_unmigrated_database(database_url: str) -> None:
    with pytest.raises(NotMigrated, match="amelio db upgrade") as info:
        db.connect(database_url)
    assert info.value.details["head"] == db.head_revision()
    engine = db.connect(database_url, migrate=True)
    engine.dispose()
    db.connect(database_url).dispose()


def test_sqlite_runs_in_wal_with_foreign_keys(tmp_path: Path) -> None:
    engine = db.connect(f"sqlite:///{tmp_path / 'a.db'}", migrate=True)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        with pytest.raises(sa.exc.IntegrityError):
            conn.exec_driver_sql(
                "INSERT INTO skill_versions (skill_id, version, description, triggers, keywords,"
                " extra, content, content_hash, author, reason, created_at) VALUES (999, 1, '',"
                " '[]', '[]', '{}', '', '', 'a', 'r', '2026-01-01')"
            )
    engine.dispose()


def test_unreachable_database_is_a_clear_error() -> None:
    engine = db.create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none")
    with pytest.raises(DatabaseError, match="Cannot reach the database"):
        db.current_revision(engine)


@pytest.mark.postgres
def test_postgres_replaces_a_pooled_connection_that_died_while_idle(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The idle ping in place of pool_pre_ping: a connection whose server side was
    killed while it sat in the pool is replaced unseen, and a connection back in
    the pool a moment ago is handed out without a ping (no round trip per request)."""
    engine = db.create_engine(postgres_url, pool_size=1, max_overflow=0)
    pings: list[str] = []
    real_ping = engine.dialect.do_ping
    monkeypatch.setattr(engine.dialect, "do_ping", lambda c: pings.append("ping") or real_ping(c))
    try:
        with engine.connect() as conn:
            first = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
        with engine.connect() as conn:  # back a moment ago: no ping
            assert conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one() == first
        assert pings == []
        admin = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as other:
            other.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": first})
        admin.dispose()
        monkeypatch.setattr(db.engine, "PING_AFTER_IDLE_S", 0.0)
        with engine.connect() as conn:  # idle "long enough": pinged, found dead, replaced
            second = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
        assert pings == ["ping"]
        assert second != first
    finally:
        engine.dispose()


def test_the_head_revision_constant_is_alembics_head() -> None:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from amelio.db.engine import _MIGRATIONS, HEAD_REVISION

    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    assert ScriptDirectory.from_config(cfg).get_current_head() == HEAD_REVISION
