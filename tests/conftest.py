"""Shared fixtures: isolated environment, real databases (SQLite and PostgreSQL)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from amelio.testing import postgres_database
from amelio.workspace import Workspace, init_workspace

PG_URL = os.environ.get("AMELIO_TEST_POSTGRES_URL", "")
EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "skills"
_pg_skipped = 0


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("CI") and not PG_URL:
        raise pytest.UsageError(
            "CI must run the PostgreSQL tests: set AMELIO_TEST_POSTGRES_URL "
            "(e.g. postgresql+psycopg://postgres@127.0.0.1:5432/postgres)."
        )


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _pg_skipped:
        terminalreporter.write_line(
            f"NOTE: {_pg_skipped} PostgreSQL test(s) were SKIPPED because "
            "AMELIO_TEST_POSTGRES_URL is not set; CI runs them.",
            yellow=True, bold=True,
        )


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test sees the developer's AMELIO_* settings, API keys or working folder.

    Search exploration is off: it makes rankings random by design, so the tests of
    exploration turn it on themselves and the others see deterministic rankings."""
    for name in list(os.environ):
        if name.startswith("AMELIO_") or name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AMELIO_SEARCH_THOMPSON", "0")
    monkeypatch.setenv("AMELIO_SEARCH_EXPLORATION", "0")
    monkeypatch.chdir(tmp_path)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A new, empty database of each kind: a SQLite file, a PostgreSQL database."""
    global _pg_skipped
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'db' / 'amelio.db'}"
        return
    if not PG_URL:
        _pg_skipped += 1
        pytest.skip("PostgreSQL tests need AMELIO_TEST_POSTGRES_URL")
    with postgres_database(PG_URL) as url:
        yield url


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A new, empty PostgreSQL database, for tests of PostgreSQL alone."""
    global _pg_skipped
    if not PG_URL:
        _pg_skipped += 1
        pytest.skip("PostgreSQL tests need AMELIO_TEST_POSTGRES_URL")
    with postgres_database(PG_URL) as url:
        yield url


@pytest.fixture
def workspace(tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
              ) -> Iterator[Workspace]:
    """A migrated workspace on each database kind."""
    monkeypatch.setenv("AMELIO_DATABASE_URL", database_url)
    ws, _ = init_workspace(tmp_path / "ws")
    yield ws
    ws.dispose()


@pytest.fixture
def sqlite_workspace(tmp_path: Path) -> Iterator[Workspace]:
    """A migrated workspace on its default SQLite file (for tests of non-storage logic)."""
    ws, _ = init_workspace(tmp_path / "ws")
    yield ws
    ws.dispose()


@pytest.fixture
def examples() -> Path:
    return EXAMPLES
