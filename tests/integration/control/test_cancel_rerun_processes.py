"""Cancel and re-run with a real beat and real workers (separate processes) calling
a loopback receiver: the beat admits and publishes the rows, the workers claim and
run them, the test acts through the API.

Cancel: a running HTTP call and a running command are stopped (before the target
answered / with their process group), the stop is recorded (`cancelled_stop`), a
completion that arrives after the cancel is refused by the token check and
recorded (`fencing_rejected`), and a cancel racing a completion leaves exactly one
final state. Re-run: a dead execution re-run to success with its own retry budget,
the target seeing new X-Attempt / fencing tokens and the same X-Scheduled-For; an
edited payload reaches the target once, the next re-run uses the schedule's again.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from dispatch.models import Execution, ExecutionEvent, ManagedCommand, Schedule
from tenants.roles import Principal
from tests.support.ledger import Ledger, ok
from tests.support.procs import Proc, beat_cmd, processes, wait_for, worker_cmd
from tests.support.worker_support import (
    ONE_SHOT,
    kinds,
    make_execution,
    make_schedule,
    purge,
    state_of,
    worker_log_ready,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# The main worker's lease: its heartbeat (lease / 3) notices a cancel within a second.
LEASE_S = "3"
# A worker whose heartbeat would not come for 20 s: a cancel is only seen at completion.
LONG_LEASE_S = "60"
TWO_TRIES = {"max_attempts": 2, "backoff": "fixed", "initial_s": 0, "max_s": 0}


@pytest.fixture(scope="module")
def module_ledger() -> Iterator[Ledger]:
    with Ledger() as ledger:
        yield ledger


@pytest.fixture
def ledger(module_ledger: Ledger) -> Ledger:
    module_ledger.requests.clear()
    module_ledger.effects.clear()
    module_ledger.deliveries.clear()
    module_ledger.respond = ok
    return module_ledger


@pytest.fixture
def platform(tmp_path: Path, ledger: Ledger) -> Iterator[Callable[..., Proc]]:
    """A beat (owning every partition) and worker w1 (default.short); `start_worker`
    is returned for the tests that need another one."""
    from django.conf import settings

    purge(settings.CELERY_BROKER_URL)
    with processes(tmp_path) as start:

        def start_worker(name: str, queues: str, **env: str) -> Proc:
            proc = start(
                name,
                worker_cmd(queues=queues, concurrency=2, name=name),
                TARGET_TEST_ALLOW=ledger.allow_entry,
                **({"EXECUTION_LEASE_S": LEASE_S} | env),
            )
            wait_for(lambda: worker_log_ready(proc) or not proc.alive(), timeout=30, what=name)
            assert proc.alive(), proc.output()
            return proc

        start(
            "beat",
            beat_cmd("--name", "beat-rc", "--lease-ttl", "5", "--cycle", "0.2", "--lookahead", "2"),
            SWEEP_INTERVAL_S="0.5",
        )
        start_worker("w1", "default.short")
        yield start_worker
    purge(settings.CELERY_BROKER_URL)


class Hold:
    """The ledger holds its reply to the first call until released (at most 60 s)."""

    def __init__(self, ledger: Ledger) -> None:
        self.arrived = threading.Event()
        self.release = threading.Event()
        self.replied = threading.Event()

        def respond(req: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
            if len(ledger.requests) == 1:
                self.arrived.set()
                self.release.wait(60)
                self.replied.set()
            return 200, {}, b"ok"

        ledger.respond = respond


@pytest.fixture
def hold(ledger: Ledger) -> Iterator[Hold]:
    held = Hold(ledger)
    yield held
    held.release.set()


def http(ledger: Ledger, **extra: Any) -> dict[str, Any]:
    return {"type": "http", "url": f"{ledger.url}/hook", "method": "POST"} | extra


def cancel(api: APIClient, execution: Execution, reason: str = "") -> Any:
    return api.post(f"/v1/executions/{execution.id}:cancel", {"reason": reason}, format="json")


def rerun(api: APIClient, execution: Execution, target: dict[str, Any] | None = None) -> Any:
    body = {"target": target} if target is not None else {}
    return api.post(f"/v1/executions/{execution.id}:rerun", body, format="json")


def event(execution: Execution, kind: str) -> ExecutionEvent:
    return ExecutionEvent.objects.get(execution=execution, kind=kind)


def header(req: dict[str, Any], name: str) -> str:
    return str({k.lower(): v for k, v in req["headers"].items()}[name.lower()])


def processes_matching(pattern: str) -> str:
    return subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.strip()


# --- cancel -----------------------------------------------------------------------------


def test_cancel_stops_a_running_http_call_and_records_the_stop(
    platform: Any, ledger: Ledger, hold: Hold, api: APIClient, admin_principal: Principal
) -> None:
    schedule = make_schedule(admin_principal, http(ledger), retry=ONE_SHOT, timeout_s=60)
    execution = make_execution(schedule)
    assert hold.arrived.wait(30), "the beat published it and a worker called the target"
    claimed = event(execution, "claimed").data["fencing_token"]

    res = cancel(api, execution, "deploy freeze")
    assert res.status_code == 200, res.content
    assert res.json()["state"] == "cancelled"
    wait_for(lambda: "cancelled_stop" in kinds(execution), timeout=30, what="the stop")
    # The worker gave up while the target was still holding its reply: the call was cut.
    assert not hold.replied.is_set()

    stop = event(execution, "cancelled_stop")
    assert stop.data["token"] == claimed and stop.data["current_token"] == claimed + 1
    assert stop.data["discarded"] == "failed", "the aborted call's outcome was not applied"
    row = Execution.objects.get(pk=execution.pk)
    assert row.state == "cancelled" and row.reason_code == "cancelled_by_user"
    assert row.status_code is None and row.fencing_token == claimed + 1
    seen = kinds(execution)
    assert seen.index("cancelled") < seen.index("cancelled_stop")
    assert not {"attempt_succeeded", "attempt_failed", "dead"} & set(seen), seen
    assert len(ledger.requests) == 1


def test_cancel_terminates_a_running_commands_process_group(
    platform: Any, api: APIClient, admin_principal: Principal
) -> None:
    ManagedCommand.objects.create(
        name="long-export", argv=["/bin/sh", "-c", "sleep 47.5 & exec sleep 47.6"]
    )
    target = {"type": "command", "command": "long-export", "args": {}}
    execution = make_execution(make_schedule(admin_principal, target, retry=ONE_SHOT, timeout_s=60))
    wait_for(lambda: processes_matching("sleep 47.6"), timeout=30, what="the command to start")

    assert cancel(api, execution, "wrong day").status_code == 200
    wait_for(lambda: "cancelled_stop" in kinds(execution), timeout=30, what="the stop")
    # Both the command and the child it left in the background are gone.
    wait_for(lambda: not processes_matching("sleep 47.[56]"), timeout=10, what="the process group")
    row = Execution.objects.get(pk=execution.pk)
    assert row.state == "cancelled" and row.exit_code is None
    assert not {"attempt_succeeded", "attempt_failed"} & set(kinds(execution))


def test_completion_after_the_cancel_is_rejected_by_fencing_and_recorded(
    platform: Callable[..., Proc],
    ledger: Ledger,
    hold: Hold,
    api: APIClient,
    admin_principal: Principal,
) -> None:
    # A worker whose next heartbeat is 20 s away: the cancel meets its completion.
    platform("w-long", "low.short", EXECUTION_LEASE_S=LONG_LEASE_S)
    schedule = make_schedule(admin_principal, http(ledger), retry=ONE_SHOT, timeout_s=60)
    Schedule.objects.filter(pk=schedule.pk).update(priority="low")
    execution = make_execution(schedule)
    assert hold.arrived.wait(30)

    assert cancel(api, execution).status_code == 200
    hold.release.set()  # the target answers 200 now, after the cancel
    wait_for(lambda: "fencing_rejected" in kinds(execution), timeout=30, what="the rejection")

    assert hold.replied.is_set()
    rejected = event(execution, "fencing_rejected")
    assert rejected.data["discarded"] == "succeeded"
    assert rejected.data["current_state"] == "cancelled"
    assert rejected.data["current_token"] == rejected.data["token"] + 1
    assert "completion" in rejected.message
    row = Execution.objects.get(pk=execution.pk)
    assert row.state == "cancelled" and row.status_code is None
    assert "attempt_succeeded" not in kinds(execution)


def test_a_cancelled_queued_runs_message_is_ignored_by_the_worker(
    platform: Callable[..., Proc], ledger: Ledger, api: APIClient, admin_principal: Principal
) -> None:
    # Published to high.short, which no worker consumes yet: it stays queued.
    schedule = make_schedule(admin_principal, http(ledger), retry=ONE_SHOT)
    Schedule.objects.filter(pk=schedule.pk).update(priority="high")
    execution = make_execution(schedule)
    wait_for(lambda: state_of(execution) == "queued", timeout=30, what="the publish")
    assert cancel(api, execution, "not today").status_code == 200

    platform("w-high", "high.short")
    wait_for(lambda: "delivery_ignored" in kinds(execution), timeout=30, what="the delivery")
    ignored = event(execution, "delivery_ignored")
    assert ignored.data["delivery"] == "cancelled" and ignored.data["state"] == "cancelled"
    assert ledger.requests == [] and "claimed" not in kinds(execution)


def test_cancel_racing_a_completion_ends_in_exactly_one_final_state(
    platform: Any, ledger: Ledger, api: APIClient, admin_principal: Principal
) -> None:
    def quick(req: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        time.sleep(0.2)
        return 200, {}, b"ok"

    ledger.respond = quick
    schedule = make_schedule(admin_principal, http(ledger), retry=ONE_SHOT, timeout_s=30)
    outcomes = []
    ends = {"attempt_succeeded", "cancelled_stop", "fencing_rejected"}
    for n, delay in enumerate((0.0, 0.1, 0.2, 0.3, 0.5)):
        execution = make_execution(schedule)
        wait_for(lambda n=n: len(ledger.requests) > n, timeout=30, what="the call")
        time.sleep(delay)
        res = cancel(api, execution, "race")
        # Whoever came second recorded that it lost; wait for the worker's last word.
        wait_for(lambda e=execution: ends & set(kinds(e)), timeout=30, what="the worker's end")
        row = Execution.objects.get(pk=execution.pk)
        seen = kinds(execution)
        if res.status_code == 200:
            assert row.state == "cancelled", seen
            assert "attempt_succeeded" not in seen
            assert {"cancelled_stop", "fencing_rejected"} & set(seen), seen
        else:
            assert res.status_code == 409, res.content
            assert res.json()["error"]["message"].startswith("execution is succeeded;")
            assert row.state == "succeeded" and row.status_code == 200
            assert "cancelled" not in seen
        outcomes.append(row.state)
    assert len(ledger.requests) == 5, "each execution called its target once"
    assert set(outcomes) <= {"cancelled", "succeeded"}


def test_a_cancelled_planned_row_is_not_published_and_a_rerun_runs_it(
    platform: Any, ledger: Ledger, api: APIClient, admin_principal: Principal
) -> None:
    schedule = make_schedule(admin_principal, http(ledger), retry=ONE_SHOT)
    # Due in 1.5 s: inside the beat's 2 s lookahead, so it sits in the beat's heap.
    execution = make_execution(schedule, due_in_s=1.5)
    time.sleep(0.6)
    assert cancel(api, execution, "not this one").status_code == 200
    time.sleep(3)  # past its due time: a publish would have reached the worker by now
    assert kinds(execution) == ["cancelled"], "admission's conditional update dropped it"
    assert ledger.requests == []

    assert rerun(api, execution).status_code == 202
    wait_for(lambda: state_of(execution) == "succeeded", timeout=30, what="the re-run")
    [req] = ledger.requests
    assert header(req, "X-Attempt") == "2"


# --- re-run -----------------------------------------------------------------------------


def test_rerun_of_a_dead_execution_runs_to_success_with_its_own_retries(
    platform: Any, ledger: Ledger, api: APIClient, admin_principal: Principal
) -> None:
    answers = iter([500, 500, 500, 200])

    def respond(req: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        return next(answers, 200), {}, b"answer"

    ledger.respond = respond
    schedule = make_schedule(admin_principal, http(ledger), retry=TWO_TRIES)
    execution = make_execution(schedule)
    wait_for(lambda: state_of(execution) == "dead", timeout=30, what="the first chain to die")
    assert Execution.objects.get(pk=execution.pk).reason.endswith("attempts exhausted (2 of 2)")

    res = rerun(api, execution)
    assert res.status_code == 202, res.content
    assert res.json()["attempt"] == 3 and res.json()["attempt_base"] == 2
    wait_for(lambda: state_of(execution) == "succeeded", timeout=30, what="the re-run")

    row = Execution.objects.get(pk=execution.pk)
    assert row.attempt == 4 and row.attempt_base == 2 and row.reruns == 1
    assert row.status_code == 200
    # The re-run's first attempt failed and was retried: its chain has two attempts again.
    retries = ExecutionEvent.objects.filter(execution=execution, kind="retry_scheduled")
    assert [e.data["next_attempt"] for e in retries.order_by("id")] == [2, 4]
    assert [len(ledger.requests)] == [4]
    attempts = [header(r, "X-Attempt") for r in ledger.requests]
    tokens = [int(header(r, "X-Fencing-Token")) for r in ledger.requests]
    assert attempts == ["1", "2", "3", "4"]
    # X-Run tells the deliberate re-run (run 2) from the first chain's retries (run 1).
    assert [header(r, "X-Run") for r in ledger.requests] == ["1", "1", "2", "2"]
    assert tokens == sorted(tokens) and len(set(tokens)) == 4
    assert len({header(r, "X-Scheduled-For") for r in ledger.requests}) == 1
    assert len({header(r, "X-Execution-Id") for r in ledger.requests}) == 1


def test_rerun_with_an_edited_payload_then_the_schedules_target_again(
    platform: Any,
    ledger: Ledger,
    api: APIClient,
    admin_principal: Principal,
    settings: Any,
) -> None:
    # The API validates the edited target like a schedule's: the loopback receiver
    # must be allowed in this process too (the worker has it in its environment).
    settings.TARGET_TEST_ALLOW = [ledger.allow_entry]
    schedule = make_schedule(admin_principal, http(ledger, body={"v": "schedule"}))
    execution = make_execution(schedule)
    wait_for(lambda: state_of(execution) == "succeeded", timeout=30, what="the first run")

    edited = http(ledger, body={"v": "edited"}, headers={"X-Replay": "yes"})
    assert rerun(api, execution, edited).status_code == 202
    wait_for(lambda: len(ledger.requests) == 2 and state_of(execution) == "succeeded", timeout=30)
    assert rerun(api, execution).status_code == 202
    wait_for(lambda: len(ledger.requests) == 3 and state_of(execution) == "succeeded", timeout=30)

    bodies = [json.loads(r["body"]) for r in ledger.requests]
    assert bodies == [{"v": "schedule"}, {"v": "edited"}, {"v": "schedule"}]
    replay = [{k.lower() for k in r["headers"]} for r in ledger.requests]
    assert ["x-replay" in h for h in replay] == [False, True, False]
    assert Execution.objects.get(pk=execution.pk).target_override is None
