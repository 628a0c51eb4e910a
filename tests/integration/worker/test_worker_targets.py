"""Queue and command targets run by a real worker, and the per-host rate limit
shared through Redis (held, not failed; the attempt is not consumed)."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from dispatch.models import ExecutionEvent, ManagedCommand
from tenants.roles import Principal
from tests.support.ledger import Ledger
from tests.support.procs import Proc
from tests.support.worker_support import (
    ONE_SHOT,
    Pump,
    final,
    make_execution,
    make_schedule,
    publish,
    run_queue_target,
    run_to_end,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
CMD_SECRET = "cmd-secret-4b1d0c2e"


@pytest.fixture(scope="module")
def worker_settings(module_ledger: Ledger) -> dict[str, Any]:
    return {
        "concurrency": 3,
        "TARGET_TEST_ALLOW": module_ledger.allow_entry,
        "TARGET_RATE_PER_HOST": "2/s",
        "SECRETS_BACKEND": "env",
        "SCHED_SECRET_BILLING__CMD_TOKEN": CMD_SECRET,
    }


def test_queue_target_publishes_the_ids_and_body(worker: Proc, admin_principal: Principal) -> None:
    execution, message = run_queue_target(
        admin_principal,
        {
            "type": "queue",
            "broker": "default",
            "exchange": "",
            "routing_key": "billing.jobs",
            "body": {"invoice": 42},
        },
    )
    assert message.payload == {
        "execution_id": str(execution.id),
        "scheduled_for": execution.scheduled_for.isoformat().replace("+00:00", "Z"),
        "attempt": 1,
        "run": 1,
        "fencing_token": 1,
        "body": {"invoice": 42},
    }
    assert message.headers["execution_id"] == str(execution.id)


def test_command_runs_without_shell_env_minimal_secret_redacted(
    worker: Proc, admin_principal: Principal
) -> None:
    ManagedCommand.objects.create(
        name="report",
        argv=[
            "/bin/sh",
            "-c",
            "echo id=$SCHED_EXECUTION_ID attempt=$SCHED_ATTEMPT token=$API_TOKEN day=$0; env",
            "{day}",
        ],
        env=["API_TOKEN"],
    )
    execution = run_to_end(
        admin_principal,
        {
            "type": "command",
            "command": "report",
            "args": {"day": "2026-01-01"},
            "env": {"API_TOKEN": {"secret": "env:CMD_TOKEN"}},
        },
    )
    assert execution.state == "succeeded" and execution.exit_code == 0, execution.error
    out = execution.log_excerpt
    assert f"id={execution.id} attempt=1 token=[redacted] day=2026-01-01" in out
    assert CMD_SECRET not in out
    names = {line.split("=", 1)[0] for line in out.splitlines()[1:] if "=" in line}
    assert not names & {
        "DATABASE_URL",
        "CELERY_BROKER_URL",
        "REDIS_URL",
        "VAULT_TOKEN",
        "SCHED_SECRET_BILLING__CMD_TOKEN",
        "SECRET_KEY",
    }
    assert "PATH" in names and "API_TOKEN" in names


def test_command_failure_exit_code_is_recorded(worker: Proc, admin_principal: Principal) -> None:
    ManagedCommand.objects.create(
        name="fails", argv=["/bin/sh", "-c", "echo bad input >&2; exit 3"]
    )
    execution = run_to_end(admin_principal, {"type": "command", "command": "fails", "args": {}})
    assert execution.state == "dead" and execution.exit_code == 3
    assert execution.reason_code == "exit_3" and "bad input" in execution.log_excerpt
    failed = ExecutionEvent.objects.get(execution=execution, kind="attempt_failed")
    assert failed.data["retryable"] is True and failed.data["exit_code"] == 3


def test_command_past_its_deadline_is_killed_with_its_children(
    worker: Proc, admin_principal: Principal
) -> None:
    ManagedCommand.objects.create(
        name="hangs", argv=["/bin/sh", "-c", "sleep 31.5 & exec sleep 31.6"]
    )
    execution = run_to_end(
        admin_principal, {"type": "command", "command": "hangs", "args": {}}, timeout_s=1
    )
    assert execution.state == "dead" and execution.reason_code == "timeout"
    assert (execution.finished_at - execution.started_at).total_seconds() < 5
    left = subprocess.run(["pgrep", "-f", "sleep 31.[56]"], capture_output=True, text=True)
    assert left.stdout.strip() == "", "the command's process group outlived the attempt"


def test_rate_limited_host_holds_attempts_without_consuming_them(
    worker: Proc, module_ledger: Ledger, admin_principal: Principal
) -> None:
    module_ledger.requests.clear()
    schedule = make_schedule(
        admin_principal, {"type": "http", "url": f"{module_ledger.url}/hook"}, retry=ONE_SHOT
    )
    executions = [make_execution(schedule) for _ in range(8)]
    for e in executions:
        publish(e.id, 1)
    pump = Pump()
    pump.until(lambda: all(final(e)() for e in executions), timeout=30, what="all eight")

    for e in executions:
        e.refresh_from_db()
        assert e.state == "succeeded" and e.attempt == 1
    times = sorted(r["at"] for r in module_ledger.requests)
    assert len(times) == 8
    # Bucket of 2 refilled at 2/s: no one-second window may see more than 2 + 2 calls
    # (one more allowed for delivery jitter), so eight calls need about (8 - 2) / 2 = 3 s.
    assert all(sum(1 for t in times if s <= t < s + 1.0) <= 5 for s in times), times
    assert times[-1] - times[0] >= 2.8
    held = ExecutionEvent.objects.filter(kind="held_rate_limit")
    assert held.exists()
    assert held.first().message.startswith(
        f"waiting: host 127.0.0.1:{module_ledger.port} at its rate limit"
    )
    assert (
        json.dumps(list(held.values_list("data", flat=True))).count('"attempt": 1') == held.count()
    )
