"""Hostile HTTP targets (failure contract C8: docs/explanation/failure-contract.md; the
rules: docs/explanation/security.md, "The SSRF guard"): tarpits, huge and
endless bodies, and SSRF — loopback names, encoded addresses, redirects, rebinding."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from django.conf import settings

from dispatch.models import Execution
from dispatch.targets import http
from dispatch.targets.runtime import RunContext
from tenants.roles import Principal
from tests.support.ledger import Ledger
from tests.support.procs import Proc, wait_for
from tests.support.worker_support import (
    ONE_SHOT,
    final,
    make_execution,
    make_schedule,
    peak_rss_mb,
    pool_children,
    publish,
)

pytestmark = pytest.mark.django_db(transaction=True)
HUGE = 200 * 1024 * 1024


class RawServer:
    """A TCP server whose every connection is handled by `handle(sock)` in its own thread."""

    def __init__(self, handle: Callable[[socket.socket], None], host: str = "127.0.0.1") -> None:
        self.handle = handle
        self.connections = 0
        self.closed = threading.Event()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, 0))
        self.sock.listen(64)
        self.host, self.port = host, self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._run, args=(conn,), daemon=True).start()

    def _run(self, conn: socket.socket) -> None:
        try:
            _read_request(conn)
            self.handle(conn)
        except OSError:
            pass
        finally:
            conn.close()

    @property
    def allow_entry(self) -> str:
        return f"{self.host}:{self.port}"

    def url(self, host: str | None = None) -> str:
        return f"http://{host or self.host}:{self.port}/"

    def close(self) -> None:
        self.closed.set()
        self.sock.close()


def _read_request(conn: socket.socket) -> None:
    conn.settimeout(5)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            return
        data += chunk


def trickle_body(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")
    while True:
        conn.sendall(b"x")
        time.sleep(0.05)


def trickle_status_line(conn: socket.socket) -> None:
    for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"y" * 100000:
        conn.sendall(bytes([byte]))
        time.sleep(0.05)


def huge_body(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % HUGE)
    block = b"z" * (1024 * 1024)
    for _ in range(HUGE // len(block)):
        conn.sendall(block)


def endless_body(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    block = b"e" * (256 * 1024)
    chunk = b"%x\r\n%s\r\n" % (len(block), block)
    while True:
        conn.sendall(chunk)


def canary(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\ncanary")


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, RawServer]]:
    made = {
        "trickle_body": RawServer(trickle_body),
        "trickle_status": RawServer(trickle_status_line),
        "huge": RawServer(huge_body),
        "endless": RawServer(endless_body),
        "canary2": RawServer(canary, host="127.0.0.2"),
        "canary1": RawServer(canary),  # on 127.0.0.1 but not allow-listed
    }
    yield made
    for server in made.values():
        server.close()


@pytest.fixture(scope="module")
def worker_settings(servers: dict[str, RawServer], module_ledger: Ledger) -> dict[str, Any]:
    allowed = [s.allow_entry for n, s in servers.items() if not n.startswith("canary")]
    return {"TARGET_TEST_ALLOW": ",".join([*allowed, module_ledger.allow_entry])}


def run_once(principal: Principal, url: str, *, timeout_s: int = 2) -> Execution:
    target = {"type": "http", "url": url, "method": "GET"}
    execution = make_execution(
        make_schedule(principal, target, retry=ONE_SHOT, timeout_s=timeout_s)
    )
    publish(execution.id, 1)
    wait_for(final(execution), timeout=20, what=f"{url} to finish")
    execution.refresh_from_db()
    return execution


@pytest.mark.slow
@pytest.mark.parametrize("server", ["trickle_body", "trickle_status", "endless"])
def test_slow_or_endless_response_ends_at_the_total_deadline(
    worker: Proc, servers: dict[str, RawServer], admin_principal: Principal, server: str
) -> None:
    execution = run_once(admin_principal, servers[server].url(), timeout_s=2)
    assert execution.state == "dead" and execution.reason_code == "timeout", worker.output()[-2000:]
    assert execution.started_at is not None and execution.finished_at is not None
    took = (execution.finished_at - execution.started_at).total_seconds()
    assert 1.9 <= took <= 3.5, took
    assert "2 s timeout" in execution.error
    assert len(execution.log_excerpt) <= settings.RESPONSE_EXCERPT_BYTES + 100
    if server != "trickle_status":
        assert execution.status_code == 200 and execution.log_excerpt[:1] in {"x", "e"}


@pytest.mark.slow
def test_huge_body_is_streamed_and_discarded_memory_stays_flat(
    worker: Proc, servers: dict[str, RawServer], admin_principal: Principal
) -> None:
    execution = run_once(admin_principal, servers["huge"].url(), timeout_s=20)
    assert execution.state == "succeeded", execution.error
    assert execution.log_excerpt.startswith("z" * settings.RESPONSE_EXCERPT_BYTES)
    assert f"{HUGE - settings.RESPONSE_EXCERPT_BYTES} bytes not stored" in execution.log_excerpt
    assert len(execution.log_excerpt) < settings.RESPONSE_EXCERPT_BYTES + 100
    peaks = [peak_rss_mb(pid) for pid in pool_children(worker)]
    assert peaks and max(peaks) < 150, f"pool peak RSS {peaks} MB after a {HUGE >> 20} MB body"


@pytest.mark.slow
@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.2",  # loopback literal
        "2130706434",  # 127.0.0.2 spelt as one number
        "0x7f.0.0.2",  # and in hex
        "[::ffff:127.0.0.2]",  # IPv4-mapped IPv6
        "localhost",  # a name that resolves to loopback (canary1 on 127.0.0.1)
    ],
)
def test_targets_reaching_loopback_are_refused_before_connecting(
    worker: Proc, servers: dict[str, RawServer], admin_principal: Principal, host: str
) -> None:
    server = servers["canary1"] if host == "localhost" else servers["canary2"]
    before = server.connections
    execution = run_once(admin_principal, f"http://{host}:{server.port}/")
    assert execution.state == "dead" and execution.reason_code == "ssrf_denied"
    assert execution.attempt == 1 and "not called" in execution.error
    assert "loopback" in execution.error
    assert server.connections == before == 0


@pytest.mark.slow
def test_metadata_address_is_refused(worker: Proc, admin_principal: Principal) -> None:
    execution = run_once(admin_principal, "http://169.254.169.254/latest/meta-data/")
    assert execution.state == "dead" and execution.reason_code == "ssrf_denied"
    assert "metadata" in execution.error


@pytest.mark.slow
def test_redirects_are_not_followed(
    worker: Proc, servers: dict[str, RawServer], module_ledger: Ledger, admin_principal: Principal
) -> None:
    canary2 = servers["canary2"]
    module_ledger.respond = lambda req: (302, {"Location": canary2.url()}, b"")
    execution = run_once(admin_principal, f"{module_ledger.url}/hook")
    assert execution.state == "dead" and execution.reason_code == "redirect"
    assert execution.status_code == 302 and "redirects are not followed" in execution.error
    assert canary2.connections == 0


# --- in-process: the resolver is the one thing we cannot make hostile for real here ---


def context(url: str) -> RunContext:
    return RunContext(
        execution_id=str(uuid.uuid4()),
        scheduled_for=datetime.now(UTC),
        attempt=1,
        fencing_token=7,
        tenant_id=1,
        tenant_slug="billing",
        signing_key="k" * 64,
        egress_allow=[],
        target={"type": "http", "url": url, "method": "GET"},
        timeout_s=5,
        excerpt_bytes=1024,
        resolve_secret=lambda ref: "",
    )


def fake_resolver(answers: list[list[str]]) -> Callable[..., Any]:
    calls = iter(answers)

    def getaddrinfo(host: str, port: int, *args: Any, **kwargs: Any) -> list[Any]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, port)) for ip in next(calls)]

    return getaddrinfo


def test_connects_to_the_checked_address_and_never_resolves_again(
    monkeypatch: pytest.MonkeyPatch,
    settings: Any,
    servers: dict[str, RawServer],
    ledger: Ledger,
) -> None:
    settings.TARGET_TEST_ALLOW = [ledger.allow_entry]
    # First answer: the allowed receiver; any later lookup would say loopback canary.
    monkeypatch.setattr(socket, "getaddrinfo", fake_resolver([["127.0.0.1"], ["127.0.0.2"]]))
    outcome = http.run(context(f"http://rebind.example:{ledger.port}/x"))
    assert outcome.ok, outcome.error
    [req] = ledger.requests
    assert req["headers"]["Host"] == f"rebind.example:{ledger.port}"
    assert servers["canary2"].connections == 0


def test_every_resolved_address_is_checked(
    monkeypatch: pytest.MonkeyPatch, settings: Any, ledger: Ledger
) -> None:
    settings.TARGET_TEST_ALLOW = [ledger.allow_entry]
    monkeypatch.setattr(socket, "getaddrinfo", fake_resolver([["127.0.0.1", "127.0.0.2"]]))
    outcome = http.run(context(f"http://mixed.example:{ledger.port}/x"))
    assert not outcome.ok and not outcome.retryable and outcome.reason_code == "ssrf_denied"
    assert "127.0.0.2" in outcome.error
    assert ledger.requests == []
