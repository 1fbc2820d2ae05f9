"""Any ASGI app on a real loopback port, served by uvicorn in a background thread."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Any, Literal, Self

import uvicorn

__all__ = ["ThreadedServer"]

#: Hosts that mean every interface, and the loopback address a client uses for each.
_WILDCARDS = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}  # noqa: S104


def _serve(server: uvicorn.Server) -> None:
    # uvicorn exits (SystemExit) when it cannot bind: start() reports that as an error,
    # and the thread must end quietly rather than as an unhandled thread exception.
    with contextlib.suppress(SystemExit):
        server.run()


class ThreadedServer:
    """An ASGI ``app`` served by uvicorn in a background thread, for end-to-end tests
    over real HTTP.

    ``with ThreadedServer(create_app(ws)) as server: httpx.get(server.url + ...)``,
    or call :meth:`start` and :meth:`stop`. It listens on ``host`` (loopback by
    default) at ``port``; 0, the default, takes a free port, so that tests running
    side by side never collide, and a fixed one is for a server people point
    other programs at (``python -m amelio.testing fake-llm``). ``lifespan="on"``
    runs the app's start-up and shut-down (background workers). The fake servers of
    this kit subclass it and set ``app`` themselves; :meth:`_wake` releases what
    waits on such a server (long polls, scripted hangs) as it stops.
    """

    app: Any

    def __init__(
        self,
        app: Any = None,
        *,
        lifespan: Literal["on", "off"] = "off",
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        if app is not None:
            self.app = app
        self.lifespan = lifespan
        self.host, self.port = host, port
        self._stopping = threading.Event()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._port = 0

    @property
    def url(self) -> str:
        """The server's root, e.g. ``http://127.0.0.1:54321``: where a client on this
        machine reaches it (loopback when it listens on every interface)."""
        if not self._port:
            raise RuntimeError(f"{type(self).__name__} is not running: call start() or use `with`.")
        host = _WILDCARDS.get(self.host, self.host)
        return f"http://[{host}]:{self._port}" if ":" in host else f"http://{host}:{self._port}"

    def start(self, timeout: float = 10.0) -> Self:
        """Start serving; return once the port accepts connections. A port that
        cannot be had (in use, not allowed) is a :class:`RuntimeError`."""
        if self._thread is not None:
            return self
        self._stopping.clear()
        # h11/asyncio/no websockets: no optional extras, no deprecation warnings;
        # log_config=None: a test helper must not reconfigure the host's logging.
        config = uvicorn.Config(
            self.app,
            host=self.host,
            port=self.port,
            http="h11",
            ws="none",
            loop="asyncio",
            lifespan=self.lifespan,
            log_config=None,
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=2,
        )
        server = uvicorn.Server(config)
        name = f"amelio-{type(self).__name__}"
        thread = threading.Thread(target=_serve, args=(server,), name=name, daemon=True)
        self._server, self._thread = server, thread
        thread.start()
        deadline = time.monotonic() + timeout
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"{type(self).__name__} did not start (see the uvicorn log above)."
                )
            time.sleep(0.005)
        self._port = server.servers[0].sockets[0].getsockname()[1]
        with socket.create_connection((_WILDCARDS.get(self.host, self.host), self._port), timeout):
            pass
        return self

    def _wake(self) -> None:
        """Release whatever waits on the server, so that it can stop at once."""

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server and join its thread; waiting responses are cut short."""
        self._stopping.set()
        self._wake()
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise RuntimeError(f"{type(self).__name__}'s thread did not stop in time.")
        self._server, self._thread, self._port = None, None, 0

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
