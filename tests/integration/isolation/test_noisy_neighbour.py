"""A noisy neighbour cannot stall the shared machinery: with two real beats and a real
worker, tenant A ("outsider") does at once everything issue 29 found to starve
others — six calendars saved before the expansion bounds (an .ics rule every second,
listed by its every-minute schedules), failure alerts to a peer that dribbles its
answer, backfills parked on a paused schedule up to its bound, and bulk operations
queued up to its bound — while tenant B ("billing") goes about its day.

B's every-minute schedule fires every occurrence on time, and B's failure alert,
backfill and bulk operation finish within seconds, with A's work still queued or
dribbling beside them (so the noise was there the whole time)."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from dispatch import services
from dispatch.alerting import decision
from dispatch.models import (
    Alert,
    AlertChannel,
    Backfill,
    Calendar,
    Execution,
    Operation,
    Schedule,
    ScheduleCalendar,
)
from dispatch.states import ControlState
from tenants.models import Tenant
from tenants.roles import Principal
from tests.conftest import make_principal
from tests.support.console_support import bulk_schedules
from tests.support.dribbler import Dribbler
from tests.support.ledger import Ledger
from tests.support.procs import Proc, beat_cmd, processes, wait_for, worker_cmd
from tests.support.rows import execution_row
from tests.support.worker_support import ONE_SHOT, db_now, make_schedule, purge, worker_log_ready

pytestmark = [pytest.mark.system, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# One alert send may take this long (A's peer would take 100 s to answer).
DEADLINE_S = 10
# "Within seconds": far less than A's noise would hold them before the fixes (minutes).
PROMPT_S = 30
# Late by more than this and an occurrence was not fired on time.
ON_TIME_S = 3.0


def hostile_ics(day: int) -> str:
    """A rule every second with no end: expanded whole over the planning years it is
    hundreds of millions of datetimes (a different DTSTART each: no shared cache)."""
    return (
        "BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\n"
        f"DTSTART;VALUE=DATE:202501{day:02d}\r\nRRULE:FREQ=SECONDLY\r\nSUMMARY:x\r\n"
        "END:VEVENT\r\nEND:VCALENDAR\r\n"
    )


def failure_alert(principal: Principal, target: dict[str, Any]) -> Alert:
    """The failure alert a dead execution of a new schedule of the tenant owes."""
    schedule = make_schedule(principal, target, name=f"failing-{uuid.uuid4().hex[:6]}")
    execution = execution_row(schedule, db_now() - dt.timedelta(minutes=1), state="dead")
    assert decision.decide(execution_ids=[str(execution.id)]) == 1
    return Alert.objects.get(execution_id=execution.id)


@pytest.fixture
def receiver() -> Iterator[Ledger]:
    """B's endpoint: its jobs' target and its alert webhook."""
    with Ledger() as rx:
        yield rx


@pytest.fixture
def peer() -> Iterator[Dribbler]:
    """A's alert webhook: answers 200, then one byte every half second for 100 s."""
    with Dribbler(gap_s=0.5, count=200) as slow:
        yield slow


@pytest.fixture
def platform(tmp_path: Path, receiver: Ledger, peer: Dribbler) -> Iterator[list[Proc]]:
    """Two beats and a worker; the beats are yielded, to see they stay up."""
    purge(settings.CELERY_BROKER_URL)
    allow = f"{receiver.allow_entry},{peer.allow_entry}"
    env = {
        "CONTROL_INTERVAL_S": "0.2",
        "TARGET_TEST_ALLOW": allow,
        "ALERT_WEBHOOK_TIMEOUT_S": str(DEADLINE_S),
        "ALERT_RETRY_INITIAL_S": "1",
    }
    with processes(tmp_path) as start:
        beats = [
            start(
                name,
                beat_cmd("--name", name, "--lease-ttl", "5", "--cycle", "0.2", "--lookahead", "2"),
                **env,
            )
            for name in ("nn-1", "nn-2")
        ]
        worker = start(
            "w1", worker_cmd(concurrency=4, name="nn-w1"), TARGET_TEST_ALLOW=receiver.allow_entry
        )
        wait_for(lambda: worker_log_ready(worker) or not worker.alive(), timeout=30, what="w1")
        assert worker.alive(), worker.output()
        yield beats
    purge(settings.CELERY_BROKER_URL)


def noisy_neighbour(
    noisy: Tenant, principal: Principal, api: APIClient, peer: Dribbler
) -> dict[str, Any]:
    """Tenant A does each thing at once; what it queued, to show it is still there."""
    # 1. Six calendars saved before the bounds (rows written directly), each listed by
    # an every-minute schedule that is due now.
    hostile = [
        Calendar.objects.create(
            tenant=noisy, name=f"hostile-{i}", sources=[{"type": "ics", "content": hostile_ics(i)}]
        )
        for i in range(1, 7)
    ]
    for i, calendar in enumerate(hostile):
        schedule = services.schedule_create(
            actor=principal,
            data={
                "name": f"noisy-minutely-{i}",
                "cron": "* * * * *",
                "target": {"type": "http", "url": "https://outsider.internal/hook"},
            },
        )
        ScheduleCalendar.objects.create(
            schedule=schedule, calendar=calendar, role="exclude", position=0
        )
        Schedule.objects.filter(pk=schedule.pk).update(
            next_run_at=db_now() - dt.timedelta(seconds=5)
        )
    # 2. Failure alerts to the dribbling peer.
    AlertChannel.objects.create(
        tenant=noisy, name="slow", kind="webhook", config={"url": f"http://{peer.allow_entry}/"}
    )
    alerts = [
        failure_alert(principal, {"type": "http", "url": "http://127.0.0.1:9/"}).pk
        for _ in range(10)
    ]
    # 3. Backfills up to the tenant's bound, parked: their schedule is paused.
    parked = services.schedule_create(
        actor=principal,
        data={
            "name": "noisy-hourly",
            "cron": "0 * * * *",
            "concurrency": "allow",
            "target": {"type": "http", "url": "https://outsider.internal/hook"},
        },
    )
    # Paused first: no beat may release a run of theirs before they park.
    assert api.post(f"/v1/schedules/{parked.id}:pause", {}, format="json").status_code == 200
    backfills = []
    for _ in range(int(settings.BACKFILL_MAX_RUNNING_PER_TENANT)):
        res = api.post(
            f"/v1/schedules/{parked.id}:backfill",
            {"from": "2026-11-01T00:00:00Z", "to": "2026-11-03T00:00:00Z", "reprocess": "all"},
            format="json",
        )
        assert res.status_code == 202, res.content
        backfills.append(res.json()["id"])
    # 4. Bulk operations up to the tenant's bound on queued items.
    bound = int(settings.BULK_MAX_QUEUED_ITEMS_PER_TENANT)
    operations = []
    for _ in range(4):
        ids = [str(uuid.uuid4()) for _ in range(bound // 4)]
        res = api.post("/v1/schedules:bulk", {"action": "pause", "ids": ids}, format="json")
        assert res.status_code == 202, res.content
        operations.append(res.json()["id"])
    return {"alerts": alerts, "backfills": backfills, "operations": operations}


def test_a_noisy_tenant_stalls_neither_the_firing_nor_another_tenants_control_work(
    platform: list[Proc],
    receiver: Ledger,
    peer: Dribbler,
    tenant: Tenant,
    other_tenant: Tenant,
    admin_principal: Principal,
    api: APIClient,
    outsider_api: APIClient,
) -> None:
    quiet = admin_principal
    # B's every-minute schedule and its alert channel, in place before the noise.
    minutely = make_schedule(
        quiet,
        {"type": "http", "url": f"{receiver.url}/minutely"},
        name="minutely",
        cron="* * * * *",
    )
    AlertChannel.objects.create(
        tenant=tenant, name="hook", kind="webhook", config={"url": f"{receiver.url}/alerts"}
    )
    hourly = make_schedule(
        quiet,
        {"type": "http", "url": f"{receiver.url}/hourly"},
        retry=ONE_SHOT,
        name="hourly",
        cron="0 * * * *",
        concurrency="allow",
    )
    bulk_schedules(tenant, 150, prefix="freeze")

    noise = noisy_neighbour(other_tenant, make_principal(other_tenant), outsider_api, peer)
    watched_from = db_now()
    wait_for(lambda: peer.serving >= 1, timeout=PROMPT_S, what="A's alert being dribbled to")

    # B's alert, backfill and bulk operation, while A's noise goes on.
    started = db_now()
    alert = failure_alert(quiet, {"type": "http", "url": f"{receiver.url}/failing"})
    res = api.post(
        f"/v1/schedules/{hourly.id}:backfill",
        {"from": "2026-11-03T00:00:00Z", "to": "2026-11-03T03:00:00Z", "max_concurrent": 3},
        format="json",
    )
    assert res.status_code == 202, res.content
    backfill_id = res.json()["id"]
    res = api.post(
        "/v1/schedules:bulk",
        {"action": "pause", "filter": {"search": "freeze"}, "reason": "freeze"},
        format="json",
    )
    assert res.status_code == 202, res.content
    operation_id = res.json()["id"]

    def alert_sent() -> bool:
        return any(r["path"] == "/alerts" for r in receiver.requests)

    def quiet_done() -> bool:
        return (
            alert_sent()
            and Backfill.objects.get(pk=backfill_id).state == ControlState.DONE
            and Operation.objects.get(pk=operation_id).state == ControlState.DONE
        )

    wait_for(quiet_done, timeout=PROMPT_S, what="B's alert, backfill and bulk operation")
    finished = db_now()
    [sent] = [r for r in receiver.requests if r["path"] == "/alerts"]
    assert sent["headers"]["X-Alert-Id"] == str(alert.pk)
    assert Alert.objects.get(pk=alert.pk).state == "sent"
    operation = Operation.objects.get(pk=operation_id)
    assert (operation.processed, operation.succeeded) == (150, 150)
    backfill_runs = Execution.objects.filter(backfill_id=backfill_id)
    assert sorted(e.state for e in backfill_runs) == ["succeeded"] * 3
    assert sorted(r["path"] for r in receiver.requests if r["path"] == "/hourly") == ["/hourly"] * 3

    # A's noise was there all along: its alerts still dribbled or pending, its parked
    # backfills untouched, most of its bulk queue still queued.
    assert Alert.objects.filter(pk__in=noise["alerts"], state="sent").count() == 0
    assert peer.connections >= 1
    assert set(
        Backfill.objects.filter(pk__in=noise["backfills"]).values_list("state", "position")
    ) == {(ControlState.RUNNING, 0)}
    still_queued = sum(
        o.total - o.processed for o in Operation.objects.filter(pk__in=noise["operations"])
    )
    assert still_queued > 0, "A's bulk queue was worked through before B's: no noise left"
    assert finished - started < dt.timedelta(seconds=PROMPT_S)

    # B's every-minute schedule: two more minute boundaries with the noise on, each
    # occurrence fired (published) on time; the beats stayed up throughout.
    first = (watched_from + dt.timedelta(minutes=1)).replace(second=0, microsecond=0)
    minutes = [first + dt.timedelta(minutes=k) for k in range(2)]
    runs = Execution.objects.filter(schedule=minutely)
    wait_for(
        lambda: runs.filter(scheduled_for=minutes[-1], published_at__isnull=False).exists(),
        timeout=200,
        what="B's every-minute schedule to reach its second watched occurrence",
    )
    fired = {e.scheduled_for: e for e in runs.filter(scheduled_for__in=minutes)}
    assert sorted(fired) == minutes
    late = {
        at: (e.published_at - at).total_seconds()
        for at, e in fired.items()
        if (e.published_at - at).total_seconds() > ON_TIME_S
    }
    assert late == {}, f"published late (seconds after due): {late}"
    wait_for(
        lambda: sum(1 for r in receiver.requests if r["path"] == "/minutely") >= 2,
        timeout=PROMPT_S,
        what="B's runs to reach its endpoint",
    )
    # The beats never exited, and their control pumps expanded A's rows (bounded).
    assert all(b.alive() for b in platform), "\n".join(b.output()[-2000:] for b in platform)
    assert not Calendar.objects.filter(tenant=other_tenant, expanded__isnull=True).exists()
