"""Real workers calling a loopback HTTP receiver: success, retries with backoff,
Retry-After, no retry on 4xx, duplicates and orphans acknowledged."""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest
from django.conf import settings

from dispatch.models import Execution, ExecutionEvent
from dispatch.worker import ratelimit
from tenants.roles import Principal
from tests.support.ledger import Ledger, ok
from tests.support.procs import Proc, wait_for
from tests.support.worker_support import (
    Pump,
    final,
    kinds,
    make_execution,
    make_schedule,
    publish,
    state_of,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def worker_settings(module_ledger: Ledger) -> dict[str, Any]:
    """The module's worker consumes the alert queue too."""
    return {
        "queues": "default.short,low.short",
        "concurrency": 3,
        "TARGET_TEST_ALLOW": module_ledger.allow_entry,
    }


@pytest.fixture
def ledger(module_ledger: Ledger) -> Ledger:
    """The module's ledger, emptied for each test and answering 200 "ok" again."""
    module_ledger.requests.clear()
    module_ledger.effects.clear()
    module_ledger.deliveries.clear()
    module_ledger.respond = ok
    return module_ledger


def http(ledger: Ledger, path: str = "/hook", **extra: Any) -> dict[str, Any]:
    return {
        "type": "http",
        "url": f"{ledger.url}{path}",
        "method": "POST",
        "body": {"x": 1},
    } | extra


def test_happy_path_calls_target_once_with_ids_and_records_success(
    worker: Proc, ledger: Ledger, admin_principal: Principal
) -> None:
    schedule = make_schedule(admin_principal, http(ledger))
    execution = make_execution(schedule)
    publish(execution.id, 1)
    wait_for(final(execution), timeout=20, what="the execution to finish")

    execution.refresh_from_db()
    assert execution.state == "succeeded", worker.output()
    assert execution.status_code == 200
    assert execution.log_excerpt == "ok"
    assert execution.attempt == 1 and execution.fencing_token == 1
    assert execution.lease_expires_at is None and execution.finished_at is not None
    assert kinds(execution) == ["claimed", "attempt_started", "attempt_succeeded"]
    [req] = ledger.requests
    headers = {k.lower(): v for k, v in req["headers"].items()}
    assert headers["x-execution-id"] == str(execution.id)
    assert headers["x-attempt"] == "1"
    assert headers["x-fencing-token"] == "1"
    assert headers["x-scheduled-for"].endswith("Z")
    assert headers["x-signature"].startswith("sha256=")
    assert req["body"] == '{"x":1}'
    claimed = ExecutionEvent.objects.get(execution=execution, kind="claimed")
    assert claimed.message.startswith("claimed by worker ") and claimed.message.endswith(
        "with token 1"
    )


def attempts_seen(ledger: Ledger, execution: Execution) -> list[tuple[int, int, float]]:
    """(X-Attempt, X-Fencing-Token, received at) of every call the receiver saw for `execution`."""
    out = []
    for req in ledger.requests:
        h = {k.lower(): v for k, v in req["headers"].items()}
        if h.get("x-execution-id") == str(execution.id) and "x-attempt" in h:
            out.append((int(h["x-attempt"]), int(h["x-fencing-token"]), req["at"]))
    return out


def test_server_errors_retry_with_backoff_then_dead_after_max_attempts(
    worker: Proc, ledger: Ledger, admin_principal: Principal
) -> None:
    ledger.respond = lambda req: (500, {}, b"boom")
    retry = {"max_attempts": 3, "backoff": "exponential", "initial_s": 1, "max_s": 2}
    execution = make_execution(make_schedule(admin_principal, http(ledger), retry=retry))
    publish(execution.id, 1)
    Pump().until(final(execution), timeout=30, what="dead after three attempts")

    execution.refresh_from_db()
    assert execution.state == "dead"
    assert execution.attempt == 3 and execution.status_code == 500
    assert "attempts exhausted (3 of 3)" in execution.reason
    calls = attempts_seen(ledger, execution)
    assert [a for a, _, _ in calls] == [1, 2, 3]
    tokens = [t for _, t, _ in calls]
    assert tokens == sorted(tokens) and len(set(tokens)) == 3
    # Exponential with jitter of at most 20 % downwards: ≥ 0.8 s, then ≥ 1.6 s.
    gaps = [b - a for (_, _, a), (_, _, b) in itertools.pairwise(calls)]
    assert gaps[0] >= 0.8 and gaps[1] >= 1.6, gaps
    assert kinds(execution) == [
        "claimed",
        "attempt_started",
        "attempt_failed",
        "retry_scheduled",
        "claimed",
        "attempt_started",
        "attempt_failed",
        "retry_scheduled",
        "claimed",
        "attempt_started",
        "attempt_failed",
        "dead",
    ]


def test_429_retry_after_is_honoured(
    worker: Proc, ledger: Ledger, admin_principal: Principal
) -> None:
    ledger.respond = lambda req: (
        (429, {"Retry-After": "2"}, b"slow down") if len(ledger.requests) == 1 else (200, {}, b"ok")
    )
    retry = {"max_attempts": 3, "backoff": "fixed", "initial_s": 0, "max_s": 0}
    execution = make_execution(make_schedule(admin_principal, http(ledger), retry=retry))
    publish(execution.id, 1)
    Pump().until(final(execution), timeout=20, what="success on the second attempt")

    execution.refresh_from_db()
    assert execution.state == "succeeded" and execution.attempt == 2
    (a1, _, t1), (a2, _, t2) = attempts_seen(ledger, execution)
    assert (a1, a2) == (1, 2)
    assert t2 - t1 >= 2.0, "came back before the target's Retry-After"
    event = ExecutionEvent.objects.get(execution=execution, kind="retry_scheduled")
    assert "Retry-After 2 s" in event.message and event.data["retry_after_s"] == 2.0


def test_404_is_not_retried_and_the_tenant_is_notified(
    worker: Proc, ledger: Ledger, admin_principal: Principal
) -> None:
    ledger.respond = lambda req: (
        (200, {}, b"noted") if req["path"] == "/alerts" else (404, {}, b"no such hook")
    )
    tenant = admin_principal.tenant
    tenant.alert_webhook_url = f"{ledger.url}/alerts"
    tenant.save(update_fields=["alert_webhook_url"])
    execution = make_execution(make_schedule(admin_principal, http(ledger)))
    publish(execution.id, 1)
    wait_for(
        lambda: ExecutionEvent.objects.filter(execution=execution, kind="alert_sent").exists(),
        timeout=20,
        what="the dead notice",
    )

    execution.refresh_from_db()
    assert execution.state == "dead" and execution.attempt == 1
    assert execution.status_code == 404 and execution.log_excerpt == "no such hook"
    assert "not retryable" in execution.reason
    assert len(attempts_seen(ledger, execution)) == 1
    [alert] = [r for r in ledger.requests if r["path"] == "/alerts"]
    assert f'"execution_id":"{execution.id}"' in alert["body"]
    assert alert["headers"]["X-Signature"].startswith("sha256=")


def test_duplicate_delivery_while_running_claims_nothing(
    worker: Proc, ledger: Ledger, admin_principal: Principal
) -> None:
    def slow(req: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        time.sleep(1.5)
        return 200, {}, b"ok"

    ledger.respond = slow
    before = ratelimit.delivery_counts().get("duplicate", 0)
    execution = make_execution(make_schedule(admin_principal, http(ledger)))
    publish(execution.id, 1)
    wait_for(lambda: ledger.requests, timeout=10, what="the first call")
    publish(execution.id, 1)  # the broker redelivers while attempt 1 runs
    wait_for(lambda: "delivery_ignored" in kinds(execution), timeout=10, what="the duplicate")
    wait_for(final(execution), timeout=10)
    publish(execution.id, 1)  # and once more after it finished
    wait_for(lambda: kinds(execution).count("delivery_ignored") == 2, timeout=10)

    execution.refresh_from_db()
    assert (
        execution.state == "succeeded" and execution.attempt == 1 and execution.fencing_token == 1
    )
    assert len(ledger.requests) == 1
    assert kinds(execution).count("claimed") == 1
    assert ratelimit.delivery_counts()["duplicate"] == before + 2
    ignored = ExecutionEvent.objects.filter(execution=execution, kind="delivery_ignored").first()
    assert ignored is not None and "already running" in ignored.message


def test_orphan_and_malformed_messages_are_acked_counted_and_survived(
    worker: Proc, ledger: Ledger, admin_principal: Principal
) -> None:
    import uuid

    from kombu import Connection

    from config.celery_app import app

    before = ratelimit.delivery_counts()
    publish(uuid.uuid4(), 1)  # orphan: no such execution
    for args in (
        ["not-a-uuid", 1],
        [],
        [str(uuid.uuid4())],
        [str(uuid.uuid4()), "1"],
        [str(uuid.uuid4()), 0],
        [{"id": 1}, 1],
    ):
        app.send_task("dispatch.run_execution", args=args, queue="default.short")
    app.send_task("dispatch.no_such_task", args=[1], queue="default.short")
    with Connection(settings.CELERY_BROKER_URL) as conn:
        producer = conn.Producer()
        producer.publish(
            b"{not json",
            routing_key="default.short",
            content_type="application/json",
            content_encoding="utf-8",
            headers={"task": "dispatch.run_execution", "id": "x"},
        )
        producer.publish(
            b"\x80\x04K\x01.",
            routing_key="default.short",
            content_type="application/x-python-serialize",
            content_encoding="binary",
            headers={"task": "dispatch.run_execution", "id": "y"},
        )
        producer.publish("hello", routing_key="default.short")

    # The worker is still there and still works.
    execution = make_execution(make_schedule(admin_principal, http(ledger)))
    publish(execution.id, 1)
    wait_for(final(execution), timeout=20)
    assert state_of(execution) == "succeeded" and worker.alive()

    after = ratelimit.delivery_counts()
    assert after.get("orphan", 0) == before.get("orphan", 0) + 1
    assert after.get("malformed", 0) == before.get("malformed", 0) + 6
    with Connection(settings.CELERY_BROKER_URL) as conn:
        client = conn.default_channel.client
        wait_for(
            lambda: client.llen("default.short") == 0 and client.hlen("unacked") == 0,
            timeout=10,
            what="every message acknowledged",
        )
    assert Execution.objects.count() == 1


def test_message_slightly_early_waits_far_early_is_dropped(
    worker: Proc, ledger: Ledger, admin_principal: Principal
) -> None:
    schedule = make_schedule(admin_principal, http(ledger))
    soon = make_execution(schedule, due_in_s=1.0)
    later = make_execution(schedule, due_in_s=60)
    publish(later.id, 1)
    publish(soon.id, 1)
    wait_for(final(soon), timeout=10)
    wait_for(lambda: "delivery_ignored" in kinds(later), timeout=10)

    soon.refresh_from_db()
    assert soon.state == "succeeded" and soon.started_at >= soon.due_at
    assert state_of(later) == "scheduled" and kinds(later) == ["delivery_ignored"]
    assert len(ledger.requests) == 1


def test_cancelled_while_running_stops_the_call_and_records_nothing_else(
    worker: Proc, ledger: Ledger, admin_principal: Principal
) -> None:
    def slow(req: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        time.sleep(6)
        return 200, {}, b"ok"

    ledger.respond = slow
    execution = make_execution(make_schedule(admin_principal, http(ledger), timeout_s=20))
    publish(execution.id, 1)
    wait_for(lambda: ledger.requests, timeout=10, what="the call")
    # What the beat's overlap `replace` does: bump the token and cancel.
    Execution.objects.filter(pk=execution.pk).update(
        state="cancelled", fencing_token=execution.fencing_token + 2, reason_code="replaced"
    )
    started = time.monotonic()
    wait_for(lambda: "cancelled_stop" in kinds(execution), timeout=10, what="the worker to stop")
    assert time.monotonic() - started < 3, "the worker should notice at its next heartbeat"

    execution.refresh_from_db()
    assert execution.state == "cancelled" and execution.reason_code == "replaced"
    assert execution.status_code is None and execution.finished_at is None
    assert kinds(execution) == ["claimed", "attempt_started", "cancelled_stop"]
