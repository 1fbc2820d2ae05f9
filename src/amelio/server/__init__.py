"""The HTTP service: a thin layer over the library (nothing imports it back)."""

import asyncio
import socket

from fastapi import FastAPI
from uvicorn.protocols.http.h11_impl import H11Protocol

from amelio.server.app import create_app
from amelio.workspace.folder import open_workspace

__all__ = ["NoDelayH11Protocol", "app_from_env", "create_app"]


def app_from_env() -> FastAPI:
    """The service for the workspace that ``AMELIO_WORKSPACE`` (else the nearest
    ``amelio.toml``) names, with the ``AMELIO_*`` settings of the environment.

    The factory ``amelio serve --workers N`` hands uvicorn (``factory=True``):
    uvicorn starts each worker from an import string, so a worker cannot be given
    an app object built in the parent; each one opens the workspace itself.
    """
    return create_app(open_workspace())


class NoDelayH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with Nagle's algorithm off on every connection.

    With ``--workers N`` uvicorn's parent binds the listening socket without
    ``IPPROTO_TCP``, so asyncio never sets ``TCP_NODELAY`` on the connections the
    workers accept (Kludex/uvicorn#3149): on a keep-alive connection each response
    body then waits for the client's delayed ACK, about 40 ms on Linux, on every
    request after the first. ``benchmarks/load.py`` measured it as a 56 ms p50 on
    requests that take 10 ms with one worker.
    """

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().connection_made(transport)
