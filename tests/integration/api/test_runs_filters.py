"""GET /v1/executions's runs-page filters: state lists, trigger, time range, error
text (and its bounded scan: a short page whose cursor continues the search),
re-runs, the capped total, and a 400 naming the field for every bad value."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from dispatch import selectors, services
from dispatch.models import Execution, Schedule
from tenants.models import Tenant
from tests.conftest import make_principal

pytestmark = pytest.mark.django_db

BASE = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
TARGET = {"type": "http", "url": "https://billing.internal/hook"}


def assert_error(response: Any, field: str) -> None:
    assert response.status_code == 400, response.content
    body = response.json()["error"]
    assert field in body["detail"] and body["message"].startswith(f"{field}: "), body


@pytest.fixture
def schedule(tenant: Tenant) -> Schedule:
    return services.schedule_create(
        actor=make_principal(tenant),
        data={"name": "nightly", "cron": "0 0 * * *", "target": TARGET},
    )


def run(schedule: Schedule, hours_ago: float, **fields: Any) -> Execution:
    at = BASE - timedelta(hours=hours_ago)
    return Execution.objects.create(
        schedule=schedule, tenant=schedule.tenant, scheduled_for=at, due_at=at, **fields
    )


def listed(api: APIClient, query: str) -> list[str]:
    response = api.get(f"/v1/executions?{query}")
    assert response.status_code == 200, response.content
    return [r["id"] for r in response.json()["results"]]


def test_filters(api: APIClient, schedule: Schedule) -> None:
    dead = run(schedule, 1, state="dead", error="HTTP 503 from billing")
    failed = run(schedule, 2, state="failed", error="connection refused")
    ok = run(schedule, 3, state="succeeded")
    manual = run(schedule, 4, state="succeeded", trigger="manual")
    rerun = run(schedule, 5, state="succeeded", reruns=2)
    assert listed(api, "state=dead,failed") == [str(dead.id), str(failed.id)]
    assert listed(api, "status=succeeded") == [str(ok.id), str(manual.id), str(rerun.id)]
    assert listed(api, "trigger=manual,api") == [str(manual.id)]
    assert listed(api, "error=REFUSED") == [str(failed.id)]
    assert listed(api, "error=503&state=failed") == []
    assert listed(api, "rerun=true") == [str(rerun.id)]
    assert len(listed(api, "rerun=false")) == 4
    assert listed(api, "from=2026-06-01T09:30:00Z&to=2026-06-01T10:30:00Z") == [str(failed.id)]
    counted = api.get("/v1/executions?state=succeeded&total=true").json()
    assert (counted["total"], counted["total_capped"]) == (3, False)
    assert "total" not in api.get("/v1/executions").json()
    assert api.get("/v1/executions?error=x&total=true").json()["total"] is None


def test_another_tenants_rows_never_match(
    api: APIClient, outsider_api: APIClient, schedule: Schedule
) -> None:
    run(schedule, 1, state="dead", error="boom")
    assert listed(outsider_api, "state=dead") == []
    assert listed(outsider_api, "error=boom") == []
    assert listed(outsider_api, f"schedule_id={schedule.id}") == []
    assert outsider_api.get("/v1/executions?total=true").json()["total"] == 0


@pytest.mark.parametrize(
    "query,field",
    [
        ("state=bogus", "state"),
        ("state=", "state"),
        ("status=bogus", "status"),
        ("state=dead&status=dead", "status"),
        ("trigger=nope", "trigger"),
        ("trigger=", "trigger"),
        ("error=", "error"),
        ("error=" + "x" * 201, "error"),
        ("rerun=maybe", "rerun"),
        ("total=2", "total"),
        ("from=2026-06-02T00:00:00Z&to=2026-06-01T00:00:00Z", "to"),
        ("schedule_id=nope", "schedule_id"),
    ],
)
def test_bad_values_are_400_naming_the_field(api: APIClient, query: str, field: str) -> None:
    assert_error(api.get(f"/v1/executions?{query}"), field)


def test_error_search_reads_a_bounded_window_and_its_cursor_goes_on(
    api: APIClient, schedule: Schedule, tenant: Tenant
) -> None:
    """The one match lies below ERROR_SCAN_ROWS newer failures: the first page stops at
    the window, empty, with a cursor; following it finds the match."""
    window = selectors.ERROR_SCAN_ROWS
    with connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO dispatch_execution (id, schedule_id, tenant_id, scheduled_for, due_at,
                                            trigger, attempt, state, fencing_token, error)
            SELECT gen_random_uuid(), %(s)s, %(t)s, %(at)s - g * interval '1 second',
                   %(at)s - g * interval '1 second', 'cron', 1, 'dead', 0,
                   CASE WHEN g = %(n)s + 5 THEN 'disk quota exceeded' ELSE 'HTTP 500' END
            FROM generate_series(1, %(n)s + 10) AS g
            """,
            {"s": schedule.id, "t": tenant.id, "at": BASE, "n": window},
        )
    first = api.get("/v1/executions?error=quota").json()
    assert first["results"] == [] and first["scan_limited"] is True
    assert first["next_cursor"]
    second = api.get(f"/v1/executions?error=quota&cursor={first['next_cursor']}").json()
    assert [r["error"] for r in second["results"]] == ["disk quota exceeded"]
    assert second["scan_limited"] is False and second["next_cursor"] is None
    # A common text fills its page inside the window, as any page does.
    common = api.get("/v1/executions?error=http+500&limit=10").json()
    assert len(common["results"]) == 10 and common["scan_limited"] is False
