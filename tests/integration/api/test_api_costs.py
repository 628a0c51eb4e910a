"""What the hot API paths and the operators' scrapes cost: statements per request,
and plans that can use an index (EXPLAIN), not timings."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from dispatch import services
from dispatch.selectors.ops import LAG_EXCLUDED_TRIGGERS
from dispatch.sql import queries
from tenants.models import Tenant
from tests.conftest import make_principal
from tests.support.plans import names_any

pytestmark = pytest.mark.django_db

TARGET = {"type": "http", "url": "https://billing.internal/hook"}


def _captured(
    client: APIClient, method: str, path: str, body: Any = None, *, status: int = 200
) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        res = getattr(client, method)(path, body, format="json")
    assert res.status_code == status, res.content
    return [q["sql"] for q in captured.captured_queries]


def test_schedule_list_reads_the_page_in_a_fixed_number_of_statements(
    api: APIClient, tenant: Tenant
) -> None:
    principal = make_principal(tenant)
    for n in range(12):
        services.schedule_create(
            actor=principal, data={"name": f"s{n}", "cron": "0 0 * * *", "target": TARGET}
        )
    statements = _captured(api, "get", "/v1/schedules")
    # The token and its (conditional) last-use write, the page with its tenant joined,
    # the upstreams and the calendar links of the whole page: no statement per row, none
    # of its own for the tenant.
    assert len(statements) == 5, statements
    assert sum("dispatch_schedulecalendar" in s for s in statements) == 1, statements
    assert not any(s.lstrip().startswith('SELECT "tenants_tenant"') for s in statements)


def test_single_job_create_does_not_read_its_upstreams(api: APIClient) -> None:
    api.get("/v1/jobs")
    statements = _captured(
        api, "post", "/v1/jobs", {"target": TARGET, "idempotency_key": "one"}, status=201
    )
    assert not any("dispatch_schedule_depends_on" in s for s in statements), statements
    # The quota count stops at the cap (COUNT over a LIMITed subquery).
    (count,) = [s for s in statements if "COUNT(*)" in s]
    assert "LIMIT" in count


def test_trigger_counts_in_flight_only_up_to_the_cap(api: APIClient, tenant: Tenant) -> None:
    schedule = services.schedule_create(
        actor=make_principal(tenant), data={"name": "t", "cron": "0 0 1 1 *", "target": TARGET}
    )
    api.get("/v1/jobs")
    with CaptureQueriesContext(connection) as captured:
        res = api.post(f"/v1/schedules/{schedule.id}:trigger")
    assert res.status_code == 202, res.content
    sqls = [q["sql"].lower() for q in captured.captured_queries]
    counts = [sql for sql in sqls if "count(*)" in sql]
    # One count (selectors.tenant_slots, shared with the beats' admission), bounded.
    assert len(counts) == 1 and "limit q.max_concurrent" in counts[0], counts


def _plan(name: str, params: dict[str, Any]) -> str:
    with connection.cursor() as cur:
        # No data to speak of here: forbid the sequential scan, so the plan shows
        # whether the statement *can* use an index at all (with clock_timestamp() it
        # could not: a volatile bound is no index condition).
        cur.execute("SET LOCAL enable_seqscan = off")
        cur.execute("EXPLAIN " + queries[name], params)
        return "\n".join(row[0] for row in cur.fetchall())


@pytest.mark.parametrize(
    ("measure", "index"), [("fire", "execution_enqueued_at"), ("start", "execution_started_at")]
)
def test_metrics_lag_is_a_range_scan_of_its_time_index(measure: str, index: str) -> None:
    plan = _plan(
        "metrics_lag",
        {
            "measure": measure,
            "window_s": 300,
            "excluded": [str(t.value) for t in LAG_EXCLUDED_TRIGGERS],
            "buckets": [0.1, 1.0, 10.0],
        },
    )
    assert names_any(plan, index), plan
    (other,) = {"execution_enqueued_at", "execution_started_at"} - {index}
    # The other measure's branch is a false one-time filter: it reads no index either.
    assert "One-Time Filter: false" in plan or not names_any(plan, other), plan


def test_ops_fire_lag_uses_the_enqueued_at_index() -> None:
    plan = _plan(
        "ops_fire_lag",
        {
            "excluded": [str(t.value) for t in LAG_EXCLUDED_TRIGGERS],
            "since": "2026-01-01T00:00:00Z",
        },
    )
    assert names_any(plan, "execution_enqueued_at"), plan
