"""Missed alerts (the scheduler's own dead-man), with an in-process beat on the real
PostgreSQL: a cron schedule whose next_run_at is hours in the past is what a beat
finds after every beat was down. The firing that records the misfire decisions
writes one `missed` alert per schedule and outage, with the count, the span and
(when sent) the explainer's reason; none without a lateness policy, while snoozed,
or without an enabled channel."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest

from dispatch import services
from dispatch.alerting import outbox
from dispatch.models import (
    Alert,
    AlertChannel,
    AlertPolicy,
    Execution,
    ExecutionEvent,
    Schedule,
)
from tenants.roles import Principal
from tests.support.beat_support import Beat, empty_queues, running_beat
from tests.support.worker_support import db_now

pytestmark = pytest.mark.django_db(transaction=True)
TARGET = {"type": "http", "url": "https://billing.internal/hook"}


@pytest.fixture
def beat() -> Iterator[Beat]:
    with empty_queues(), running_beat("missed-beat", cycle_s=0.2) as b:
        yield b


@pytest.fixture
def channel(admin_principal: Principal) -> AlertChannel:
    return AlertChannel.objects.create(
        tenant=admin_principal.tenant, name="mail", kind="email", config={"to": ["o@b.test"]}
    )


def outage(principal: Principal, *, hours: int = 3, **data: Any) -> tuple[Schedule, datetime]:
    """A quarter-hourly schedule whose beat last fired `hours` ago: (schedule, first missed)."""
    body = {"name": "nightly", "target": TARGET, "cron": "*/15 * * * *", "misfire_grace_s": 60}
    schedule = services.schedule_create(actor=principal, data=body | data)
    now = db_now()
    start = now.replace(minute=(now.minute // 15) * 15, second=0, microsecond=0) - timedelta(
        hours=hours
    )
    # Made before the outage, as a real one would be (the explainer checks).
    Schedule.objects.filter(pk=schedule.pk).update(
        next_run_at=start, created_at=start - timedelta(minutes=1)
    )
    return schedule, start


def late_rows(schedule: Schedule) -> list[Execution]:
    cutoff = db_now() - timedelta(seconds=schedule.misfire_grace_s)
    return list(
        Execution.objects.filter(schedule=schedule, scheduled_for__lt=cutoff).order_by(
            "scheduled_for"
        )
    )


def test_an_outage_owes_one_missed_alert_with_the_count_and_the_reason(
    beat: Beat, admin_principal: Principal, channel: AlertChannel
) -> None:
    AlertPolicy.objects.create(tenant=admin_principal.tenant, late_after_s=300)
    schedule, start = outage(admin_principal, misfire="skip")
    beat.cycle()
    late = late_rows(schedule)
    assert len(late) >= 12 and all(r.reason_code == "misfire" for r in late)
    [alert] = Alert.objects.filter(schedule=schedule)
    assert alert.kind == "missed" and alert.state == "pending"
    assert (alert.execution_id, alert.scheduled_for) == (late[-1].id, late[-1].scheduled_for)
    payload = alert.payload
    assert (payload["missed"], payload["skipped"], payload["caught_up"]) == (
        len(late),
        len(late),
        0,
    )
    assert datetime.fromisoformat(payload["first"]) == start == late[0].scheduled_for
    assert payload["misfire"] == "skip"
    text = outbox._row_message(alert).text
    assert text.startswith(
        f"nightly missed {len(late)} occurrences from {payload['first']} to {payload['last']} "
        "while the scheduler was not firing (misfire policy skip): "
        f"{len(late)} recorded skipped, 0 run late. Why: skipped by the misfire policy (skip)"
    ), text
    # The next firings find nothing missed: still one alert for the outage.
    beat.cycle()
    assert Alert.objects.filter(schedule=schedule).count() == 1


def test_run_once_counts_the_late_run_it_fired(
    beat: Beat, admin_principal: Principal, channel: AlertChannel
) -> None:
    schedule, _ = outage(admin_principal, misfire="run_once")
    AlertPolicy.objects.create(tenant=admin_principal.tenant, schedule=schedule, late_after_s=60)
    beat.cycle()
    late = late_rows(schedule)
    assert late[-1].trigger == "catch_up" and late[-1].state != "skipped"
    [alert] = Alert.objects.filter(schedule=schedule, kind="missed")
    assert alert.execution_id == late[-1].id
    assert (alert.payload["missed"], alert.payload["skipped"], alert.payload["caught_up"]) == (
        len(late),
        len(late) - 1,
        1,
    )
    assert f"{len(late) - 1} recorded skipped, 1 run late" in outbox._row_message(alert).text


@pytest.mark.parametrize("without", ["policy", "lateness", "snoozed", "channel"])
def test_no_missed_alert_without_policy_or_channel_or_while_snoozed(
    beat: Beat, admin_principal: Principal, channel: AlertChannel, without: str
) -> None:
    tenant = admin_principal.tenant
    if without != "policy":
        # A policy that watches failures only does not watch the scheduler either.
        AlertPolicy.objects.create(tenant=tenant, late_after_s=0 if without == "lateness" else 300)
    schedule, _ = outage(admin_principal, misfire="skip")
    if without == "snoozed":
        Schedule.objects.filter(pk=schedule.pk).update(
            alert_snoozed_until=db_now() + timedelta(hours=1)
        )
    if without == "channel":
        AlertChannel.objects.filter(pk=channel.pk).update(enabled=False)
    beat.cycle()
    assert len(late_rows(schedule)) >= 12  # the misfire decisions are recorded all the same
    assert not Alert.objects.filter(schedule=schedule).exists()


def test_a_long_outage_counts_the_occurrences_without_records(
    beat: Beat, admin_principal: Principal, channel: AlertChannel
) -> None:
    AlertPolicy.objects.create(tenant=admin_principal.tenant, late_after_s=60)
    # 15 days of quarter-hours: more than the firing lists, the rest one summary event.
    schedule, start = outage(admin_principal, hours=24 * 15, misfire="skip")
    beat.cycle()
    recorded = late_rows(schedule)
    [alert] = Alert.objects.filter(schedule=schedule)
    assert alert.payload["missed"] > len(recorded)
    # The older ones have no rows: the firing's summary event says how many.
    event = ExecutionEvent.objects.get(schedule=schedule, kind="misfire_skipped")
    unlisted = int(event.message.split()[0])
    assert alert.payload["missed"] == alert.payload["skipped"] == len(recorded) + unlisted
    assert datetime.fromisoformat(alert.payload["first"]) == start < recorded[0].scheduled_for
    assert "was among those missed while the scheduler was not firing" in (
        outbox._row_message(alert).text
    )
