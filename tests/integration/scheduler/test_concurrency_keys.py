"""Keyed concurrency at admission, in-process against the real PostgreSQL and broker:
queue holds (and admits once the holder ends), skip records the key and its holder,
replace cancels the holder with a token bump, the limit counts, keys are per tenant,
a batch without a key takes no key lock, and the explainer says why."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from dispatch import explain, services
from dispatch.models import Execution, ExecutionEvent, Schedule
from dispatch.scheduler.loop import Beat
from tenants.models import Tenant
from tenants.roles import Principal
from tests.conftest import make_principal
from tests.support.rows import execution_row
from tests.support.worker_support import db_now

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("empty_broker")]


@pytest.fixture(scope="module")
def beat_config() -> dict[str, Any]:
    return {"name": "test-beat", "cycle_s": 0.2}


def job(
    principal: Principal,
    name: str,
    customer: int | None,
    on_conflict: str = "queue",
    limit: int = 1,
) -> Schedule:
    """A one-off job due now; `customer` None: no key."""
    data: dict[str, Any] = {
        "name": name,
        "target": {
            "type": "http",
            "url": "https://billing.internal/invoice",
            "body": {"customer_id": customer},
        },
    }
    if customer is not None:
        data["concurrency_key"] = {
            "key": "customer-{target.body.customer_id}",
            "limit": limit,
            "on_conflict": on_conflict,
        }
    return services.job_create(actor=principal, data=data)[0]


def run_of(schedule: Schedule) -> Execution:
    return Execution.objects.get(schedule=schedule)


def holder(principal: Principal, name: str, customer: int, **fields: Any) -> Execution:
    """A run of another schedule of the tenant, holding customer-<n> (running)."""
    s = services.schedule_create(
        actor=principal,
        data={
            "name": name,
            "cron": "0 3 * * *",
            "target": {"type": "http", "url": "https://billing.internal/other"},
        },
    )
    values: dict[str, Any] = {
        "state": "running",
        "trigger": "manual",  # an occurrence the explainer finds at its instant
        "fencing_token": 4,
        "concurrency_key": f"customer-{customer}",
        "started_at": db_now(),
    }
    if fields.get("state") == "retry_scheduled":  # waiting for its next attempt
        values["next_attempt_at"] = db_now() + timedelta(hours=1)
    return execution_row(s, db_now() - timedelta(minutes=5), **(values | fields))


def test_queue_holds_the_second_holder_until_the_first_ends(
    beat: Beat, admin_principal: Principal, other_tenant: Tenant
) -> None:
    a, b = job(admin_principal, "a", 42), job(admin_principal, "b", 42)
    other_key = job(admin_principal, "c", 7)
    elsewhere = job(make_principal(other_tenant), "d", 42)
    beat.cycle()
    runs = {s.name: run_of(s) for s in (a, b, other_key, elsewhere)}
    first, second = sorted((runs["a"], runs["b"]), key=lambda e: e.state)
    assert (first.state, second.state) == ("queued", "scheduled")
    assert first.concurrency_key == "customer-42" and second.concurrency_key is None
    assert second.reason_code == "held_key"
    assert second.reason == (
        f"held: key customer-42 already admitted execution {first.pk} (limit 1, on_conflict queue)"
    )
    # Another key, and another tenant's same key, are not held by it.
    assert runs["c"].state == "queued" and runs["c"].concurrency_key == "customer-7"
    assert runs["d"].state == "queued" and runs["d"].concurrency_key == "customer-42"
    (event,) = ExecutionEvent.objects.filter(execution=second, kind="held_key")
    assert event.message == second.reason
    beat.cycle()  # still held: the holder is queued, now named so
    second.refresh_from_db()
    assert second.state == "scheduled"
    answer = explain.explain(schedule=second.schedule, at=second.scheduled_for)
    assert answer.code == "held", answer.sentence
    assert f"key customer-42 already admitted execution {first.pk}" in answer.sentence
    Execution.objects.filter(pk=first.pk).update(state="succeeded", finished_at=db_now())
    beat.cycle()
    second.refresh_from_db()
    assert second.state == "queued" and second.concurrency_key == "customer-42"
    assert second.reason_code == ""  # the hold's reason is cleared on admission


def test_skip_records_the_key_and_the_running_holder(
    beat: Beat, admin_principal: Principal
) -> None:
    running = holder(admin_principal, "nightly", 42)
    s = job(admin_principal, "s", 42, on_conflict="skip")
    beat.cycle()
    e = run_of(s)
    assert e.state == "skipped" and e.reason_code == "key_skipped"
    assert e.reason == (
        f"skipped: key customer-42 already running execution {running.pk} "
        "(limit 1, on_conflict skip)"
    )
    (event,) = ExecutionEvent.objects.filter(execution=e, kind="key_skipped")
    assert event.data["related_execution_id"] == str(running.pk)
    answer = explain.explain(schedule=s, at=e.scheduled_for)
    assert answer.code == "skipped_key", answer.sentence
    assert f"key customer-42 already running execution {running.pk}" in answer.sentence
    assert str(running.pk) in {ev.id for ev in answer.evidence}
    running.refresh_from_db()
    assert running.state == "running" and running.fencing_token == 4


def test_replace_cancels_the_holder_with_a_token_bump(
    beat: Beat, admin_principal: Principal
) -> None:
    running = holder(admin_principal, "nightly", 42)
    retrying = holder(admin_principal, "weekly", 43, state="retry_scheduled")
    r = job(admin_principal, "r", 42, on_conflict="replace")
    beat.cycle()
    new = run_of(r)
    assert new.state == "queued" and new.concurrency_key == "customer-42"
    running.refresh_from_db()
    assert running.state == "cancelled" and running.fencing_token == 5
    assert running.reason_code == "key_replaced"
    assert running.reason == (
        f"cancelled: replaced by execution {new.pk} (key customer-42, on_conflict replace)"
    )
    (event,) = ExecutionEvent.objects.filter(execution=running, kind="cancelled")
    assert event.message.startswith("replaced: key customer-42 taken over by execution")
    assert event.data["related_execution_id"] == str(new.pk)
    answer = explain.explain(schedule=running.schedule, at=running.scheduled_for)
    assert answer.code == "cancelled" and f"replaced by execution {new.pk}" in answer.sentence
    retrying.refresh_from_db()  # another key: untouched
    assert retrying.state == "retry_scheduled" and retrying.fencing_token == 4


def test_a_retrying_run_holds_its_key_and_the_limit_counts(
    beat: Beat, admin_principal: Principal
) -> None:
    retrying = holder(admin_principal, "nightly", 42, state="retry_scheduled")
    jobs = [job(admin_principal, f"j{i}", 42, limit=3) for i in range(4)]
    beat.cycle()
    states = sorted(run_of(s).state for s in jobs)
    assert states == ["queued", "queued", "scheduled", "scheduled"]
    held = [run_of(s) for s in jobs if run_of(s).state == "scheduled"]
    assert {e.reason_code for e in held} == {"held_key"}
    assert all(f"already retrying execution {retrying.pk}" in e.reason for e in held)


def test_a_batch_without_a_key_takes_no_key_lock(beat: Beat, admin_principal: Principal) -> None:
    """Zero cost on the hot path: no advisory lock, no holder query, for keyless rows."""
    jobs = [job(admin_principal, f"n{i}", None) for i in range(3)]
    with CaptureQueriesContext(connection) as ctx:
        beat.cycle()
    assert {run_of(s).state for s in jobs} == {"queued"}
    text = "\n".join(q["sql"] for q in ctx.captured_queries)
    assert "UPDATE dispatch_execution" in text  # the capture saw the admission
    assert "pg_advisory_xact_lock(k)" not in text and "concurrency_key = k.ckey" not in text
    with CaptureQueriesContext(connection) as ctx:
        keyed = job(admin_principal, "k", 42)
        beat.cycle()
    assert run_of(keyed).state == "queued"
    text = "\n".join(q["sql"] for q in ctx.captured_queries)
    assert "pg_advisory_xact_lock(k)" in text and "concurrency_key = k.ckey" in text


def test_a_manual_trigger_respects_the_key(beat: Beat, admin_principal: Principal) -> None:
    running = holder(admin_principal, "nightly", 42)
    s = services.schedule_create(
        actor=admin_principal,
        data={
            "name": "invoice-42",
            "cron": "0 3 * * *",
            "target": {
                "type": "http",
                "url": "https://billing.internal/invoice",
                "body": {"customer_id": 42},
            },
            "concurrency_key": {"key": "customer-{target.body.customer_id}", "on_conflict": "skip"},
        },
    )
    manual = services.schedule_trigger(actor=admin_principal, schedule_id=s.pk)
    assert manual.state == "scheduled"  # accepted; the beat decides the key
    beat.cycle()
    manual.refresh_from_db()
    assert manual.state == "skipped" and manual.reason_code == "key_skipped"
    assert f"already running execution {running.pk}" in manual.reason


def test_a_rerun_is_decided_again_and_takes_its_schedules_key_now(
    beat: Beat, admin_principal: Principal
) -> None:
    """A re-run's row keeps the key of its earlier chain until admitted: it is not its
    own holder, and it is admitted with the key its schedule has now (none here)."""
    s = job(admin_principal, "once", None)
    done = execution_row(
        s,
        db_now() - timedelta(minutes=10),
        state="succeeded",
        attempt=1,
        finished_at=db_now(),
        concurrency_key="customer-42",
    )
    Execution.objects.filter(schedule=s).exclude(pk=done.pk).delete()
    Schedule.objects.filter(pk=s.pk).update(next_run_at=None)
    services.execution_rerun(actor=admin_principal, execution_id=done.pk)
    beat.cycle()
    done.refresh_from_db()
    assert done.state == "queued" and done.concurrency_key is None
