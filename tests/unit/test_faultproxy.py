"""The suite's TCP fault proxy (tests/support/faultproxy.py), on real loopback sockets."""

from __future__ import annotations

import contextlib
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.faultproxy import FaultProxy, database_target


class Echo:
    """A server that echoes every chunk back and records what it saw."""

    def __init__(self, unix_path: str | None = None) -> None:
        if unix_path:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.bind(unix_path)
            self.target: tuple[str, int] | str = unix_path
        else:
            self.sock = socket.socket()
            self.sock.bind(("127.0.0.1", 0))
            self.target = self.sock.getsockname()
        self.sock.listen(16)
        self.accepted = 0
        self.received = b""
        self.closed = threading.Event()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self._lock:
                self.accepted += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            while True:
                try:
                    data = conn.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    self.closed.set()
                    return
                with self._lock:
                    self.received += data
                with contextlib.suppress(OSError):
                    conn.sendall(data)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def echo() -> Iterator[Echo]:
    server = Echo()
    yield server
    server.close()


@pytest.fixture
def proxy(echo: Echo) -> Iterator[FaultProxy]:
    with FaultProxy(echo.target) as p:
        yield p


def client(proxy: FaultProxy, timeout: float = 2.0) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=timeout)
    return sock


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


def test_pass_forwards_both_ways(proxy: FaultProxy, echo: Echo) -> None:
    with client(proxy) as sock:
        sock.sendall(b"hello")
        assert recv_exactly(sock, 5) == b"hello"
    assert echo.received == b"hello"
    assert proxy.bytes_up == 5
    assert proxy.bytes_down == 5


def test_blackhole_forwards_nothing_and_loses_nothing_after_heal(
    proxy: FaultProxy, echo: Echo
) -> None:
    with client(proxy) as sock:
        sock.sendall(b"one")
        assert recv_exactly(sock, 3) == b"one"
        proxy.blackhole()
        sock.settimeout(0.6)
        sock.sendall(b"two")
        with pytest.raises(TimeoutError):
            sock.recv(10)
        assert echo.received == b"one"  # not even the request reached the server
        assert proxy.connections == 1  # the connection is kept, silent
        proxy.pass_()
        sock.settimeout(2)
        assert recv_exactly(sock, 3) == b"two"
    assert echo.received == b"onetwo"


def test_a_connection_made_during_a_blackhole_is_accepted_but_reaches_nothing(
    proxy: FaultProxy, echo: Echo
) -> None:
    proxy.blackhole()
    with client(proxy) as sock:
        sock.settimeout(0.6)
        sock.sendall(b"late")
        with pytest.raises(TimeoutError):
            sock.recv(10)
        assert echo.accepted == 0
        proxy.pass_()
        sock.settimeout(2)
        assert recv_exactly(sock, 4) == b"late"
    assert echo.accepted == 1


def test_delay_adds_latency_each_way_per_chunk(proxy: FaultProxy) -> None:
    with client(proxy) as sock:
        t0 = time.monotonic()
        sock.sendall(b"x")
        recv_exactly(sock, 1)
        base = time.monotonic() - t0
        proxy.delay(150)
        t0 = time.monotonic()
        sock.sendall(b"y")
        assert recv_exactly(sock, 1) == b"y"
        slow = time.monotonic() - t0
    assert slow >= 0.3  # 150 ms up + 150 ms down
    assert slow < base + 1.0


def test_delay_is_latency_not_a_throughput_limit(proxy: FaultProxy) -> None:
    proxy.delay(200)
    with client(proxy) as sock:
        t0 = time.monotonic()
        for i in range(10):
            sock.sendall(bytes([65 + i]))
            time.sleep(0.01)
        data = recv_exactly(sock, 10)
        took = time.monotonic() - t0
    assert data == b"ABCDEFGHIJ"
    assert took < 1.5  # ten chunks in flight together, not 10 times 400 ms


def test_reset_sends_rst_to_the_client_and_drops_the_upstream(
    proxy: FaultProxy, echo: Echo
) -> None:
    with client(proxy) as sock:
        sock.sendall(b"a")
        recv_exactly(sock, 1)
        assert proxy.reset() == 1
        with pytest.raises(ConnectionResetError):
            sock.sendall(b"b")
            sock.recv(10)
    assert echo.closed.wait(2)
    # The proxy itself keeps serving new connections.
    with client(proxy) as sock:
        sock.sendall(b"c")
        assert recv_exactly(sock, 1) == b"c"


def test_refuse_resets_new_connections_until_healed(proxy: FaultProxy, echo: Echo) -> None:
    proxy.refuse()
    with pytest.raises(ConnectionResetError), client(proxy) as sock:  # at connect or after
        sock.sendall(b"a")
        time.sleep(0.1)
        sock.sendall(b"b")
        sock.recv(10)
    assert echo.accepted == 0
    proxy.pass_()
    with client(proxy) as sock:
        sock.sendall(b"ok")
        assert recv_exactly(sock, 2) == b"ok"


def test_arm_blackholes_right_after_the_matching_request_reached_the_server(
    proxy: FaultProxy, echo: Echo
) -> None:
    proxy.arm(b"CLAIM", then="blackhole")
    with client(proxy) as sock:
        sock.sendall(b"select")
        assert recv_exactly(sock, 6) == b"select"
        assert not proxy.armed.is_set()
        sock.sendall(b"CLAIM it")
        assert proxy.armed.wait(2)
        sock.settimeout(0.6)
        with pytest.raises(TimeoutError):
            sock.recv(10)  # the reply is held back
        assert echo.received.endswith(b"CLAIM it")  # but the statement ran
        proxy.pass_()
        sock.settimeout(2)
        assert recv_exactly(sock, 8) == b"CLAIM it"


def test_unix_socket_target_and_database_target() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / ".s.PGSQL.5432")
        server = Echo(unix_path=path)
        assert database_target({"HOST": tmp, "PORT": ""}) == path
        assert database_target({"HOST": "db.example", "PORT": "6543"}) == ("db.example", 6543)
        try:
            with FaultProxy(path) as proxy, client(proxy) as sock:
                sock.sendall(b"via unix")
                assert recv_exactly(sock, 8) == b"via unix"
                url = proxy.database_url({"USER": "u", "PASSWORD": "p@ss", "NAME": "test_db"})
                assert url == f"postgresql://u:p%40ss@127.0.0.1:{proxy.port}/test_db"
        finally:
            server.close()
