"""Schedule health in the API: the exact numbers (success rate, nearest-rank p50/p95,
windows' edges, failure streaks across skips and cancels), the current alert state,
the /health endpoint and the `health` object of GET /v1/schedules/{id}, sort=health
(an auto-paused schedule ranks as failing), tenant isolation, and a query count that
does not grow with the number of schedules."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from dispatch import selectors, services
from dispatch.api.serializers import iso_z
from dispatch.models import Alert, Schedule
from dispatch.partitioning import partition_for
from dispatch.states import AUTO_PAUSE_ACTOR
from tenants.models import Tenant
from tenants.roles import Role
from tests.conftest import make_principal
from tests.support.rows import execution_row

pytestmark = pytest.mark.django_db

TARGET = {"type": "http", "url": "https://billing.internal/hook"}


def make_schedule(tenant: Tenant, name: str = "nightly") -> Schedule:
    return services.schedule_create(
        actor=make_principal(tenant), data={"name": name, "cron": "0 0 * * *", "target": TARGET}
    )


def ran(schedule: Schedule, at: datetime, state: str, seconds: float | None = None) -> None:
    """An occurrence at `at` that ended `state` after `seconds`."""
    fields: dict[str, Any] = {"state": state}
    if seconds is not None:
        fields |= {"started_at": at, "finished_at": at + timedelta(seconds=seconds)}
    if state in ("skipped", "cancelled"):
        fields |= {"reason_code": "paused", "reason": "paused by ops-lead"}
    execution_row(schedule, at, **fields)


def test_windows_rates_and_percentiles_are_exact(tenant: Tenant) -> None:
    s = make_schedule(tenant)
    now = services.db_now()
    h = timedelta(hours=1)
    for hours, secs in ((1, 10), (2, 20), (3, 30)):
        ran(s, now - hours * h, "succeeded", secs)
    ran(s, now - 4 * h, "dead", 40)
    ran(s, now - 5 * h, "skipped")  # neither success nor failure
    ran(s, now - 6 * h, "cancelled")
    ran(s, now - 7 * h, "failed", 99)  # an attempt on its way to a retry: not counted
    ran(s, now - timedelta(days=1), "succeeded", 50)  # the 24 h edge: inside
    ran(s, now - timedelta(days=1, microseconds=1), "dead", 60)  # just outside 24 h
    ran(s, now - timedelta(days=7), "succeeded", 65)  # the 7 d edge: inside
    ran(s, now - timedelta(days=20), "succeeded", 70)
    ran(s, now - timedelta(days=30, seconds=1), "succeeded", 1000)  # outside 30 d
    execution_row(s, now + h)  # a future row: not a run yet

    got = selectors.schedule_health(tenant=tenant, schedule=s, now=now)

    day, week, month = got.windows["24h"], got.windows["7d"], got.windows["30d"]
    assert (day.runs, day.succeeded, day.failed) == (5, 4, 1)
    assert day.success_rate == 0.8
    assert (day.p50_s, day.p95_s) == (30.0, 50.0)  # of 10 20 30 40 50 (nearest rank)
    assert (week.runs, week.succeeded, week.p50_s, week.p95_s) == (7, 5, 40.0, 65.0)
    assert (month.runs, month.succeeded, month.p50_s, month.p95_s) == (8, 6, 40.0, 70.0)
    assert month.success_rate == 0.75
    assert got.sampled is False
    assert (got.last_state, got.last_at) == ("succeeded", now - h)
    assert got.consecutive_failures == 0
    assert got.last_success_at == now - h


def test_consecutive_failures_ignore_skips_and_cancels(tenant: Tenant) -> None:
    s = make_schedule(tenant)
    now = services.db_now()
    m = timedelta(minutes=1)
    ran(s, now - 20 * m, "dead", 1)  # before the last success: not in the streak
    ran(s, now - 10 * m, "succeeded", 1)
    ran(s, now - 9 * m, "dead", 1)
    ran(s, now - 8 * m, "skipped")
    ran(s, now - 7 * m, "dead", 1)
    ran(s, now - 6 * m, "cancelled")
    ran(s, now - 5 * m, "dead", 1)
    ran(s, now - 4 * m, "retry_scheduled")  # still retrying: not a failure yet

    got = selectors.schedule_health(tenant=tenant, schedule=s, now=now)

    assert got.consecutive_failures == 3
    assert got.streak_capped is False
    assert got.last_success_at == now - 10 * m
    assert (got.last_state, got.last_at) == ("retry_scheduled", now - 4 * m)
    assert got.windows["24h"].success_rate == 0.2  # 1 of 5 final outcomes


def test_a_schedule_that_never_succeeded_counts_every_failure(tenant: Tenant) -> None:
    s = make_schedule(tenant)
    now = services.db_now()
    for n in range(1, 5):
        ran(s, now - timedelta(hours=n), "dead", n)
    got = selectors.schedule_health(tenant=tenant, schedule=s, now=now)
    assert (got.consecutive_failures, got.last_success_at) == (4, None)
    assert got.windows["24h"].success_rate == 0.0


def test_a_schedule_with_no_runs_has_empty_windows(tenant: Tenant) -> None:
    s = make_schedule(tenant)
    got = selectors.schedule_health(tenant=tenant, schedule=s, now=services.db_now())
    assert got.last_state is None
    assert got.consecutive_failures == 0
    assert all(w.runs == 0 and w.success_rate is None for w in got.windows.values())
    assert all(w.p50_s is None and w.p95_s is None for w in got.windows.values())


def test_health_endpoint_and_detail_object(api: APIClient, tenant: Tenant) -> None:
    s = make_schedule(tenant)
    now = services.db_now()
    ran(s, now - timedelta(hours=2), "succeeded", 12.5)
    ran(s, now - timedelta(hours=1), "dead", 3)

    body = api.get(f"/v1/schedules/{s.id}/health").json()
    detail = api.get(f"/v1/schedules/{s.id}").json()

    assert body["consecutive_failures"] == 1
    assert body["last_run"]["state"] == "dead"
    assert body["windows"]["24h"] == {
        "runs": 2,
        "succeeded": 1,
        "failed": 1,
        "success_rate": 0.5,
        "p50_s": 3.0,
        "p95_s": 12.5,
    }
    assert body["next_run_at"] == detail["next_run_at"]
    assert detail["health"] == body
    assert detail["name"] == "nightly"


NOTE = "auto-paused after 3 consecutive failures; last error: HTTP 500"


def alert(schedule: Schedule, at: datetime, kind: str, state: str = "sent") -> Alert:
    return Alert.objects.create(
        tenant=schedule.tenant,
        schedule=schedule,
        scheduled_for=at,
        kind=kind,
        state=state,
        sent_at=at if state == "sent" else None,
    )


def test_the_current_alert_state(api: APIClient, tenant: Tenant) -> None:
    quiet, broken = make_schedule(tenant, "quiet"), make_schedule(tenant, "broken")
    now = services.db_now()
    until = now + timedelta(hours=2)
    Schedule.objects.filter(pk=broken.pk).update(
        alert_failing=True,
        alert_snoozed_until=until,
        paused=True,
        paused_at=now,
        paused_by=AUTO_PAUSE_ACTOR,
        paused_reason=NOTE,
    )
    alert(broken, now - timedelta(hours=3), "failure")
    alert(broken, now - timedelta(hours=2), "auto_paused")  # the newest sent
    alert(broken, now - timedelta(hours=1), "failure", state="pending")  # not sent yet
    alert(broken, now - timedelta(minutes=30), "late", state="failed")  # given up
    # A person's pause is not an auto-pause; a snooze that is over is not a snooze.
    services.schedule_pause(actor=make_principal(tenant), schedule_id=quiet.id, reason="x")
    Schedule.objects.filter(pk=quiet.pk).update(alert_snoozed_until=now - timedelta(seconds=1))

    assert api.get(f"/v1/schedules/{broken.id}/health").json()["alerts"] == {
        "failing": True,
        "snoozed_until": iso_z(until),
        "auto_paused": True,
        "auto_pause_note": NOTE,
        "last_alert": {"kind": "auto_paused", "sent_at": iso_z(now - timedelta(hours=2))},
    }
    assert api.get(f"/v1/schedules/{broken.id}").json()["health"]["alerts"]["failing"] is True
    assert api.get(f"/v1/schedules/{quiet.id}/health").json()["alerts"] == {
        "failing": False,
        "snoozed_until": None,
        "auto_paused": False,
        "auto_pause_note": None,
        "last_alert": None,
    }


def test_an_auto_paused_schedule_ranks_as_failing(api: APIClient, tenant: Tenant) -> None:
    now = services.db_now()
    healthy, person, breaker = (make_schedule(tenant, n) for n in ("a", "b", "c"))
    ran(healthy, now - timedelta(hours=1), "succeeded", 1)
    services.schedule_pause(actor=make_principal(tenant), schedule_id=person.id, reason="x")
    # Its failed runs are gone (retention): it is still failing until a person resumes it.
    Schedule.objects.filter(pk=breaker.pk).update(
        paused=True, paused_by=AUTO_PAUSE_ACTOR, paused_reason=NOTE
    )
    names = [r["name"] for r in api.get("/v1/schedules?sort=health").json()["results"]]
    assert names == ["c", "a", "b"]
    failing = selectors.schedules_by_health(tenant=tenant, now=now, limit=10, failing_only=True)
    assert [(r.schedule.name, r.consecutive_failures) for r in failing] == [("c", 0)]


def test_another_tenants_schedule_is_a_404(
    api: APIClient, outsider_api: APIClient, tenant: Tenant
) -> None:
    s = make_schedule(tenant)
    assert outsider_api.get(f"/v1/schedules/{s.id}/health").status_code == 404
    assert outsider_api.get(f"/v1/schedules/{s.id}").status_code == 404
    assert api.get("/v1/schedules/not-an-id/health").status_code == 404
    assert api.get(f"/v1/schedules/{s.id}/health").status_code == 200


def test_viewer_reads_health(api_for: Callable[[Tenant, Role], APIClient], tenant: Tenant) -> None:
    s = make_schedule(tenant)
    assert api_for(tenant, Role.VIEWER).get(f"/v1/schedules/{s.id}/health").status_code == 200


def test_sort_by_health_puts_the_longest_streak_first(
    api: APIClient, outsider_api: APIClient, tenant: Tenant, other_tenant: Tenant
) -> None:
    now = services.db_now()
    fine, flaky, broken, worst = (make_schedule(tenant, n) for n in ("a", "b", "c", "d"))
    ran(fine, now - timedelta(hours=1), "succeeded", 1)
    ran(flaky, now - timedelta(hours=3), "dead", 1)  # failed today, then recovered
    ran(flaky, now - timedelta(hours=2), "succeeded", 1)
    for n in range(1, 3):
        ran(broken, now - timedelta(hours=n), "dead", 1)
    for n in range(1, 4):
        ran(worst, now - timedelta(hours=n), "dead", 1)
        ran(worst, now - timedelta(hours=n, minutes=30), "cancelled")
    theirs = make_schedule(other_tenant, "z")
    for n in range(1, 9):
        ran(theirs, now - timedelta(hours=n), "dead", 1)

    body = api.get("/v1/schedules?sort=health").json()
    names = [r["name"] for r in body["results"]]

    assert names == ["d", "c", "b", "a"]
    assert body["next_cursor"] is None
    assert [r["name"] for r in api.get("/v1/schedules?sort=health&limit=2").json()["results"]] == [
        "d",
        "c",
    ]
    assert [r["name"] for r in outsider_api.get("/v1/schedules?sort=health").json()["results"]] == [
        "z"
    ]


@pytest.mark.parametrize("query", ["sort=name", "sort=health&cursor=x", "sort=health&limit=0"])
def test_bad_sort_requests_are_400s(api: APIClient, query: str) -> None:
    response = api.get(f"/v1/schedules?{query}")
    assert response.status_code == 400, response.json()


def _bulk_schedules(tenant: Tenant, count: int, start: int) -> list[Schedule]:
    ids = [uuid.uuid4() for _ in range(count)]
    rows = [
        Schedule(
            id=pk,
            tenant=tenant,
            name=f"bulk-{start + n}",
            kind="cron",
            cron="* * * * *",
            target=TARGET,
            partition=partition_for(pk),
        )
        for n, pk in enumerate(ids)
    ]
    made = Schedule.objects.bulk_create(rows)
    now = services.db_now()
    for s in made:
        ran(s, now - timedelta(minutes=2), "succeeded", 1)
        ran(s, now - timedelta(minutes=1), "dead", 2)
        alert(s, now - timedelta(minutes=1), "failure")
    return made


def test_query_count_does_not_grow_with_the_schedules(api: APIClient, tenant: Tenant) -> None:
    counts = []
    made: list[Schedule] = []
    for count in (50, 150):
        made += _bulk_schedules(tenant, count, len(made))
        connection.queries_log.clear()  # a full log (9,000 entries) would capture nothing
        with CaptureQueriesContext(connection) as health_q:
            found = selectors.schedule_health_many(
                tenant=tenant, schedules=made, now=services.db_now()
            )
        assert sum("AS last_alert_kind" in q["sql"] for q in health_q.captured_queries) == 1
        assert len(found) == len(made)
        assert all(h.consecutive_failures == 1 for h in found.values())
        assert all(h.alert.last_alert_kind == "failure" for h in found.values())
        api.get("/v1/schedules?sort=health&limit=500")  # warm the token's first use
        connection.queries_log.clear()
        with CaptureQueriesContext(connection) as sort_q:
            body = api.get("/v1/schedules?sort=health&limit=500").json()
        assert len(body["results"]) == len(made)
        counts.append((len(health_q.captured_queries), len(sort_q.captured_queries)))
    assert counts[0] == counts[1], counts
    # The clock and the one health statement, run under generic_plans: its two settings
    # and the savepoint it takes inside the test's transaction.
    assert counts[0][0] == 6
