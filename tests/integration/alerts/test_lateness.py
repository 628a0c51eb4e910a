"""The late (dead-man) scan on real rows: not started within late_after_s of its
due time, running past max_duration_s, once per occurrence, and never for a
paused or snoozed schedule, an occurrence still within its grace, or a tenant
without such a policy."""

from __future__ import annotations

import json
from datetime import timedelta

import psycopg
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from dispatch.alerting import lateness
from dispatch.history import partitions
from dispatch.models import Alert, AlertChannel, AlertPolicy, Schedule
from dispatch.sql import sql
from tenants.roles import Principal
from tests.support.plans import family
from tests.support.rows import execution_row
from tests.support.worker_support import db_now, make_schedule

pytestmark = pytest.mark.django_db
TARGET = {"type": "http", "url": "http://127.0.0.1:9/hook"}


@pytest.fixture
def schedule(admin_principal: Principal) -> Schedule:
    AlertChannel.objects.create(
        tenant=admin_principal.tenant, name="mail", kind="email", config={"to": ["o@b.test"]}
    )
    return make_schedule(admin_principal, TARGET)


def test_late_and_overrun_once_each(schedule: Schedule) -> None:
    now = db_now()
    assert lateness.scan_once() == 0  # no lateness policy: nothing looked at
    AlertPolicy.objects.create(tenant=schedule.tenant, late_after_s=300, max_duration_s=600)
    held = execution_row(schedule, now - timedelta(minutes=10), state="scheduled")
    execution_row(schedule, now - timedelta(minutes=2), state="queued")  # within its grace
    overrun = execution_row(
        schedule,
        now - timedelta(minutes=30),
        state="running",
        started_at=now - timedelta(minutes=20),
    )
    execution_row(
        schedule,
        now - timedelta(minutes=40),
        state="running",
        started_at=now - timedelta(minutes=5),
    )
    assert lateness.scan_once() == 2
    assert lateness.scan_once() == 0  # once per occurrence
    late = {a.execution_id: a.payload for a in Alert.objects.filter(kind="late")}
    assert set(late) == {held.id, overrun.id}
    assert (late[held.id]["late"], late[held.id]["limit_s"]) == ("not_started", 300)
    assert (late[overrun.id]["late"], late[overrun.id]["limit_s"]) == ("overrun", 600)


def test_paused_and_snoozed_schedules_are_not_late(schedule: Schedule) -> None:
    AlertPolicy.objects.create(tenant=schedule.tenant, late_after_s=60)
    execution_row(schedule, db_now() - timedelta(minutes=10), state="scheduled")
    Schedule.objects.filter(pk=schedule.pk).update(paused=True)
    assert lateness.scan_once() == 0
    Schedule.objects.filter(pk=schedule.pk).update(
        paused=False, alert_snoozed_until=db_now() + timedelta(hours=1)
    )
    assert lateness.scan_once() == 0
    Schedule.objects.filter(pk=schedule.pk).update(alert_snoozed_until=None)
    assert lateness.scan_once() == 1


def test_with_no_late_policy_anywhere_the_scan_reads_no_execution(schedule: Schedule) -> None:
    """The late scan runs in every control round of every beat: with no tenant watching
    lateness it asks one question of the policies and stops, never planning the
    statement that joins the executions (35-290 ms of planning over the day partitions,
    with nothing to find); the dashboard's "late now" likewise."""
    now = db_now()
    for minutes in range(2, 41):  # each due well past the 60 s set below
        execution_row(schedule, now - timedelta(minutes=minutes), state="scheduled")
    policy = AlertPolicy.objects.create(tenant=schedule.tenant, late_after_s=0, max_duration_s=0)
    executions = family("dispatch_execution")  # the table and its day partitions
    with CaptureQueriesContext(connection) as seen:
        assert lateness.scan_once() == 0
        assert lateness.late_now(tenant=schedule.tenant, limit=10) == []
    assert len(seen.captured_queries) == 2, seen.captured_queries  # the two questions
    assert not [q for q in seen.captured_queries if any(r in q["sql"] for r in executions)]

    # The same rows once the policy watches: the scan reads them and owes each an alert.
    AlertPolicy.objects.filter(pk=policy.pk).update(late_after_s=60)
    with CaptureQueriesContext(connection) as seen:
        assert lateness.scan_once() == 39
    assert any("dispatch_execution" in q["sql"] for q in seen.captured_queries)
    assert len(lateness.late_now(tenant=schedule.tenant, limit=100)) == 39


def test_the_late_scan_plans_only_the_day_partitions_it_can_read(schedule: Schedule) -> None:
    """`since` is a parameter, known at planning: the day partitions wholly before it are
    pruned when the statement is planned, not planned and then skipped."""
    since = db_now() + timedelta(days=1)
    held = partitions.days(partitions.EXECUTIONS)
    # A day partition ends where the next day starts; the lower catch-all ends where
    # the first day starts, before `since`.
    older = {p.name for p in held if partitions.day_start(p.day + timedelta(days=1)) <= since}
    older.add(partitions.EXECUTIONS.before)
    later = {p.name for p in held} - older | {partitions.EXECUTIONS.after}
    assert older - {partitions.EXECUTIONS.before}, held  # a day partition to prune
    connection.ensure_connection()
    with psycopg.ClientCursor(connection.connection) as cur:
        cur.execute(
            "EXPLAIN (FORMAT JSON) " + sql["late_occurrences"],
            {"tenants": [schedule.tenant_id], "for_alerts": True, "batch": 100, "since": since},
        )
        plan = json.dumps(cur.fetchone()[0])
    planned = {name for name in older | later if f'"{name}"' in plan}
    assert planned, plan  # the later days are read
    assert not planned & older, planned & older
