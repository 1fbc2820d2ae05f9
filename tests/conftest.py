"""Shared fixtures: isolated environment, real databases (SQLite and PostgreSQL), and a
guard that keeps every test on loopback."""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from amelio.workspace.folder import Workspace, init_workspace
from support.processes import postgres_database

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
            yellow=True,
            bold=True,
        )


# -- loopback only ------------------------------------------------------------------


class NonLoopbackAccess(OSError):
    """A test tried to reach an address that is not loopback (127.0.0.0/8, ::1, localhost)."""


class NonLoopbackLookup(socket.gaierror, NonLoopbackAccess):
    """A test tried to resolve a host name other than localhost (DNS reaches the network).

    A ``socket.gaierror``, so code that handles a failed lookup sees the one it expects."""


def _is_loopback_host(host: object) -> bool:
    """``localhost`` or a loopback IP literal (IPv4-mapped IPv6 ones included)."""
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if not isinstance(host, str):
        return False
    name = host.strip("[]").rstrip(".").lower()
    if name == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(name.split("%", 1)[0])  # drop an IPv6 zone: fe80::1%eth0
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def _is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return False
    return True


def _refuse_unless_loopback(sock: socket.socket, address: Any) -> None:
    """Raise NonLoopbackAccess when an internet socket is aimed off this machine.

    Unix sockets, socket pairs and the other families pass: they never leave the host."""
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    host = address[0] if isinstance(address, tuple) and address else address
    if not _is_loopback_host(host):
        raise NonLoopbackAccess(
            f"tests may only reach loopback; attempted to connect to {address!r}"
        )


def _loopback_only_socket_api() -> dict[tuple[Any, str], Callable[..., Any]]:
    """The guarded replacements, keyed by (owner, attribute)."""
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex
    real_sendto = socket.socket.sendto
    real_sendmsg = socket.socket.sendmsg
    real_getaddrinfo = socket.getaddrinfo
    real_gethostbyname = socket.gethostbyname
    real_gethostbyname_ex = socket.gethostbyname_ex

    def connect(self: socket.socket, address: Any) -> None:
        _refuse_unless_loopback(self, address)
        return real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        _refuse_unless_loopback(self, address)
        return real_connect_ex(self, address)

    def sendto(self: socket.socket, data: Any, *args: Any) -> int:
        if args:  # sendto(data, [flags,] address)
            _refuse_unless_loopback(self, args[-1])
        return real_sendto(self, data, *args)

    def sendmsg(self: socket.socket, buffers: Any, *args: Any) -> int:
        if len(args) >= 3 and args[2] is not None:  # sendmsg(buffers, anc, flags, address)
            _refuse_unless_loopback(self, args[2])
        return real_sendmsg(self, buffers, *args)

    def check_name(host: object) -> None:
        # A name lookup other than localhost asks a DNS server: refuse it here, at once,
        # rather than let it wait for a resolver timeout. IP literals resolve locally.
        text = host.decode("ascii", "replace") if isinstance(host, bytes) else host
        if text is None or text == "" or not isinstance(text, str):
            return
        if _is_loopback_host(text) or _is_ip_literal(text):
            return
        raise NonLoopbackLookup(
            socket.EAI_NONAME,
            f"tests may only reach loopback; attempted to resolve {text!r}",
        )

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        check_name(host)
        return real_getaddrinfo(host, *args, **kwargs)

    def gethostbyname(host: str) -> str:
        check_name(host)
        return real_gethostbyname(host)

    def gethostbyname_ex(host: str) -> Any:
        check_name(host)
        return real_gethostbyname_ex(host)

    return {
        (socket.socket, "connect"): connect,
        (socket.socket, "connect_ex"): connect_ex,
        (socket.socket, "sendto"): sendto,
        (socket.socket, "sendmsg"): sendmsg,
        (socket, "getaddrinfo"): getaddrinfo,
        (socket, "gethostbyname"): gethostbyname,
        (socket, "gethostbyname_ex"): gethostbyname_ex,
    }


@pytest.fixture(scope="session", autouse=True)
def _loopback_only() -> Iterator[None]:
    """Every test, and every fixture of any scope, may reach 127.0.0.0/8, ::1, localhost
    and Unix sockets only: anything else fails at once with NonLoopbackAccess naming the
    address, so no test depends on the network or leaks to it. Subprocesses (a browser,
    a CLI) are not covered: the guard patches this interpreter's socket module."""
    with pytest.MonkeyPatch.context() as patch:
        for (owner, name), replacement in _loopback_only_socket_api().items():
            patch.setattr(owner, name, replacement)
        yield


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test sees the developer's AMELIO_* settings, API keys or working folder.

    Search exploration is off: it makes rankings random by design, so the tests of
    exploration turn it on themselves and the others see deterministic rankings.
    The service's start-up warm-up is off too (see below)."""
    for name in list(os.environ):
        if name.startswith("AMELIO_") or name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AMELIO_SEARCH_THOMPSON", "0")
    # A background warm-up thread per test server would race the tests' own
    # requests and outlive their workspaces; its own test turns it on.
    monkeypatch.setenv("AMELIO_WARM_UP", "0")
    monkeypatch.setenv("AMELIO_SEARCH_EXPLORATION", "0")
    monkeypatch.chdir(tmp_path)


@contextmanager
def _new_database(kind: str, tmp_path: Path, template: str | None = None) -> Iterator[str]:
    """A new database of ``kind``: a SQLite file, or a PostgreSQL database (empty, or
    a copy of ``template``); PostgreSQL tests are skipped, and counted, without one."""
    global _pg_skipped
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'db' / 'amelio.db'}"
        return
    if not PG_URL:
        _pg_skipped += 1
        pytest.skip("PostgreSQL tests need AMELIO_TEST_POSTGRES_URL")
    with postgres_database(PG_URL, template=template) as url:
        yield url


_KINDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


@pytest.fixture(params=_KINDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A new, empty database of each kind: a SQLite file, a PostgreSQL database."""
    with _new_database(request.param, tmp_path) as url:
        yield url


@pytest.fixture
def postgres_url(tmp_path: Path) -> Iterator[str]:
    """A new, empty PostgreSQL database, for tests of PostgreSQL alone."""
    with _new_database("postgresql", tmp_path) as url:
        yield url


@pytest.fixture(scope="session")
def _migrated_template() -> Iterator[str | None]:
    """A PostgreSQL database migrated once, that each workspace's database copies:
    hundreds of tests would otherwise each run every migration."""
    if not PG_URL:
        yield None
        return
    from amelio import db

    with postgres_database(PG_URL, prefix="amelio_template") as url:
        db.connect(url, migrate=True).dispose()  # no connection may stay open on it
        yield sa.make_url(url).database


@pytest.fixture(params=_KINDS)
def migrated_database_url(
    request: pytest.FixtureRequest, tmp_path: Path, _migrated_template: str | None
) -> Iterator[str]:
    """A new database of each kind for a workspace (which migrates it): a SQLite
    file, or a PostgreSQL copy of the migrated template."""
    with _new_database(request.param, tmp_path, _migrated_template) as url:
        yield url


@pytest.fixture
def workspace(
    tmp_path: Path, migrated_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Workspace]:
    """A migrated workspace on each database kind."""
    monkeypatch.setenv("AMELIO_DATABASE_URL", migrated_database_url)
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


#: Debian's Chromium, which the browser tests drive with Playwright (None without it).
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="session")
def chromium() -> str:
    """Chromium's path. Without it a browser test is skipped, except in CI, where it
    fails: .ci/run installs it, so a missing browser there is a broken machine."""
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("CI needs Chromium for the browser tests: apt-get install chromium")
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    return CHROMIUM
