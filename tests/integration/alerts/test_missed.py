"""Missed alerts (the scheduler's own dead-man), with an in-process beat on the real
PostgreSQL: a cron schedule whose next_run_at is hours in the past is what a beat
finds after every beat was down. The firing that records the misfire decisions
writes one `missed` alert per schedule and outage, with the count, the span and
(when sent) the explainer's reason; none without a lateness policy, while snoozed,
or without an enabled channel."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

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
from tenants.models import Tenant
from tenants.roles import Principal
from tests.integration.alerts.test_alerts_processes import verified
from tests.support.beat_support import Beat, empty_queues, running_beat
from tests.support.ledger import Ledger
from tests.support.procs import beat_cmd, processes, wait_for, worker_cmd
from tests.support.worker_support import db_now, make_schedule, purge, worker_log_ready

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


@pytest.mark.parametrize("without", ["policy", "lateness", "snoozed", "channel", "paused"])
def test_no_missed_alert_without_policy_or_channel_while_snoozed_or_after_a_pause(
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
    if without == "paused":
        # Paused (not an outage) through the missed span, resumed now: the pause's misfires.
        services.schedule_pause(actor=admin_principal, schedule_id=schedule.id)
        services.schedule_resume(actor=admin_principal, schedule_id=schedule.id)
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


@pytest.mark.slow
def test_a_stopped_beat_comes_back_and_the_signed_missed_alert_arrives(
    tmp_path: Path,
    admin_principal: Principal,
    api: APIClient,
    tenant: Tenant,
    ledger: Ledger,
    settings: Any,
) -> None:
    """Real processes: a beat and a worker; the beat is killed, the schedule's
    occurrences pass (next_run_at moved two hours back rather than waiting), a beat
    starts again and finds them beyond a 5 s grace: run_once fires the latest (the
    worker runs it), records the rest skipped, and the missed alert reaches the
    signed webhook."""
    settings.TARGET_TEST_ALLOW = [ledger.allow_entry]  # the webhook channel's save-time check
    body = {"name": "hook", "kind": "webhook", "config": {"url": f"{ledger.url}/alerts"}}
    assert api.post("/v1/alert-channels", body, format="json").status_code == 201
    assert api.put("/v1/alert-policy", {"late_after_s": 3600}, format="json").status_code == 200
    purge(settings.CELERY_BROKER_URL)
    with Ledger() as target, processes(tmp_path) as start:
        beat_args = ("--lease-ttl", "5", "--cycle", "0.2", "--lookahead", "2")
        env = {"CONTROL_INTERVAL_S": "0.2", "TARGET_TEST_ALLOW": ledger.allow_entry}
        beat = start("beat1", beat_cmd("--name", "beat-m1", *beat_args), **env)
        worker = start(
            "w1",
            worker_cmd(queues="default.short", concurrency=1, name="w1"),
            TARGET_TEST_ALLOW=target.allow_entry,
        )
        wait_for(lambda: worker_log_ready(worker) or not worker.alive(), timeout=30, what="w1")
        assert worker.alive(), worker.output()
        schedule = make_schedule(
            admin_principal, {"type": "http", "url": f"{target.url}/job"}, name="minutely"
        )
        beat.kill()  # every beat down: nothing fires
        now = db_now()
        start_at = now.replace(second=0, microsecond=0) - timedelta(hours=2)
        Schedule.objects.filter(pk=schedule.pk).update(
            cron="* * * * *",
            jitter_s=0,
            misfire="run_once",
            misfire_grace_s=5,
            next_run_at=start_at,
            created_at=start_at - timedelta(minutes=1),
        )
        start("beat2", beat_cmd("--name", "beat-m2", *beat_args), **env)
        wait_for(
            lambda: any(
                json.loads(r["body"])["event"] == "schedule.missed" for r in ledger.requests
            ),
            timeout=60,
            what="the missed alert at the webhook",
        )
        caught_up = Execution.objects.get(schedule=schedule, trigger="catch_up")
        wait_for(
            lambda: Execution.objects.get(pk=caught_up.pk).state == "succeeded",
            timeout=60,
            what="the worker to run the late occurrence",
        )
    purge(settings.CELERY_BROKER_URL)
    [event] = [
        e for e in (verified(r, tenant) for r in ledger.requests) if e["event"] == "schedule.missed"
    ]
    skipped = Execution.objects.filter(schedule=schedule, reason_code="misfire").count()
    # Every occurrence before the caught-up one is a misfire skip. (After it, on a slow
    # machine, the next minute may come while the catch-up still runs: an overlap skip.)
    assert skipped >= 119 and Execution.objects.filter(
        schedule=schedule, state="skipped", scheduled_for__lt=caught_up.scheduled_for
    ).count() == (skipped)
    assert (event["missed"], event["skipped"], event["caught_up"]) == (skipped + 1, skipped, 1)
    assert event["execution_id"] == str(caught_up.id)
    assert event["title"] == f"minutely: missed {skipped + 1} occurrences"
    assert "while the scheduler was not firing (misfire policy run_once)" in event["text"]
    assert "skipped by the misfire policy (run_once)" in event["why"], event["why"]
    # The sender's thread records the result after the receiver answered.
    wait_for(lambda: Alert.objects.get(schedule=schedule).state == "sent", timeout=30, what="sent")
    [alert] = Alert.objects.filter(schedule=schedule)
    assert alert.kind == "missed"
