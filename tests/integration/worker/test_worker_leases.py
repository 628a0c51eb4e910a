"""Claim, heartbeat, fenced completion and the lease sweeper against real PostgreSQL
(no worker processes): the rules every worker write relies on."""

from __future__ import annotations

import threading
from datetime import timedelta

import psycopg
import pytest
from django.db import connection

from dispatch.models import Execution, ExecutionEvent
from dispatch.scheduler import sweeper
from dispatch.sql import queries
from dispatch.worker import leases
from dispatch.worker.leases import Event
from tenants.roles import Principal
from tests.support.procs import db_conninfo
from tests.support.worker_support import kinds, make_execution, make_schedule

pytestmark = pytest.mark.django_db(transaction=True)
TARGET = {"type": "http", "url": "http://127.0.0.1:9/hook"}


def claim(execution: Execution, attempt: int = 1, owner: str = "t:1") -> leases.Claim | None:
    return leases.execution_claim(
        execution_id=str(execution.id), attempt=attempt, owner=owner, lease_s=30
    )


def expire_lease(execution: Execution) -> None:
    Execution.objects.filter(pk=execution.pk).update(
        lease_expires_at=execution.created_at - timedelta(days=1)
    )


def test_two_connections_racing_a_claim_exactly_one_wins(admin_principal: Principal) -> None:
    schedule = make_schedule(admin_principal, TARGET)
    for _ in range(20):
        execution = make_execution(schedule)
        barrier = threading.Barrier(2)
        won: list[int] = []

        def race(
            n: int,
            execution: Execution = execution,
            barrier: threading.Barrier = barrier,
            won: list[int] = won,
        ) -> None:
            with psycopg.connect(db_conninfo(), autocommit=True) as conn:
                barrier.wait()
                row = conn.execute(
                    queries["claim_execution"],
                    {
                        "id": execution.id,
                        "attempt": 1,
                        "owner": f"racer:{n}",
                        "lease_s": 30,
                        "kinds": leases.KNOWN_KINDS,
                        "lo": "-infinity",
                        "hi": "infinity",
                    },
                ).fetchone()
                if row is not None:
                    won.append(n)

        threads = [threading.Thread(target=race, args=(n,)) for n in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(won) == 1
        execution.refresh_from_db()
        assert execution.state == "running" and execution.fencing_token == 1
        # The winner's claim wrote both entries; the loser's wrote nothing.
        assert kinds(execution) == ["claimed", "attempt_started"]


def test_claim_needs_the_current_attempt_and_a_due_row(admin_principal: Principal) -> None:
    schedule = make_schedule(admin_principal, TARGET)
    early = make_execution(schedule, due_in_s=60)
    assert claim(early) is None
    execution = make_execution(schedule)
    assert claim(execution, attempt=2) is None  # a message for an attempt that does not exist yet
    got = claim(execution, attempt=1)
    assert got is not None and got.fencing_token == 1 and got.target["url"] == TARGET["url"]
    assert got.tenant_slug == admin_principal.tenant.slug and got.signing_key
    assert claim(execution, attempt=1) is None  # duplicate: already running
    peek = leases.execution_peek(execution_id=str(execution.id))
    assert peek is not None and peek.state == "running" and peek.lease_owner == "t:1"


def test_stale_completion_and_heartbeat_are_rejected_and_recorded(
    admin_principal: Principal,
) -> None:
    execution = make_execution(make_schedule(admin_principal, TARGET))
    mine = claim(execution)
    assert mine is not None
    assert leases.lease_heartbeat(claim=mine, lease_s=30)
    expire_lease(execution)
    assert sweeper.sweep_expired_leases(partitions=None) == 1  # taken over: token 2, attempt 2

    assert not leases.lease_heartbeat(claim=mine, lease_s=30)
    applied = leases.attempt_finish(
        claim=mine,
        state="succeeded",
        status_code=200,
        events=[Event("attempt_succeeded", "late success", {})],
    )
    assert applied is False
    assert leases.fencing_rejected(claim=mine, what="completion") == (2, "retry_scheduled")
    execution.refresh_from_db()
    assert (execution.state, execution.attempt, execution.fencing_token) == (
        "retry_scheduled",
        2,
        2,
    )
    assert execution.status_code is None
    assert "attempt_succeeded" not in kinds(execution)
    rejected = ExecutionEvent.objects.get(execution=execution, kind="fencing_rejected")
    assert rejected.message == (
        "the completion of worker t:1 (token 1) was rejected: "
        "the execution now has token 2 (retry_scheduled)"
    )


def test_sweeper_retries_expired_leases_then_buries_at_max_attempts(
    admin_principal: Principal,
) -> None:
    retry = {"max_attempts": 2, "backoff": "fixed", "initial_s": 0, "max_s": 0}
    execution = make_execution(make_schedule(admin_principal, TARGET, retry=retry))
    for attempt in (1, 2):
        assert claim(execution, attempt=attempt) is not None
        assert sweeper.sweep_expired_leases(partitions=None) == 0  # lease still valid
        expire_lease(execution)
        assert sweeper.sweep_expired_leases(partitions=None) == 1
    execution.refresh_from_db()
    assert execution.state == "dead" and execution.attempt == 2 and execution.finished_at
    assert execution.reason_code == "lease_expired" and "attempts exhausted" in execution.reason
    # The claim writes `attempt_started` with `claimed` (issue 19: one round trip).
    assert kinds(execution) == [
        "claimed",
        "attempt_started",
        "timed_out",
        "retry_scheduled",
        "claimed",
        "attempt_started",
        "timed_out",
        "dead",
    ]
    # Each takeover bumps the token: claim 1, sweep 2, claim 3, sweep 4.
    assert execution.fencing_token == 4


def test_sweeper_backstop_catches_a_run_that_heartbeats_past_its_timeout(
    admin_principal: Principal,
) -> None:
    execution = make_execution(make_schedule(admin_principal, TARGET, timeout_s=5))
    assert claim(execution) is not None
    Execution.objects.filter(pk=execution.pk).update(
        started_at=execution.created_at - timedelta(hours=1)
    )
    assert sweeper.sweep_expired_leases(partitions=None) == 1
    execution.refresh_from_db()
    assert execution.state == "retry_scheduled" and execution.reason_code == "backstop_timeout"


def test_sweeper_respects_partitions(admin_principal: Principal) -> None:
    execution = make_execution(make_schedule(admin_principal, TARGET))
    assert claim(execution) is not None
    expire_lease(execution)
    other = [p for p in range(16) if p != execution.partition]
    assert sweeper.sweep_expired_leases(partitions=other) == 0
    assert sweeper.sweep_expired_leases(partitions=[execution.partition]) == 1


def test_two_sweepers_racing_handle_each_row_once(admin_principal: Principal) -> None:
    schedule = make_schedule(admin_principal, TARGET)
    executions = [make_execution(schedule) for _ in range(40)]
    for e in executions:
        assert claim(e) is not None
    Execution.objects.filter(pk__in=[e.pk for e in executions]).update(
        lease_expires_at=executions[0].created_at - timedelta(days=1)
    )
    counts: list[int] = []
    barrier = threading.Barrier(3)

    def sweep() -> None:
        try:
            barrier.wait()
            total = 0
            while n := sweeper.sweep_expired_leases(partitions=None, limit=7):
                total += n
            counts.append(total)
        finally:
            connection.close()

    threads = [threading.Thread(target=sweep) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(counts) == 40
    assert ExecutionEvent.objects.filter(kind="timed_out").count() == 40
    assert set(Execution.objects.values_list("attempt", flat=True)) == {2}


def test_execution_of_a_deleted_schedule_is_cancelled_not_run(admin_principal: Principal) -> None:
    from dispatch import services
    from dispatch.worker import runner

    schedule = make_schedule(admin_principal, TARGET)
    execution = make_execution(schedule)
    Execution.objects.filter(pk=execution.pk).update(state="queued")
    services.schedule_delete(actor=admin_principal, schedule_id=schedule.id)
    assert runner.run_execution(execution_id=str(execution.id), attempt=1) == "cancelled"
    execution.refresh_from_db()
    assert execution.state == "cancelled" and execution.reason_code == "schedule_deleted"
    assert kinds(execution) == ["claimed", "cancelled"]


def test_orphan_message_runs_nothing(admin_principal: Principal) -> None:
    import uuid

    from dispatch.worker import runner

    assert runner.run_execution(execution_id=str(uuid.uuid4()), attempt=1) == "orphan"
    assert not Execution.objects.exists() and not ExecutionEvent.objects.exists()
