"""What the publish path records: a retry's publish is not a "republish", and
fire-lag figures count only occurrences fired at their due time.

In-process beat against the real PostgreSQL and broker."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client

from dispatch import selectors, services
from dispatch.models import Execution, Schedule
from dispatch.scheduler.loop import Beat
from tenants.roles import Principal
from tests.support.rows import execution_row
from tests.support.worker_support import db_now

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("empty_broker")]
TARGET = {"type": "http", "url": "https://billing.internal/hook"}


@pytest.fixture(scope="module")
def beat_config() -> dict[str, Any]:
    # Sweep on every cycle: the lost-message check is what is tested.
    return {"name": "marks-beat", "sweep_interval_s": 0, "queued_republish_s": 30}


def schedule(principal: Principal, name: str) -> Schedule:
    return services.schedule_create(
        actor=principal, data={"name": name, "cron": "0 0 1 1 *", "target": TARGET}
    )


def row(s: Schedule, *, trigger: str = "cron", late_s: float = 0.5, **fields: Any) -> Execution:
    return execution_row(s, db_now() - timedelta(seconds=late_s), trigger=trigger, **fields)


def test_a_retry_publish_is_not_labelled_a_republish(
    beat: Beat, admin_principal: Principal
) -> None:
    s = schedule(admin_principal, "retrying")
    first_publish = db_now() - timedelta(minutes=5)
    ex = row(
        s,
        late_s=300,
        state="retry_scheduled",
        attempt=2,
        enqueued_at=first_publish,
        next_attempt_at=db_now() - timedelta(seconds=0.2),
    )
    beat.cycle()
    ex.refresh_from_db()
    assert ex.state == "queued" and ex.attempt == 2
    assert ex.enqueued_at == first_publish  # the first publish stays the fire-lag figure
    assert ex.republished_at is None, "a retry's publish was labelled 'the broker lost it'"
    assert ex.published_at is not None and ex.published_at > first_publish
    # The lost-message timeout counts from the retry's publish, not from the
    # first attempt's: five minutes after enqueued_at is not "lost".
    beat.cycle()
    ex.refresh_from_db()
    assert ex.republished_at is None
    assert "published again (the broker lost it)" not in _timeline_text(ex)


def test_a_queued_message_nobody_claimed_is_republished_and_labelled(
    beat: Beat, admin_principal: Principal
) -> None:
    s = schedule(admin_principal, "lost")
    long_ago = db_now() - timedelta(minutes=2)
    ex = row(s, state="queued", queue="default.short", enqueued_at=long_ago, published_at=long_ago)
    beat.cycle()
    ex.refresh_from_db()
    assert ex.republished_at is not None and ex.published_at == ex.republished_at
    assert ex.enqueued_at == long_ago
    assert "published again (the broker lost it)" in _timeline_text(ex)


def _timeline_text(ex: Execution) -> str:
    """The execution timeline the console and the API show, as its entries read."""
    from dispatch.selectors import execution_timeline

    return " ".join(item.message for item in execution_timeline(execution=ex, events=[]))


def test_fire_lag_counts_only_occurrences_fired_at_their_due_time(
    admin_principal: Principal,
) -> None:
    """A 4-minute pause's catch-up runs (and manual runs) are late by design:
    they must not turn p99 of /ops and /metrics into minutes."""
    s = schedule(admin_principal, "lagged")
    now = db_now()

    for i in range(5):
        due = now - timedelta(seconds=10 + i)
        execution_row(
            s, due, trigger="cron", state="succeeded", enqueued_at=due + timedelta(milliseconds=200)
        )
    for i, trigger in enumerate(["catch_up", "catch_up", "manual"]):
        execution_row(
            s,
            now - timedelta(seconds=240 + i),
            trigger=trigger,
            state="succeeded",
            enqueued_at=now - timedelta(seconds=1),
        )
    lag = selectors.ops_fire_lag(since=now - timedelta(hours=1))
    assert lag["count"] == 5 and lag["p99"] is not None and lag["p99"] < 1.0
    assert lag["max"] is not None and lag["max"] < 1.0
    assert lag["excluded"] == 3
    body = Client().get("/metrics").content.decode()
    assert "scheduler_fire_lag_seconds_count 5.0" in body
    assert 'scheduler_fire_lag_seconds_bucket{le="1.0"} 5.0' in body


# --- one-off jobs and their misfire grace ------------------------------------------------------


def late_job(principal: Principal, name: str, *, late_s: float, **data: Any) -> Schedule:
    """A one-off job that fell due `late_s` ago and was not fired (the beat was down)."""
    job, _ = services.job_create(
        actor=principal,
        data={"name": name, "target": TARGET, "run_at": db_now() + timedelta(hours=1)} | data,
    )
    past = db_now() - timedelta(seconds=late_s)
    Schedule.objects.filter(pk=job.pk).update(
        run_at=past, next_run_at=past, created_at=past - timedelta(hours=1)
    )
    job.refresh_from_db()
    return job


def test_a_one_off_found_later_than_its_grace_is_skipped_by_its_misfire_policy(
    beat: Beat, admin_principal: Principal
) -> None:
    skipped = late_job(admin_principal, "ten-min-late", late_s=600, misfire_grace_s=60)
    report = services.schedule_create(
        actor=admin_principal,
        data={
            "name": "after-it",
            "cron": "0 0 1 1 *",
            "target": TARGET,
            "depends_on": [str(skipped.id)],
        },
    )
    late_run = late_job(
        admin_principal, "ten-min-late-run-once", late_s=600, misfire_grace_s=60, misfire="run_once"
    )
    on_time = late_job(admin_principal, "within-grace", late_s=30, misfire_grace_s=60)
    created_past, _ = services.job_create(
        actor=admin_principal,
        data={"name": "asked-late", "target": TARGET, "run_at": db_now() - timedelta(minutes=10)},
    )
    beat.cycle()

    ex = Execution.objects.get(schedule=skipped)
    assert ex.state == "skipped" and ex.reason_code == "misfire", (ex.state, ex.reason)
    assert re.search(r"found 60\ds late, beyond the 60s grace period", ex.reason), ex.reason
    dependent = Execution.objects.get(schedule=report)
    assert dependent.state == "skipped" and dependent.reason_code == "upstream"
    assert "ten-min-late" in dependent.reason

    ran = Execution.objects.get(schedule=late_run)
    assert ran.state == "queued" and ran.trigger == "catch_up"
    punctual = Execution.objects.get(schedule=on_time)
    assert punctual.state == "queued" and punctual.trigger == "api"
    # A job created with run_at already past fell due when it was created: not late.
    asked = Execution.objects.get(schedule=created_past)
    assert asked.state == "queued" and asked.trigger == "api"
    for job in (skipped, late_run, on_time, created_past):
        job.refresh_from_db()
        assert job.next_run_at is None
