"""Every list endpoint of the API costs the same number of queries for 2 rows as
for 12: no per-row query (N+1) on the tenant, dependencies or anything else."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from dispatch import services
from dispatch.models import Execution, Schedule
from dispatch.states import ExecutionState, Trigger
from tenants import services as tenant_services
from tenants.models import Tenant
from tenants.roles import Principal, Role
from tests.conftest import make_principal

pytestmark = pytest.mark.django_db

TARGET = {"type": "http", "url": "https://billing.internal/hook"}


def _queries(client: APIClient, path: str, rows: int) -> int:
    client.get(path)  # warm: first-request work (e.g. the token's last use) is not per row
    with CaptureQueriesContext(connection) as captured:
        response = client.get(path)
    assert response.status_code == 200, response.json()
    assert len(response.json()["results"]) == rows
    return len(captured.captured_queries)


def _add_schedules(principal: Principal, start: int, count: int) -> list[Schedule]:
    made = []
    for n in range(start, start + count):
        upstream = made[-1].id if made else None
        data = {"name": f"s{n:02}", "cron": "0 0 * * *", "target": TARGET}
        if upstream is not None:
            data["depends_on"] = [upstream]
        made.append(services.schedule_create(actor=principal, data=data))
    return made


def _add_executions(schedule: Schedule, start: int, count: int) -> None:
    at = services.db_now() - timedelta(days=1)
    for n in range(start, start + count):
        Execution.objects.create(
            schedule=schedule,
            tenant=schedule.tenant,
            partition=schedule.partition,
            scheduled_for=at + timedelta(minutes=n),
            due_at=at + timedelta(minutes=n),
            trigger=Trigger.CRON,
            state=ExecutionState.SUCCEEDED,
        )


def test_schedule_list_queries_do_not_grow_with_rows(api: APIClient, tenant: Tenant) -> None:
    principal = make_principal(tenant)
    _add_schedules(principal, 0, 2)
    few = _queries(api, "/v1/schedules", 2)
    _add_schedules(principal, 2, 10)
    assert _queries(api, "/v1/schedules", 12) == few


def test_execution_list_queries_do_not_grow_with_rows(api: APIClient, tenant: Tenant) -> None:
    (schedule,) = _add_schedules(make_principal(tenant), 0, 1)
    _add_executions(schedule, 0, 2)
    few = _queries(api, "/v1/executions", 2)
    _add_executions(schedule, 2, 10)
    assert _queries(api, "/v1/executions", 12) == few


def test_token_list_queries_do_not_grow_with_rows(
    api_for: Callable[[Tenant, Role], APIClient], tenant: Tenant
) -> None:
    client = api_for(tenant, Role.ADMIN)  # one token: the client's own
    tenant_services.token_issue(tenant=tenant, name="extra-0", role=Role.VIEWER)
    few = _queries(client, "/v1/tokens", 2)
    for n in range(1, 11):
        tenant_services.token_issue(tenant=tenant, name=f"extra-{n}", role=Role.VIEWER)
    assert _queries(client, "/v1/tokens", 12) == few


@pytest.mark.django_db
def test_single_writes_take_a_fixed_small_number_of_statements(
    api: APIClient, tenant: Tenant
) -> None:
    # POST /v1/jobs: the token, the key lookup, now(), the quota lock and count, one
    # statement for the job with its audit row, event and wake-up (the batch's), and
    # the transaction's pair. POST /v1/schedules: the same less the key lookup, with its
    # three INSERTs; no savepoint of its own and no re-read of the relations it wrote.
    target = {"type": "http", "url": "https://notify.internal/remind"}
    api.get("/v1/jobs")  # warm: the token's last-use write is once a minute, not per call
    job = {"run_at": "2030-09-26T09:00:00Z", "target": target, "idempotency_key": "one"}
    with CaptureQueriesContext(connection) as single:
        res = api.post("/v1/jobs", job, format="json")
    assert res.status_code == 201, res.content
    assert len(single.captured_queries) <= 8, [q["sql"][:70] for q in single]
    assert not any("tenants_servicetoken" in q["sql"] and "UPDATE" in q["sql"] for q in single)
    body = {"name": "nightly", "cron": "0 3 * * *", "timezone": "UTC", "target": target}
    with CaptureQueriesContext(connection) as schedule:
        res = api.post("/v1/schedules", body, format="json")
    assert res.status_code == 201, res.content
    assert res.json()["depends_on"] == [] and res.json()["exclude_calendars"] == []
    assert len(schedule.captured_queries) <= 9, [q["sql"][:70] for q in schedule]
    # One savepoint: the service's own atomic block (inside the test's transaction).
    assert sum(q["sql"].startswith("SAVEPOINT") for q in schedule) == 1
