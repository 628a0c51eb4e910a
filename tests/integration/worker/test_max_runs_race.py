"""max_runs under concurrent workers and duplicate deliveries: finishes racing on their
own connections add exactly one each, the schedule completes once, and a duplicate
finish of the same claim (a redelivered message, a retried reply) counts nothing."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection

from dispatch.models import ExecutionEvent, Schedule
from dispatch.worker import leases
from tenants.roles import Principal
from tests.support.rows import execution_row
from tests.support.worker_support import db_now, make_schedule

pytestmark = pytest.mark.django_db(transaction=True)
RUNNING = 8


def test_racing_successes_count_once_each_and_complete_once(admin_principal: Principal) -> None:
    schedule = make_schedule(
        admin_principal,
        {"type": "http", "url": "https://billing.internal/hook"},
        cron="* * * * *",
        max_runs=5,
    )
    base = (db_now() - timedelta(hours=1)).replace(second=0, microsecond=0)
    claims = []
    for n in range(RUNNING):
        row = execution_row(schedule, base + timedelta(minutes=n))
        claim = leases.execution_claim(
            execution_id=str(row.id), attempt=1, owner=f"w:{n}", lease_s=30
        )
        assert claim is not None and claim.counts_runs and not claim.schedule_completed
        claims.append(claim)
    barrier = threading.Barrier(RUNNING)
    applied: list[bool] = []

    def finish(claim: leases.Claim) -> None:
        barrier.wait()
        try:
            applied.append(leases.attempt_finish(claim=claim, state="succeeded", events=[]))
        finally:
            connection.close()

    threads = [threading.Thread(target=finish, args=(c,)) for c in claims]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert applied == [True] * RUNNING
    stored = Schedule.objects.get(pk=schedule.pk)
    # All eight were running when it completed: they finish normally and each counts.
    assert stored.runs_succeeded == RUNNING and stored.completed_at is not None
    assert ExecutionEvent.objects.filter(schedule=schedule, kind="completed").count() == 1
    # A duplicate finish under the same token matches no row and counts nothing.
    assert not leases.attempt_finish(claim=claims[0], state="succeeded", events=[])
    assert Schedule.objects.get(pk=schedule.pk).runs_succeeded == RUNNING
