"""The client's retries against a real server in real trouble: the API's own
throttle (set low for this module's server) answering 429 + Retry-After, the
database cut off by a fault proxy (the API answers 503 + Retry-After), and a
port nobody listens on (connection errors: only idempotent requests retried)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.db import connection

from tenants.roles import Role
from tests.support.client_support import (
    TARGET,
    Recorder,
    Tenant,
    definition,
    extra_token,
    live_server,
    make_tenant,
)
from tests.support.faultproxy import FaultProxy
from tests.support.net import free_port
from tests.support.procs import WebServer

from scheduler_client import Client, Throttled, TransportError, Unavailable  # isort: skip

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# Per token: 3 requests per 10 s window, so a handful of requests is throttled
# and the Retry-After (the rest of the window) stays short.
RATE = "3/10s"


@pytest.fixture(scope="module")
def server(
    module_db_proxy: FaultProxy,
    django_db_blocker: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[WebServer]:
    """gunicorn whose database connections all go through the fault module_db_proxy."""
    with (
        django_db_blocker.unblock(),
        live_server(
            tmp_path_factory.mktemp("web"),
            API_RATE_LIMIT=RATE,
            DATABASE_URL=module_db_proxy.database_url(connection.settings_dict),
        ) as web,
    ):
        yield web


@pytest.fixture
def owner(db: Any, module_db_proxy: FaultProxy) -> Iterator[Tenant]:
    module_db_proxy.pass_()
    yield make_tenant("billing")
    module_db_proxy.pass_()


def _exhaust(server: WebServer, token: str) -> Throttled:
    """Spend the token's window until the server says 429 (a non-retrying client)."""
    with Client(server.url, token, max_retries=0) as eager:
        for _ in range(50):
            try:
                eager.request("GET", "/v1/schedules")
            except Throttled as exc:
                return exc
    raise AssertionError("the server never throttled")


def test_a_429_is_retried_after_the_servers_retry_after(server: WebServer, owner: Tenant) -> None:
    first = _exhaust(server, owner.token)
    assert first.status == 429 and first.code == "throttled"
    assert first.retry_after is not None and 1 <= first.retry_after <= 10

    # A Retry-After longer than the client will wait is raised at once, carrying it.
    raised: Throttled | None = None
    for _ in range(5):  # the window may end before it goes out: then spend the next one
        recorder = Recorder()
        with Client(server.url, owner.token, transport=recorder, max_retry_after=0.5) as c:
            try:
                c.request("GET", "/v1/schedules")
            except Throttled as exc:
                raised = exc
                break
        _exhaust(server, owner.token)
    assert raised is not None and raised.retry_after and raised.retry_after > 0.5
    assert recorder.statuses() == [429]  # not retried: raised at once

    for _ in range(5):  # the window may end between two requests: then spend the next one
        recorder = Recorder()
        with Client(server.url, owner.token, transport=recorder) as patient:
            assert list(patient.list_schedules()) == []
        statuses = recorder.statuses()
        if statuses[0] == 429:
            break
        _exhaust(server, owner.token)
    assert statuses[0] == 429 and statuses[-1] == 200 and set(statuses[:-1]) == {429}
    throttled, retried = recorder.exchanges[0], recorder.exchanges[1]
    # It came back no sooner than the server asked (whole seconds, rounded up by the server).
    waited = retried.sent - throttled.answered
    assert waited >= 1.0


def test_every_method_is_retried_on_429(server: WebServer, owner: Tenant) -> None:
    created: list[str] = []
    for attempt in range(5):  # as above: the window may end before the POST goes out
        _exhaust(server, owner.token)
        recorder = Recorder()
        with Client(server.url, owner.token, transport=recorder) as client:
            created.append(client.create_schedule(definition(f"after-{attempt}")).id)  # a POST
        posts = [e.status for e in recorder.exchanges if e.method == "POST"]
        if posts[0] == 429:
            break
    assert posts[0] == 429 and posts[-1] == 201 and set(posts[:-1]) == {429}
    # Another token of the tenant (its own budget) sees each schedule once: the
    # throttled attempts did nothing.
    with Client(server.url, extra_token(owner.slug, Role.VIEWER)) as check:
        assert sorted(s.id for s in check.list_schedules()) == sorted(created)


def test_a_503_while_the_database_is_away_is_retried_for_idempotent_requests_only(
    server: WebServer, owner: Tenant, module_db_proxy: FaultProxy
) -> None:
    with Client(server.url, owner.token, max_retries=0) as once:
        module_db_proxy.refuse()
        with pytest.raises(Unavailable) as raised:
            once.request("GET", "/v1/schedules")
    assert raised.value.status == 503 and raised.value.code == "unavailable"
    assert raised.value.retry_after == 2  # DB_UNAVAILABLE_RETRY_AFTER_S's default
    assert raised.value.attempts == 1 and "gave up after 1 attempt in" in str(raised.value)

    # A POST without an idempotency key is not sent again: the server may have lost
    # its database while committing it.
    recorder = Recorder()
    with (
        Client(server.url, owner.token, transport=recorder) as client,
        pytest.raises(Unavailable) as refused,
    ):
        client.create_schedule(definition("during-the-outage"))
    assert recorder.statuses() == [503]
    assert "not sent again: POST /v1/schedules is not idempotent" in str(refused.value)

    # A job with its idempotency key is. The proxy heals as soon as the client has
    # seen the 503: the retry must succeed, and create the job once.
    recorder = Recorder(
        on_response=lambda r: module_db_proxy.pass_() if r.status_code == 503 else None
    )
    with Client(server.url, owner.token, transport=recorder) as client:
        job = client.create_job({"idempotency_key": "after-the-outage", "target": TARGET})
    assert recorder.statuses() == [503, 201]
    outage, retried = recorder.exchanges
    assert retried.sent - outage.answered >= 2.0  # Retry-After: 2
    with Client(server.url, extra_token(owner.slug, Role.VIEWER)) as check:
        assert [s.id for s in check.list_schedules()] == [job.id]  # created once


def test_connection_errors_retry_only_idempotent_requests(db: Any) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"  # nothing listens: connection refused

    def attempts(call: Any) -> list[int | None]:
        recorder = Recorder()
        client = Client(nobody, "token", transport=recorder, max_retries=2)
        with client, pytest.raises(TransportError) as raised:
            call(client)
        assert raised.value.status == 0 and raised.value.code == "network_error"
        assert isinstance(raised.value.__cause__, httpx.TransportError)
        return recorder.statuses()

    assert attempts(lambda c: c.get_schedule("x")) == [None, None, None]
    # A POST that may have reached the server is not sent again ...
    assert attempts(lambda c: c.create_schedule(definition("x"))) == [None]
    assert attempts(lambda c: c.trigger_schedule("x")) == [None]
    # ... unless the API makes it idempotent: a job with its idempotency key, apply.
    job = {"name": "j", "target": definition("x")["target"], "idempotency_key": "k1"}
    assert attempts(lambda c: c.create_job(job)) == [None, None, None]
    assert attempts(lambda c: c.create_job(job | {"idempotency_key": None})) == [None]
    assert attempts(lambda c: c.apply_schedules([definition("x")])) == [None, None, None]
