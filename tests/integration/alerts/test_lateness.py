"""The late (dead-man) scan on real rows: not started within late_after_s of its
due time, running past max_duration_s, once per occurrence, and never for a
paused or snoozed schedule, an occurrence still within its grace, or a tenant
without such a policy."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest
from django.db import connection

from dispatch.alerting import lateness
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
    lateness it must stop at its one-time filter, not walk the active executions (a
    burst stages 100,000s of them ahead) looking for a policy."""
    now = db_now()
    for minutes in range(1, 40):
        execution_row(schedule, now - timedelta(minutes=minutes), state="scheduled")
    AlertPolicy.objects.create(tenant=schedule.tenant, late_after_s=0, max_duration_s=0)
    connection.ensure_connection()
    with psycopg.ClientCursor(connection.connection) as cur:
        cur.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + sql["late_occurrences"],
            {"tenant_id": None, "for_alerts": True, "batch": 100},
        )
        plan = cur.fetchone()[0][0]["Plan"]

    def nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
        return [node, *(n for child in node.get("Plans", []) for n in nodes(child))]

    # Whatever join order the planner picks from the statistics: a one-time filter
    # above every read of the executions, false here, so none of them ran.
    gates = [n for n in nodes(plan) if "One-Time Filter" in n]
    assert gates, plan
    below = [n for g in gates for n in nodes(g)[1:]]
    executions = family("dispatch_execution")  # the table and its day partitions
    scans = [n for n in below if n.get("Relation Name") in executions]
    assert scans and all(n["Actual Loops"] == 0 for n in scans), scans  # never executed
    reads = [n for n in nodes(plan) if n.get("Relation Name") in executions]
    assert len(reads) == len(scans)  # no read of the executions outside the gate
    assert lateness.scan_once() == 0
