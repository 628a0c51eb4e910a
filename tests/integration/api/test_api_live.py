"""The API through real server processes, as production (gunicorn) and `make run`
(runserver) serve it: chunked request bodies, and schemathesis checking every
operation against the OpenAPI document the server publishes."""

from __future__ import annotations

import http.client
import json
import os
import socket
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.config import SchemathesisConfig

from tenants import services as tenant_services
from tenants.roles import Role
from tests.support.net import free_port
from tests.support.procs import processes, wait_for

pytestmark = [pytest.mark.system, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

TARGET = {"type": "http", "url": "https://billing.internal/hook", "method": "POST"}


SERVERS = {
    "gunicorn": lambda port: [
        sys.executable,
        "-m",
        "gunicorn",
        "config.wsgi:application",
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        "2",
    ],
    "runserver": lambda port: [
        sys.executable,
        "manage.py",
        "runserver",
        f"127.0.0.1:{port}",
        "--noreload",
    ],
}


class Live:
    def __init__(self, port: int, token: str) -> None:
        self.port = port
        self.token = token
        self.base = f"http://127.0.0.1:{port}"


def _up(port: int) -> bool:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", "/healthz")
        return conn.getresponse().status == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def servers(
    django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, int]]:
    """gunicorn and runserver on the test database, started once for the module."""
    ports: dict[str, int] = {}
    with django_db_blocker.unblock(), processes(tmp_path_factory.mktemp("web")) as start:
        procs = {}
        for kind, argv in SERVERS.items():
            ports[kind] = free_port()
            # A budget high enough that throttling is not what the tests exercise.
            procs[kind] = start(kind, argv(ports[kind]), API_RATE_LIMIT="1000000/min")
        for kind, proc in procs.items():
            wait_for(
                lambda k=kind, p=proc: _up(ports[k]) or (not p.alive() and pytest.fail(p.output())),
                timeout=60,
                what=f"{kind} on {ports[kind]}",
            )
        yield ports


@pytest.fixture
def live(request: pytest.FixtureRequest, servers: dict[str, int]) -> Live:
    """A server (gunicorn unless parametrized) and an admin token of a fresh tenant."""
    tenant = tenant_services.tenant_create(slug="billing", name="Billing")
    _, token = tenant_services.token_issue(tenant=tenant, name="live", role=Role.ADMIN)
    return Live(servers[getattr(request, "param", "gunicorn")], token)


def raw_chunked(live: Live, path: str, chunks: list[bytes]) -> tuple[int, bytes]:
    """A request written byte by byte: Transfer-Encoding chunked, no Content-Length."""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{live.port}\r\n"
        f"Authorization: Bearer {live.token}\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    ).encode()
    body = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
    with socket.create_connection(("127.0.0.1", live.port), timeout=30) as sock:
        sock.sendall(head + body)
        response = http.client.HTTPResponse(sock)
        response.begin()
        return response.status, response.read()


@pytest.mark.parametrize("live", ["gunicorn", "runserver"], indirect=True)
def test_a_chunked_body_is_read(live: Live) -> None:
    payload = json.dumps(
        {"name": "chunked", "cron": "0 0 * * *", "timezone": "UTC", "target": TARGET}
    ).encode()
    parts = [payload[i : i + 7] for i in range(0, len(payload), 7)]
    status, body = raw_chunked(live, "/v1/schedules", parts)
    assert status == 201, body
    assert json.loads(body)["name"] == "chunked"


@pytest.mark.parametrize("live", ["gunicorn", "runserver"], indirect=True)
def test_an_oversized_chunked_body_is_413(live: Live) -> None:
    big = json.dumps({"name": "x" * 70_000}).encode()
    status, body = raw_chunked(live, "/v1/schedules", [big[:40_000], big[40_000:]])
    assert status == 413, body
    assert json.loads(body)["error"]["code"] == "payload_too_large"


# --- schemathesis ------------------------------------------------------------------------

# Bounded so the whole run stays well under two minutes on two shared cores;
# SCHEMATHESIS_MAX_EXAMPLES raises it for a deeper local run.
MAX_EXAMPLES = int(os.environ.get("SCHEMATHESIS_MAX_EXAMPLES", "12"))


def _config() -> SchemathesisConfig:
    return SchemathesisConfig.from_dict(
        {
            "seed": int(os.environ.get("SCHEMATHESIS_SEED", "20261201")),
            "generation": {
                "mode": "all",  # schema-valid and schema-violating data
                "max-examples": MAX_EXAMPLES,
                "database": "none",
            },
            "phases": {
                "examples": {"enabled": True},
                "coverage": {"enabled": True},
                "fuzzing": {"enabled": True},
                "stateful": {"enabled": False},
            },
            "checks": {
                # Schema-valid input can still be refused on meaning the document
                # cannot express (a cron that never fires, a target the SSRF guard
                # denies, a quota): those answers are documented 400 / 422.
                "positive_data_acceptance": {
                    "expected-statuses": ["2xx", "400", "401", "403", "404", "409", "422", "428"]
                },
            },
        }
    )


def _document() -> dict[str, Any]:
    """The OpenAPI document exactly as /v1/openapi.json renders it."""
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.renderers import OpenApiJsonRenderer

    doc = SchemaGenerator().get_schema(request=None, public=True)
    loaded: dict[str, Any] = json.loads(OpenApiJsonRenderer().render(doc))
    return loaded


# Loaded at collection time so each operation is a test of its own; the test
# below checks the live server publishes this same document.
DOCUMENT = _document()
schema = schemathesis.openapi.from_dict(DOCUMENT, config=_config())


def test_the_live_server_publishes_the_document_under_test(live: Live) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", live.port, timeout=30)
    conn.request("GET", "/v1/openapi.json")
    assert json.loads(conn.getresponse().read()) == DOCUMENT


@schema.parametrize()
# One tenant and token per operation (not per example) is intended.
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_the_api_conforms_to_its_openapi_document(case: Any, live: Live) -> None:
    case.call_and_validate(base_url=live.base, headers={"Authorization": f"Bearer {live.token}"})
