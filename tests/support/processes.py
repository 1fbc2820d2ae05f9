"""Processes and databases the test suite, the benchmarks and the CI fuzzer start.

Repository plumbing, not a kit for plugin authors (that is :mod:`amelio.testing`):
``amelio serve`` in a process of its own, a throwaway PostgreSQL database, a free
port, and the probe that measures what ``amelio`` imports at start-up.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Self

import httpx

__all__ = ["IMPORT_PROBE", "ServeProcess", "free_port", "import_time", "postgres_database"]

#: A ``python -c`` script that runs ``amelio ARGS`` as ``python -m amelio`` does, for
#: measuring start-up under ``python -X importtime`` (tests/test_cli_startup.py,
#: benchmarks/cli_startup.py). ``importlib.import_module`` (which the lazy command
#: group and the plugins use) goes through ``__import__``, so that ``-X importtime``,
#: which logs only import statements, counts the modules it loads; with
#: $STARTUP_MODULES_OUT set, every module left in ``sys.modules`` is written there.
IMPORT_PROBE = """
import atexit, importlib, json, os, runpy, sys
out = os.environ.get("STARTUP_MODULES_OUT")
if out:
    atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
_import_module = importlib.import_module
def _logged(name, package=None):
    if package or name.startswith("."):
        return _import_module(name, package)
    __import__(name)
    return sys.modules[name]
importlib.import_module = _logged
sys.argv = ["amelio", *sys.argv[1:]]
runpy.run_module("amelio", run_name="__main__", alter_sys=True)
"""


def import_time(stderr: str) -> tuple[float, list[str]]:
    """From ``python -X importtime`` output: the sum of the top-level cumulative
    entries in ms (everything the process imported) and every module, in order."""
    total_us, modules = 0, []
    for line in stderr.splitlines():
        fields = line.removeprefix("import time:").split("|")
        if (
            not line.startswith("import time:")
            or len(fields) != 3
            or not fields[1].strip().isdigit()
        ):
            continue  # other output, or the header line
        modules.append(fields[2].strip())
        if not fields[2].startswith("  ", 1):  # nested imports are indented by two spaces
            total_us += int(fields[1])
    return total_us / 1000, modules


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServeProcess:
    """``amelio serve`` on ``workspace`` in its own process, on a free loopback port.

    Entering starts it and waits until ``/v1/health`` answers 200 (a server that
    exits or stays silent for ``timeout`` seconds is a :class:`RuntimeError` quoting
    the end of its log); leaving stops it. For benchmarks, the CI fuzzer and tests
    that must not share an interpreter (and its GIL) with the server they measure.
    """

    def __init__(
        self,
        workspace: Path,
        *,
        workers: int = 1,
        env: dict[str, str] | None = None,
        log: Path | None = None,
        timeout: float = 60.0,
    ) -> None:
        self.workspace = workspace
        self.workers = workers
        self.env = env
        self.log = log or workspace / "serve.log"
        self.timeout = timeout
        self.base = ""
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Self:
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        with self.log.open("wb") as out:  # the child keeps its own descriptor
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "amelio",
                    "--workspace",
                    str(self.workspace),
                    "serve",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--workers",
                    str(self.workers),
                ],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                if httpx.get(f"{self.base}/v1/health", timeout=5).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.__exit__()
        tail = self.log.read_text(encoding="utf-8", errors="replace")[-3000:]
        raise RuntimeError(f"amelio serve did not start:\n{tail}")

    @property
    def pid(self) -> int:
        assert self.process is not None, "not started"
        return self.process.pid

    def cpu_seconds(self) -> float | None:
        """The server process's user + system CPU seconds (Linux), else None."""
        if self.process is None:
            return None
        try:
            stat_line = Path(f"/proc/{self.process.pid}/stat").read_text()
        except OSError:
            return None
        fields = stat_line.rsplit(")", 1)[1].split()  # after the name, which may hold spaces
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def __exit__(self, *exc_info: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@contextmanager
def postgres_database(
    server_url: str, *, prefix: str = "amelio_test", template: str | None = None
) -> Iterator[str]:
    """A new, empty PostgreSQL database on the server at ``server_url`` (whose own
    database is only used to create and drop it); yields its URL and drops it,
    connections and all, afterwards. For tests, benchmarks and fuzzing runs that
    must not share state. ``template`` names a database to copy instead (one
    migrated once: PostgreSQL copies it in a fraction of the migrations' time)."""
    import sqlalchemy as sa

    admin = sa.create_engine(server_url, isolation_level="AUTOCOMMIT")
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    copy = f' TEMPLATE "{template}"' if template else ""
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"{copy}'))
        yield admin.url.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
