"""The worker's database round trips per execution (issue 19): a call shorter than a
third of the lease costs the claim (writing `claimed` and `attempt_started`) and the
fenced finish, nothing else. Counted at the protocol level (core/pgtrace.py: every
ReadyForQuery, so BEGIN and COMMIT too) on the runner's own connection, running
in-process against a real loopback receiver."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest
from django.conf import settings

from core.pgtrace import traced
from dispatch.models import Execution, ExecutionEvent
from dispatch.worker import leases, runner
from tenants.roles import Principal
from tests.support.ledger import Ledger
from tests.support.worker_support import kinds, make_execution, make_schedule

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("ledger_allowed")]


def http(ledger: Ledger) -> dict[str, Any]:
    return {"type": "http", "url": f"{ledger.url}/hook", "method": "POST", "body": {"x": 1}}


def test_a_fast_successful_call_costs_two_round_trips(
    ledger: Ledger, admin_principal: Principal
) -> None:
    execution = make_execution(make_schedule(admin_principal, http(ledger)))
    runner.run_execution(execution_id=str(execution.id), attempt=1)  # warm: connection, caches
    second = make_execution(make_schedule(admin_principal, http(ledger), name="second"))

    with traced() as trips:
        result = runner.run_execution(execution_id=str(second.id), attempt=1)

    assert result == "succeeded"
    assert trips.round_trips == 2, str(trips)
    # The named statements' first lines (their comments in dispatch/sql/worker.sql).
    assert "Claim the execution" in trips.statements[0], str(trips)
    assert "Record an attempt's end" in trips.statements[1], str(trips)
    second.refresh_from_db()
    assert second.state == "succeeded" and second.status_code == 200
    assert second.fencing_token == 1 and second.lease_expires_at is None
    assert kinds(second) == ["claimed", "attempt_started", "attempt_succeeded"]
    started = ExecutionEvent.objects.get(execution_id=second.id, kind="attempt_started")
    assert started.data == {"attempt": 1, "fencing_token": 1, "target": "http", "timeout_s": 10}
    assert (
        started.message.startswith("attempt 1 started by ") and "(timeout 10 s)" in started.message
    )
    assert len(ledger.requests) == 2


def test_the_claim_is_the_lease_check_only_while_its_reply_was_in_time(
    ledger: Ledger, admin_principal: Principal, settings: Any
) -> None:
    lease_s = float(settings.EXECUTION_LEASE_S)
    execution = make_execution(make_schedule(admin_principal, http(ledger)))
    claim = leases.execution_claim(
        execution_id=str(execution.id), attempt=1, owner="w-test:1", lease_s=lease_s
    )
    assert claim is not None and claim.started

    with traced() as fresh:
        assert leases.lease_check(claim=claim, lease_s=lease_s)
    assert fresh.round_trips == 0, str(fresh)

    # A claim whose reply came back after two thirds of the lease is not trusted:
    # one statement checks (and renews) the lease by the database clock.
    late = dataclasses.replace(claim, claimed_at=time.monotonic() - lease_s * 0.7)
    with traced() as checked:
        assert leases.lease_check(claim=late, lease_s=lease_s)
    assert checked.round_trips == 1 and "Just before the call" in checked.statements[0], str(
        checked
    )

    # Taken over meanwhile (the sweeper, a cancel: a token bump): the late claim makes no call.
    Execution.objects.filter(pk=execution.pk).update(fencing_token=claim.fencing_token + 1)
    assert not leases.lease_check(claim=late, lease_s=lease_s)


def test_a_rate_limit_hand_back_takes_the_claims_started_entry_back(
    ledger: Ledger, admin_principal: Principal, settings: Any
) -> None:
    settings.TARGET_RATE_PER_HOST = "1/hour"
    first = make_execution(make_schedule(admin_principal, http(ledger)))
    second = make_execution(make_schedule(admin_principal, http(ledger), name="second"))

    assert runner.run_execution(execution_id=str(first.id), attempt=1) == "succeeded"
    assert runner.run_execution(execution_id=str(second.id), attempt=1) == "held"

    second.refresh_from_db()
    assert second.state == "retry_scheduled" and second.attempt == 1
    assert kinds(second) == ["claimed", "held_rate_limit"]
    assert kinds(first) == ["claimed", "attempt_started", "attempt_succeeded"]
    assert len(ledger.requests) == 1


def test_counting_max_runs_and_completing_cost_no_extra_round_trip(
    ledger: Ledger, admin_principal: Principal
) -> None:
    """max_runs is counted, and the schedule completed, inside the fenced finish."""
    from dispatch.models import Schedule

    schedule = make_schedule(admin_principal, http(ledger), max_runs=2, cron="* * * * *")
    runner.run_execution(execution_id=str(make_execution(schedule).id), attempt=1)  # warm
    last = make_execution(schedule)

    with traced() as trips:
        result = runner.run_execution(execution_id=str(last.id), attempt=1)

    assert result == "succeeded"
    assert trips.round_trips == 2, str(trips)
    stored = Schedule.objects.get(pk=schedule.pk)
    assert stored.runs_succeeded == 2 and stored.completed_at is not None
    assert stored.next_run_at is None
    assert ExecutionEvent.objects.filter(schedule=schedule, kind="completed").count() == 1


def test_prepared_the_claim_and_finish_are_still_two_round_trips(
    ledger: Ledger, admin_principal: Principal
) -> None:
    """Once psycopg has prepared the claim and the finish on this connection
    (DB_PREPARED_STATEMENTS: after DB_PREPARE_AFTER runs), an execution sends each as
    a Bind of the prepared statement: still two round trips, and the same two."""
    schedule = make_schedule(admin_principal, http(ledger), cron="* * * * *")
    for _ in range(settings.DB_PREPARE_AFTER + 1):
        runner.run_execution(execution_id=str(make_execution(schedule).id), attempt=1)
    last = make_execution(schedule)

    with traced() as trips:
        assert runner.run_execution(execution_id=str(last.id), attempt=1) == "succeeded"

    assert trips.round_trips == 2, str(trips)
    assert trips.prepared_before, str(trips)  # both run as prepared statements
    assert "Claim the execution" in trips.statements[0], str(trips)
    assert "Record an attempt's end" in trips.statements[1], str(trips)
