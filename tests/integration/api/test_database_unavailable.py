"""The web while the database is away, through a real gunicorn whose every database
connection goes through a fault module_db_proxy: cut off, the API answers 503 with the
configured Retry-After in its error shape, the console a plain 503 page, /readyz 503
naming the reason; a read-only database (what a standby or a demoted primary is)
refuses writes with 503 and still serves reads; and after each fault the next
request succeeds, on a new connection where the old one would still be read-only.

One gunicorn worker with one thread, so every request shares one connection and a
connection that was not dropped would show."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import pytest
from django.conf import settings
from django.db import connection

from dispatch.models import Schedule
from tenants import services as tenant_services
from tenants.roles import Role
from tests.support.console_support import TARGET, client_for, user
from tests.support.database_faults import read_only
from tests.support.faultproxy import FaultProxy
from tests.support.procs import WebServer, processes

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

RETRY_AFTER = "3"  # the server's DB_UNAVAILABLE_RETRY_AFTER_S (default 2): the setting is used
CSRF = "k" * 32  # a CSRF secret of our own, as cookie and header both


@pytest.fixture(scope="module")
def server(
    module_db_proxy: FaultProxy, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebServer]:
    with django_db_blocker.unblock(), processes(tmp_path_factory.mktemp("web")) as start:
        yield WebServer(
            start,
            WEB_WORKERS="1",
            WEB_THREADS="1",
            DATABASE_URL=module_db_proxy.database_url(connection.settings_dict),
            DB_UNAVAILABLE_RETRY_AFTER_S=RETRY_AFTER,
            API_RATE_LIMIT="1000000/min",
        )


@dataclass
class Visitor:
    """A tenant's API token and a logged-in console user of it, with one schedule."""

    server: WebServer
    token: str
    session: str
    schedule_id: str

    def api(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, str], Any]:
        status, headers, raw = self.server.request(
            method,
            path,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
            body=json.dumps(body).encode() if body is not None else b"",
        )
        return status, headers, json.loads(raw) if raw else None

    def page(
        self, method: str, path: str, form: dict[str, str] | None = None, **headers: str
    ) -> tuple[int, dict[str, str], str]:
        cookies = f"{settings.SESSION_COOKIE_NAME}={self.session}; csrftoken={CSRF}"
        sent = {"Cookie": cookies, "X-CSRFToken": CSRF} | headers
        body = b""
        if form is not None:
            sent["Content-Type"] = "application/x-www-form-urlencoded"
            body = urlencode(form).encode()
        status, got, raw = self.server.request(method, path, headers=sent, body=body)
        return status, got, raw.decode(errors="replace")


@pytest.fixture
def visitor(server: WebServer, module_db_proxy: FaultProxy) -> Iterator[Visitor]:
    module_db_proxy.pass_()
    tenant = tenant_services.tenant_create(slug="billing", name="Billing")
    _, token = tenant_services.token_issue(tenant=tenant, name="ci", role=Role.ADMIN)
    person = user("olga")
    tenant_services.membership_set(tenant=tenant, user=person, role=Role.OPERATOR, actor=None)
    session = client_for(person).cookies[settings.SESSION_COOKIE_NAME].value
    found = Visitor(server, token, session, "")
    status, _, created = found.api("POST", "/v1/schedules", _definition("nightly"))
    assert status == 201, created
    found.schedule_id = created["id"]
    yield found
    module_db_proxy.pass_()


def _definition(name: str) -> dict[str, Any]:
    return {"name": name, "cron": "0 0 * * *", "timezone": "Europe/Amsterdam", "target": TARGET}


def _assert_plain_503_page(status: int, headers: dict[str, str], body: str) -> None:
    assert status == 503, body[:500]
    assert headers["retry-after"] == RETRY_AFTER
    assert headers["content-type"].startswith("text/html")
    assert "Temporarily unavailable" in body and f"Try again in {RETRY_AFTER} seconds" in body
    # Nothing of the error itself: no traceback, no driver text, no server address.
    for leak in ("Traceback", "Error", "psycopg", "connection to server", "127.0.0.1", "5432"):
        assert leak not in body, leak


def _readyz(server: WebServer) -> tuple[int, dict[str, Any]]:
    status, _, raw = server.request("GET", "/readyz")
    return status, json.loads(raw)


def test_cut_off_from_the_database_the_api_the_console_and_readyz_answer_503(
    visitor: Visitor, server: WebServer, module_db_proxy: FaultProxy
) -> None:
    assert _readyz(server) == (
        200,
        {
            "status": "ready",
            "reasons": [],
            "checks": {"database": "ok", "migrations": "ok", "broker": "ok"},
        },
    )
    module_db_proxy.refuse()

    unavailable = {
        "error": {
            "code": "unavailable",
            "message": f"the database cannot be reached; retry after {RETRY_AFTER} s",
            "detail": {},
        }
    }
    for method, path, body in (
        ("GET", "/v1/schedules", None),
        ("GET", f"/v1/schedules/{visitor.schedule_id}", None),
        ("POST", "/v1/schedules", _definition("during-the-outage")),
        ("POST", f"/v1/schedules/{visitor.schedule_id}:trigger", None),
    ):
        status, headers, answer = visitor.api(method, path, body)
        assert (status, headers["retry-after"], answer) == (503, RETRY_AFTER, unavailable), path
        assert headers["content-type"] == "application/json"

    _assert_plain_503_page(*visitor.page("GET", "/"))
    _assert_plain_503_page(*visitor.page("GET", f"/schedules/{visitor.schedule_id}/"))
    # An htmx fragment's poll gets the same 503 (htmx leaves the region as it was).
    _assert_plain_503_page(*visitor.page("GET", "/dashboard/live", **{"HX-Request": "true"}))
    _assert_plain_503_page(
        *visitor.page("POST", f"/schedules/{visitor.schedule_id}/pause", {"reason": "x"})
    )

    status, ready = _readyz(server)
    assert status == 503
    assert ready["status"] == "not ready" and ready["reasons"] == ["database_unreachable"]
    assert ready["checks"]["database"] == "unreachable: the database cannot be reached"
    assert ready["checks"]["broker"] == "ok" and "migrations" not in ready["checks"]
    status, _, raw = server.request("GET", "/healthz")
    assert (status, json.loads(raw)) == (200, {"status": "ok"})  # the process is alive

    module_db_proxy.pass_()
    assert visitor.api("GET", "/v1/schedules")[0] == 200
    assert visitor.page("GET", "/")[0] == 200
    assert _readyz(server)[0] == 200
    log = server.proc.output()
    assert "database unavailable (unreachable): GET /v1/schedules answered 503" in log
    assert "Traceback" not in log


# Each way a write reaches the database from the web, with the answer it gets once the
# database takes writes again: an API view (the DRF exception handler), a console view
# (the middleware), and a session SessionMiddleware saves after the view (handler400).
WRITES: dict[str, tuple[Callable[[Visitor], tuple[int, dict[str, str], Any]], int]] = {
    "api": (lambda v: v.api("POST", "/v1/schedules", _definition("written")), 201),
    "console view": (
        lambda v: v.page("POST", f"/schedules/{v.schedule_id}/pause", {"reason": "freeze"}),
        302,
    ),
    "console session": (lambda v: v.page("POST", "/prefs/tz", {"tz": "Asia/Tokyo"}), 302),
}


@pytest.mark.parametrize("kind", WRITES)
def test_a_read_only_database_refuses_writes_with_503_and_the_next_connection_is_new(
    kind: str, visitor: Visitor, server: WebServer, module_db_proxy: FaultProxy
) -> None:
    write, success = WRITES[kind]
    with read_only(module_db_proxy):
        # Reads are served, a never-used token's bookkeeping write notwithstanding.
        _, fresh = tenant_services.token_issue(
            tenant=Schedule.objects.get(pk=visitor.schedule_id).tenant, name="new", role=Role.VIEWER
        )
        status, _, raw = server.request(
            "GET", "/v1/schedules", headers={"Authorization": f"Bearer {fresh}"}
        )
        assert status == 200 and [s["name"] for s in json.loads(raw)["results"]] == ["nightly"]
        # A console page is not: it records the tenant in the session, a write (Django
        # reports the refused save as SessionInterrupted, a 400; it is a 503 here).
        _assert_plain_503_page(*visitor.page("GET", f"/schedules/{visitor.schedule_id}/"))

        status, ready = _readyz(server)
        assert status == 503 and ready["reasons"] == ["database_read_only"], ready
        assert ready["checks"]["database"].startswith("read_only: the database is read-only")

        status, headers, answer = write(visitor)
        if kind == "api":
            assert (status, headers["retry-after"]) == (503, RETRY_AFTER)
            assert answer["error"] == {
                "code": "unavailable",
                "message": "the database is read-only (a standby, or a primary being demoted); "
                f"retry after {RETRY_AFTER} s",
                "detail": {},
            }
        else:
            _assert_plain_503_page(status, headers, answer)
    # Writable again, and the proxy did not cut anything this time: the connection the
    # 503 came from (a read-only session still) was dropped, or this would be a 503 too.
    status, _, answer = write(visitor)
    assert status == success, answer
    assert _readyz(server)[0] == 200
    assert "database unavailable (read_only)" in server.proc.output()
