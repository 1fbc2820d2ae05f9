"""The loopback-only guard of conftest.py: off-machine addresses fail at once, loopback works.

192.0.2.1 is TEST-NET-1 (RFC 5737): nothing answers there, so an unguarded connect
would wait out its 30 s timeout (or fail with the network's own error) instead of
raising the guard's NonLoopbackAccess before any packet leaves.
"""

from __future__ import annotations

import asyncio
import errno
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from conftest import NonLoopbackAccess, NonLoopbackLookup

REFUSED = "tests may only reach loopback; attempted to connect to"
TEST_NET = "192.0.2.1"
RESOLVE = re.escape("tests may only reach loopback; attempted to resolve 'example.com'")


@pytest.fixture
def tcp_server() -> Iterator[socket.socket]:
    """A listening TCP socket on 127.0.0.1 (the kernel completes connects to its backlog)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        server.settimeout(10)
        yield server


def _pong(server: socket.socket, client: socket.socket) -> None:
    """Accept the client's connection and prove bytes flow both ways."""
    conn, _ = server.accept()
    with conn:
        client.sendall(b"ping")
        assert conn.recv(4) == b"ping"
        conn.sendall(b"pong")
        assert client.recv(4) == b"pong"


@pytest.fixture(scope="module")
def refused_during_module_setup() -> str:
    """What a connect off loopback does in a module-scoped fixture, set up before any test."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        try:
            sock.connect((TEST_NET, 80))
        except NonLoopbackAccess as refused:
            return str(refused)
    return "connected"


def _tcp(timeout: float = 30) -> socket.socket:
    # The long timeout is what an unguarded connect to TEST-NET would sit through.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    return sock


def test_connect_off_loopback_is_refused_naming_the_address() -> None:
    with _tcp() as sock:
        with pytest.raises(NonLoopbackAccess) as refused:
            sock.connect((TEST_NET, 80))
        # Refused before any packet: the socket never started connecting.
        with pytest.raises(OSError, match="not connected") as unconnected:
            sock.getpeername()
        assert unconnected.value.errno == errno.ENOTCONN
    assert str(refused.value) == f"{REFUSED} ('{TEST_NET}', 80)"
    assert isinstance(refused.value, OSError)


def test_every_way_of_reaching_off_loopback_is_refused() -> None:
    with _tcp() as sock, pytest.raises(NonLoopbackAccess, match=f"{REFUSED} .*{TEST_NET}"):
        sock.connect_ex((TEST_NET, 443))
    with pytest.raises(NonLoopbackAccess, match=f"{REFUSED} .*{TEST_NET}"):
        socket.create_connection((TEST_NET, 80), timeout=30)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        with pytest.raises(NonLoopbackAccess, match=f"{REFUSED} .*{TEST_NET}"):
            udp.sendto(b"x", (TEST_NET, 53))
        with pytest.raises(NonLoopbackAccess, match=f"{REFUSED} .*{TEST_NET}"):
            udp.sendto(b"x", 0, (TEST_NET, 53))
        with pytest.raises(NonLoopbackAccess, match=f"{REFUSED} .*{TEST_NET}"):
            udp.sendmsg([b"x"], [], 0, (TEST_NET, 53))
    with (
        socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock6,
        pytest.raises(NonLoopbackAccess, match=f"{REFUSED} .*2001:db8::1"),
    ):
        sock6.connect(("2001:db8::1", 80, 0, 0))  # IPv6 documentation prefix
    # Outside 127.0.0.0/8, even this host's "any" address, and mapped non-loopback IPv6.
    for host in ("0.0.0.0", "::ffff:192.0.2.1", "128.0.0.1"):
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with (
            socket.socket(family, socket.SOCK_STREAM) as sock,
            pytest.raises(NonLoopbackAccess, match=REFUSED),
        ):
            sock.connect((host, 80))


def test_name_lookups_other_than_localhost_are_refused() -> None:
    with pytest.raises(NonLoopbackLookup, match=RESOLVE):
        socket.getaddrinfo("example.com", 443)
    with pytest.raises(socket.gaierror, match=RESOLVE):
        socket.gethostbyname("example.com")
    with pytest.raises(NonLoopbackLookup):
        socket.gethostbyname_ex("example.com")
    with pytest.raises(NonLoopbackLookup, match=RESOLVE):
        socket.create_connection(("example.com", 80), timeout=30)
    # A name the C library would resolve inside connect() itself is refused too.
    with _tcp() as sock, pytest.raises(NonLoopbackAccess, match=f"{REFUSED} .*example.com"):
        sock.connect(("example.com", 80))


def test_http_clients_and_asyncio_hit_the_guard() -> None:
    with pytest.raises(httpx.ConnectError, match=f"{REFUSED} .*{TEST_NET}"):
        httpx.get(f"http://{TEST_NET}/", timeout=30)

    async def open_off_loopback() -> None:
        await asyncio.wait_for(asyncio.open_connection(TEST_NET, 80), timeout=30)

    with pytest.raises(NonLoopbackAccess, match=f"{REFUSED} .*{TEST_NET}"):
        asyncio.run(open_off_loopback())


def test_loopback_still_works(tcp_server: socket.socket) -> None:
    host, port = tcp_server.getsockname()
    assert host == "127.0.0.1"
    with _tcp(10) as sock:
        sock.connect((host, port))
        _pong(tcp_server, sock)
    with _tcp(10) as sock:
        assert sock.connect_ex((host, port)) == 0
        _pong(tcp_server, sock)
    with socket.create_connection(("localhost", port), timeout=10) as sock:
        _pong(tcp_server, sock)
    assert {info[4][0] for info in socket.getaddrinfo("localhost", port, socket.AF_INET)} == {
        "127.0.0.1"
    }
    assert socket.gethostbyname("localhost") == "127.0.0.1"

    with (
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as receiver,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender,
    ):
        receiver.bind(("127.0.0.1", 0))
        receiver.settimeout(10)
        sender.sendto(b"ping", receiver.getsockname())
        assert receiver.recv(16) == b"ping"


def test_unix_sockets_and_socket_pairs_pass(tmp_path: Path) -> None:
    left, right = socket.socketpair()
    with left, right:
        left.sendall(b"hi")
        assert right.recv(2) == b"hi"
    path = str(tmp_path / "s.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(path)
        server.listen()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(path)
            conn, _ = server.accept()
            with conn:
                client.sendall(b"unix")
                assert conn.recv(4) == b"unix"


def test_the_guard_also_covers_fixtures_of_wider_scope(refused_during_module_setup: str) -> None:
    assert refused_during_module_setup == f"{REFUSED} ('{TEST_NET}', 80)"
