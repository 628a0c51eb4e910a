"""Workers killed and paused for real (failure contract C2 and C6, and "What happens when a
worker dies mid-job": docs/explanation/failure-contract.md): kill -9 after the
call, SIGSTOP past the lease, and a job that kills its worker every time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from dispatch.models import Execution, ExecutionEvent, ManagedCommand
from tenants.roles import Principal
from tests.support.ledger import Ledger
from tests.support.procs import Proc, wait_for
from tests.support.worker_support import (
    QUICK_RETRY,
    Gate,
    Pump,
    final,
    hold_first_call,
    kinds,
    make_execution,
    make_schedule,
    pool_children,
    publish,
    state_of,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def start_w1_and_w2(start_worker: Callable[..., Proc], ledger: Ledger) -> tuple[Proc, Proc]:
    """w1 consumes default.short (attempt 1), w2 high.short (where the pump sends attempt 2)."""
    env = {"TARGET_TEST_ALLOW": ledger.allow_entry}
    w1 = start_worker("w1", queues="default.short", WORKER_ID="w1", **env)
    w2 = start_worker("w2", queues="high.short", WORKER_ID="w2", **env)
    return w1, w2


def target(ledger: Ledger) -> dict[str, Any]:
    return {"type": "http", "url": f"{ledger.url}/hook", "method": "POST"}


def calls(ledger: Ledger) -> list[dict[str, str]]:
    return [{k.lower(): v for k, v in r["headers"].items()} for r in ledger.requests]


def test_kill_9_after_the_call_retries_same_execution_with_higher_token(
    start_worker: Callable[..., Proc], ledger: Ledger, admin_principal: Principal
) -> None:
    # The effect is applied; the worker dies before it hears back.
    called = hold_first_call(ledger, 2)
    w1, w2 = start_w1_and_w2(start_worker, ledger)
    execution = make_execution(make_schedule(admin_principal, target(ledger), retry=QUICK_RETRY))
    publish(execution.id, 1, queue="default.short")
    assert called.wait(20), w1.output()
    w1.kill()  # SIGKILL to the worker and its pool: nothing is recorded

    assert state_of(execution) == "running"
    Pump(queue="high.short").until(final(execution), timeout=30, what="attempt 2 on w2")

    execution.refresh_from_db()
    assert execution.state == "succeeded", w2.output()
    assert execution.attempt == 2
    assert execution.lease_owner.startswith("w2:")
    assert Execution.objects.filter(schedule_id=execution.schedule_id).count() == 1
    first, second = calls(ledger)
    assert first["x-execution-id"] == second["x-execution-id"] == str(execution.id)
    assert (first["x-attempt"], second["x-attempt"]) == ("1", "2")
    assert int(second["x-fencing-token"]) > int(first["x-fencing-token"])
    assert execution.fencing_token == int(second["x-fencing-token"])
    assert ledger.effects == {str(execution.id): 1}  # the idempotent receiver applied it once
    assert kinds(execution).count("attempt_succeeded") == 1
    timed_out = ExecutionEvent.objects.get(execution=execution, kind="timed_out")
    assert "without a heartbeat" in timed_out.message and "w1:" in timed_out.message


def test_sigstop_past_the_lease_then_sigcont_is_fenced_out(
    start_worker: Callable[..., Proc], ledger: Ledger, admin_principal: Principal
) -> None:
    called = hold_first_call(ledger, 8)  # still waiting when the paused worker wakes up
    w1, w2 = start_w1_and_w2(start_worker, ledger)
    execution = make_execution(make_schedule(admin_principal, target(ledger), retry=QUICK_RETRY))
    publish(execution.id, 1, queue="default.short")
    assert called.wait(20), w1.output()
    w1.pause()
    Pump(queue="high.short").until(final(execution), timeout=30, what="w2 to finish it")
    execution.refresh_from_db()
    finished_by_w2 = (
        execution.state,
        execution.attempt,
        execution.fencing_token,
        execution.lease_owner,
    )
    assert execution.state == "succeeded" and execution.lease_owner.startswith("w2:"), w2.output()

    w1.resume()
    wait_for(lambda: "fencing_rejected" in kinds(execution), timeout=15, what="w1's write rejected")

    execution.refresh_from_db()
    after = (execution.state, execution.attempt, execution.fencing_token, execution.lease_owner)
    assert after == finished_by_w2
    rejected = ExecutionEvent.objects.get(execution=execution, kind="fencing_rejected")
    assert rejected.actor.startswith("w1:")
    assert rejected.data["token"] == 1 and rejected.data["current_token"] == execution.fencing_token
    assert "was rejected" in rejected.message
    assert kinds(execution).count("attempt_succeeded") == 1
    # w1 stopped its call when its heartbeat was refused, instead of waiting it out.
    assert "lease lost" in w1.output() or "rejected" in w1.output()


def test_job_that_kills_its_worker_ends_dead_after_max_attempts_others_flow(
    start_worker: Callable[..., Proc], ledger: Ledger, admin_principal: Principal
) -> None:
    ManagedCommand.objects.create(name="poison", argv=["/bin/sh", "-c", "kill -9 $PPID"])
    w1 = start_worker(
        "w1",
        queues="default.short",
        concurrency=2,
        WORKER_ID="w1",
        TARGET_TEST_ALLOW=ledger.allow_entry,
        # A sandboxed command cannot see its worker (test_worker_sandbox); the
        # development mode without a sandbox is how a job can still kill one.
        COMMAND_SANDBOX="none",
    )
    pool_before = set(pool_children(w1))
    poison = make_execution(
        make_schedule(
            admin_principal, {"type": "command", "command": "poison", "args": {}}, retry=QUICK_RETRY
        )
    )
    publish(poison.id, 1)
    healthy_schedule = make_schedule(admin_principal, target(ledger))
    healthy: list[Execution] = []
    pump = Pump()

    def poison_done() -> bool:
        if len(healthy) < 6:
            e = make_execution(healthy_schedule)
            publish(e.id, 1)
            healthy.append(e)
        return state_of(poison) == "dead"

    pump.until(poison_done, timeout=45, what="the poison job to end dead")
    for e in healthy:
        pump.until(final(e), timeout=20)

    poison.refresh_from_db()
    assert poison.attempt == 3
    assert kinds(poison).count("claimed") == 3
    assert kinds(poison).count("timed_out") == 3
    assert kinds(poison)[-1] == "dead"
    assert "attempts exhausted" in poison.reason
    assert all(state_of(e) == "succeeded" for e in healthy)
    assert w1.alive()
    assert set(pool_children(w1)) != pool_before  # the pool replaced the killed children
    # No redelivery loop: nothing of the poison job is left in the broker.
    time.sleep(1)
    assert kinds(poison).count("claimed") == 3
    assert pump.published == [(str(poison.id), 2), (str(poison.id), 3)]


def test_sigterm_during_a_long_job_lets_it_finish_then_exits(
    start_worker: Callable[..., Proc], ledger: Ledger, admin_principal: Principal
) -> None:
    import os
    import signal

    called = Gate()

    def respond(req: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        called.set()
        time.sleep(3)  # the job is mid-call when the worker is told to stop
        return 200, {}, b"done"

    ledger.respond = respond
    w1 = start_worker(
        "w1", queues="default.short", WORKER_ID="w1", TARGET_TEST_ALLOW=ledger.allow_entry
    )
    execution = make_execution(make_schedule(admin_principal, target(ledger), retry=QUICK_RETRY))
    publish(execution.id, 1, queue="default.short")
    assert called.wait(20), w1.output()
    os.kill(
        w1.pid, signal.SIGTERM
    )  # Celery's warm shutdown: finish what is running, take nothing new
    w1.proc.wait(30)
    execution.refresh_from_db()
    assert execution.state == "succeeded" and execution.attempt == 1, w1.output()
    assert execution.lease_expires_at is None  # nothing left running past the lease
    assert len(ledger.requests) == 1
    assert "Warm shutdown" in w1.output()
