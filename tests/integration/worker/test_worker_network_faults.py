"""Workers whose database link fails for real (tests/support/faultproxy.py between a
worker process and PostgreSQL), and a target host that does not resolve (issue 16).

* a completion lost to a connection reset is retried on a fresh connection, not
  acknowledged and forgotten (the job would run again a lease later);
* a delivery that finds the database away waits for it and runs, rather than being
  acknowledged and left to the beat's re-publish (WORKER_DB_WAIT_S);
* a claim whose reply came back after the lease was revoked makes no call;
* a worker busy with a long job holds no second message another worker could run;
* a target name that does not resolve is a retryable failure, never a crash.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from dispatch.models import Execution, ExecutionEvent
from dispatch.scheduler import sweeper
from tenants.roles import Principal
from tests.support.faultproxy import FaultProxy
from tests.support.ledger import Ledger
from tests.support.procs import Proc, wait_for
from tests.support.worker_support import (
    Pump,
    final,
    kinds,
    make_execution,
    make_schedule,
    pool_children,
    publish,
    state_of,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
QUICK_RETRY = {"max_attempts": 3, "backoff": "fixed", "initial_s": 0, "max_s": 0}


def target(ledger: Ledger) -> dict[str, Any]:
    return {"type": "http", "url": f"{ledger.url}/hook", "method": "POST"}


def calls(ledger: Ledger) -> list[dict[str, str]]:
    return [{k.lower(): v for k, v in r["headers"].items()} for r in ledger.requests]


def blocking(ledger: Ledger) -> tuple[threading.Event, threading.Event]:
    """The receiver answers only once released: (called, release)."""
    called, release = threading.Event(), threading.Event()

    def respond(req: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        called.set()
        release.wait(30)
        return 200, {}, b"ok"

    ledger.respond = respond
    return called, release


def test_completion_lost_to_a_connection_reset_is_retried_and_the_job_runs_once(
    start_worker: Callable[..., Proc],
    ledger: Ledger,
    db_proxy: FaultProxy,
    admin_principal: Principal,
) -> None:
    called, release = blocking(ledger)
    w1 = start_worker(
        "w1",
        queues="default.short",
        concurrency=1,
        WORKER_ID="w1",
        TARGET_TEST_ALLOW=ledger.allow_entry,
        DATABASE_URL=db_proxy.database_url(connection.settings_dict),
        EXECUTION_LEASE_S="10",
        FINISH_RETRY_S="30",
    )
    execution = make_execution(make_schedule(admin_principal, target(ledger), retry=QUICK_RETRY))
    publish(execution.id, 1, queue="default.short")
    assert called.wait(20), w1.output()

    # Mid-call, every database connection of the worker is reset and new ones are
    # refused for a while: the result arrives while the database is away.
    db_proxy.refuse()
    release.set()
    wait_for(
        lambda: "retrying on a fresh connection" in w1.output(),
        timeout=15,
        what="the worker to retry its completion",
    )
    time.sleep(1.0)  # a few more failed tries
    db_proxy.pass_()
    # A sweeper runs meanwhile, as the beats' would: it must find nothing to rescue.
    Pump(queue="default.short").until(final(execution), timeout=30, what="the completion")

    execution.refresh_from_db()
    assert execution.state == "succeeded", w1.output()
    assert execution.attempt == 1
    assert execution.fencing_token == 1
    assert len(ledger.requests) == 1, ledger.dump()
    assert kinds(execution).count("attempt_succeeded") == 1
    assert "fencing_rejected" not in kinds(execution)
    assert "database error" not in w1.output()  # never acknowledged as lost


def test_a_delivery_that_finds_the_database_away_waits_for_it_and_runs(
    start_worker: Callable[..., Proc],
    ledger: Ledger,
    db_proxy: FaultProxy,
    admin_principal: Principal,
) -> None:
    """A restart or fail-over while messages wait: each delivery the worker takes
    meanwhile used to be acknowledged as a database error, its run left to the beat's
    re-publish (QUEUED_REPUBLISH_S, a minute). Now the worker waits for the database
    (WORKER_DB_WAIT_S) and runs it: the calls arrive once it is back, from these
    deliveries (no beat runs here to re-publish anything), each once."""
    w1 = start_worker(
        "w1",
        queues="default.short",
        concurrency=2,
        WORKER_ID="w1",
        TARGET_TEST_ALLOW=ledger.allow_entry,
        DATABASE_URL=db_proxy.database_url(connection.settings_dict),
        WORKER_DB_WAIT_S="30",
    )
    executions = [
        make_execution(make_schedule(admin_principal, target(ledger), retry=QUICK_RETRY))
        for _ in range(4)
    ]
    db_proxy.refuse()  # every connection reset, every new one refused
    for execution in executions:
        publish(execution.id, 1, queue="default.short")
    wait_for(
        lambda: w1.output().count("waiting up to 30 s for it") >= 2,
        timeout=20,
        what="both pool slots to wait for the database",
    )
    time.sleep(2.0)  # away a while longer: the other two messages stay in the broker
    db_proxy.pass_()
    wait_for(lambda: len(ledger.requests) >= 4, timeout=30, what="the four calls")
    for execution in executions:
        wait_for(final(execution), timeout=20, what="the completion")
        execution.refresh_from_db()
        assert (execution.state, execution.attempt) == ("succeeded", 1), w1.output()
    assert sorted(h["x-execution-id"] for h in calls(ledger)) == sorted(
        str(e.id) for e in executions
    )
    assert "database error" not in w1.output()  # none acknowledged as lost


def test_completion_gives_up_after_finish_retry_s_and_the_lease_rescues_it(
    start_worker: Callable[..., Proc],
    ledger: Ledger,
    db_proxy: FaultProxy,
    admin_principal: Principal,
) -> None:
    """Bounded: with the database away past FINISH_RETRY_S the worker stops trying
    (and stays up); the lease then lapses and the job runs again."""
    called, release = blocking(ledger)
    w1 = start_worker(
        "w1",
        queues="default.short",
        concurrency=1,
        WORKER_ID="w1",
        TARGET_TEST_ALLOW=ledger.allow_entry,
        DATABASE_URL=db_proxy.database_url(connection.settings_dict),
        EXECUTION_LEASE_S="3",
        FINISH_RETRY_S="1.5",
    )
    child = pool_children(w1)
    execution = make_execution(make_schedule(admin_principal, target(ledger), retry=QUICK_RETRY))
    publish(execution.id, 1, queue="default.short")
    assert called.wait(20), w1.output()
    db_proxy.refuse()
    release.set()
    wait_for(lambda: "giving up" in w1.output(), timeout=15, what="the worker to give up")
    db_proxy.pass_()
    Pump(queue="default.short").until(final(execution), timeout=30, what="the rerun")

    execution.refresh_from_db()
    assert execution.state == "succeeded", w1.output()
    assert execution.attempt == 2  # the sweeper's rerun, not a forgotten row
    assert len(ledger.requests) == 2
    assert w1.alive() and pool_children(w1) == child


def test_a_claim_answered_after_its_lease_was_revoked_makes_no_call(
    start_worker: Callable[..., Proc],
    ledger: Ledger,
    db_proxy: FaultProxy,
    admin_principal: Principal,
) -> None:
    w1 = start_worker(
        "w1",
        queues="default.short",
        concurrency=1,
        WORKER_ID="w1",
        TARGET_TEST_ALLOW=ledger.allow_entry,
        DATABASE_URL=db_proxy.database_url(connection.settings_dict),
        EXECUTION_LEASE_S="2",
    )
    execution = make_execution(make_schedule(admin_principal, target(ledger), retry=QUICK_RETRY))
    # The claim reaches PostgreSQL and commits; its reply is held back.
    db_proxy.arm(b"WITH claimed AS", then="blackhole")
    publish(execution.id, 1, queue="default.short")
    assert db_proxy.armed.wait(20), w1.output()
    wait_for(lambda: state_of(execution) == "running", timeout=10, what="the claim to commit")
    # The lease lapses (database clock) and the sweeper hands the run on: token 2.
    wait_for(
        lambda: sweeper.sweep_expired_leases(partitions=None) == 1,
        timeout=10,
        what="the sweeper to take the execution over",
    )
    execution.refresh_from_db()
    assert (execution.state, execution.attempt, execution.fencing_token) == (
        "retry_scheduled",
        2,
        2,
    )
    db_proxy.pass_()  # the late reply arrives: the stale worker goes on with token 1

    wait_for(
        lambda: ExecutionEvent.objects.filter(
            execution=execution, kind="fencing_rejected", message__startswith="the call of"
        ).exists(),
        timeout=20,
        what="the stale worker to find its lease gone",
    )
    rejected = ExecutionEvent.objects.get(execution=execution, kind="fencing_rejected")
    assert rejected.actor.startswith("w1:")
    assert rejected.data["token"] == 1 and rejected.data["not_run"] is True
    assert rejected.data["current_token"] == 2
    time.sleep(0.5)
    assert ledger.requests == []  # no call under the revoked token

    Pump(queue="default.short").until(final(execution), timeout=30, what="attempt 2")
    execution.refresh_from_db()
    assert execution.state == "succeeded", w1.output()
    assert execution.attempt == 2
    (call,) = calls(ledger)
    assert (call["x-attempt"], call["x-fencing-token"]) == ("2", str(execution.fencing_token))
    assert "lease lost before the call" in w1.output()


def test_a_worker_busy_with_a_long_job_holds_no_second_message(
    start_worker: Callable[..., Proc], ledger: Ledger, admin_principal: Principal
) -> None:
    """On long queues prefetch is bounded to the message each process runs, even
    with CELERY_PREFETCH_MULTIPLIER raised for the short ones: a cut-off or busy
    worker keeps no backlog another worker could have run at once."""
    called, release = blocking(ledger)
    long_queues = "high.long,default.long,low.long"
    env = {
        "TARGET_TEST_ALLOW": ledger.allow_entry,
        "EXECUTION_LEASE_S": "10",
        "CELERY_PREFETCH_MULTIPLIER": "4",
    }
    busy = start_worker("busy", queues=long_queues, concurrency=1, WORKER_ID="busy", **env)
    schedule = make_schedule(admin_principal, target(ledger), retry=QUICK_RETRY, timeout_s=30)
    first = make_execution(schedule)
    publish(first.id, 1, queue="default.long")
    assert called.wait(20), busy.output()
    second = make_execution(schedule)
    publish(second.id, 1, queue="default.long")
    time.sleep(1.0)  # time enough for the busy worker to reserve it, were it allowed to
    start_worker("idle", queues=long_queues, concurrency=1, WORKER_ID="idle", **env)
    wait_for(lambda: len(ledger.requests) == 2, timeout=15, what="the idle worker to run it")
    assert state_of(first) == "running"  # the first job is still blocked on the busy worker
    release.set()
    wait_for(lambda: final(first)() and final(second)(), timeout=20, what="both to finish")
    owners = dict(
        Execution.objects.filter(pk__in=[first.pk, second.pk]).values_list("pk", "lease_owner")
    )
    assert owners[first.pk].startswith("busy:")
    assert owners[second.pk].startswith("idle:")


def test_a_target_host_that_does_not_resolve_is_retried_never_a_crash(
    start_worker: Callable[..., Proc], ledger: Ledger, admin_principal: Principal
) -> None:
    w1 = start_worker(
        "w1",
        queues="default.short",
        concurrency=1,
        WORKER_ID="w1",
        TARGET_TEST_ALLOW=ledger.allow_entry,
    )
    children = pool_children(w1)
    retry = {"max_attempts": 2, "backoff": "fixed", "initial_s": 0, "max_s": 0}
    lost = make_execution(
        make_schedule(
            admin_principal,
            {"type": "http", "url": "http://gone.scheduler-test.invalid/hook", "method": "POST"},
            retry=retry,
        )
    )
    publish(lost.id, 1, queue="default.short")
    Pump(queue="default.short").until(final(lost), timeout=30, what="both attempts")

    lost.refresh_from_db()
    assert lost.state == "dead", w1.output()
    assert lost.attempt == 2  # retried: a connection-class error, not a refusal
    failed = list(
        ExecutionEvent.objects.filter(execution=lost, kind="attempt_failed").order_by("id")
    )
    assert [e.data["retryable"] for e in failed] == [True, True]
    assert {e.data["reason_code"] for e in failed} == {"dns"}
    assert "cannot resolve gone.scheduler-test.invalid" in failed[0].message
    assert "retry_scheduled" in kinds(lost)
    # The worker and its pool process carried on, and still run jobs.
    assert w1.alive() and pool_children(w1) == children
    assert "Traceback" not in w1.output()
    fine = make_execution(make_schedule(admin_principal, target(ledger)))
    publish(fine.id, 1, queue="default.short")
    wait_for(lambda: state_of(fine) == "succeeded", timeout=20, what="the next job")
