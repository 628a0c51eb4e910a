"""For the Python client's tests (tests/integration/client): a live server per
module, tenants with tokens, and a transport that records what went over the wire.

The client runs in the test process (imported from clients/python, not
installed), against gunicorn serving the test database."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tenants import services as tenant_services
from tenants.roles import Role
from tests.support.procs import ROOT, WebServer, processes

CLIENT_DIR = ROOT / "clients" / "python"
if str(CLIENT_DIR) not in sys.path:  # the package as the repository has it
    sys.path.insert(0, str(CLIENT_DIR))

from scheduler_client.client import KEEPALIVE_EXPIRY_S, Client  # noqa: E402  # isort: skip

TARGET = {"type": "http", "url": "https://billing.internal/hook", "method": "POST"}


@contextlib.contextmanager
def live_server(log_dir: Path, **env: str) -> Iterator[WebServer]:
    """gunicorn on the test database; a throttle high enough not to matter unless a
    test module sets API_RATE_LIMIT itself."""
    env.setdefault("API_RATE_LIMIT", "1000000/min")
    with processes(log_dir) as start:
        yield WebServer(start, WEB_WORKERS="1", WEB_THREADS="8", **env)


@dataclass
class Tenant:
    slug: str
    token: str
    id: str


def make_tenant(slug: str, role: Role = Role.ADMIN) -> Tenant:
    tenant = tenant_services.tenant_create(slug=slug, name=slug.title())
    _, token = tenant_services.token_issue(tenant=tenant, name=f"{slug}-{role.label}", role=role)
    return Tenant(slug, token, str(tenant.id))


def extra_token(slug: str, role: Role) -> str:
    from tenants.models import Tenant as TenantModel

    tenant = TenantModel.objects.get(slug=slug)
    _, token = tenant_services.token_issue(tenant=tenant, name=f"{slug}-{role.label}", role=role)
    return token


def definition(name: str, cron: str = "0 9 * * 1-5", **extra: Any) -> dict[str, Any]:
    return {"name": name, "cron": cron, "timezone": "Europe/Amsterdam", "target": TARGET} | extra


@dataclass
class Exchange:
    method: str
    path: str
    status: int | None  # None: no answer (a connection error)
    sent: float  # time.monotonic() when the request went out
    answered: float  # ... and when the answer (or the error) came back
    error: str | None = None  # no answer: the transport error, "Type: message"


class Recorder(httpx.HTTPTransport):
    """The real HTTP transport, noting every exchange (and calling `on_response`,
    e.g. to heal a fault once the error it caused has been seen)."""

    def __init__(self, on_response: Callable[[httpx.Response], None] | None = None) -> None:
        # The pool settings the client gives its own transport.
        super().__init__(limits=httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY_S))
        self.on_response = on_response
        self.exchanges: list[Exchange] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        sent = time.monotonic()
        try:
            response = super().handle_request(request)
        except httpx.TransportError as exc:
            error = f"{type(exc).__name__}: {exc}"
            self.exchanges.append(
                Exchange(request.method, request.url.path, None, sent, time.monotonic(), error)
            )
            raise
        response.read()  # the whole answer, so `answered` is when it was in
        self.exchanges.append(
            Exchange(request.method, request.url.path, response.status_code, sent, time.monotonic())
        )
        if self.on_response is not None:
            self.on_response(response)
        return response

    def statuses(self) -> list[int | None]:
        return [e.status for e in self.exchanges]


@dataclass
class Load:
    """One client's requests during a database fault, and what became of them."""

    recorder: Recorder = field(default_factory=Recorder)
    keys: list[str] = field(default_factory=list)  # jobs the client was told it made
    failures: list[Exception] = field(default_factory=list)
    slowest_s: float = 0.0


def drive(
    url: str,
    token: str,
    name: str,
    load: Load,
    stop: threading.Event,
    job: Callable[[str], dict[str, Any]] = lambda key: {"idempotency_key": key, "target": TARGET},
) -> None:
    """Create a keyed job (`job(key)` its body), read it back, list the jobs; again
    until `stop`. The client's default retry limits: a fail-over must fit in them."""
    with Client(url, token, transport=load.recorder) as client:
        i = 0
        while not stop.is_set():
            i += 1
            key = f"{name}-{i}"
            started = time.monotonic()
            try:
                made = client.create_job(job(key))
                load.keys.append(key)
                assert client.get_job(made.id).id == made.id
                client.request("GET", "/v1/jobs", params={"limit": 5})
            except Exception as exc:
                load.failures.append(exc)
            load.slowest_s = max(load.slowest_s, time.monotonic() - started)
