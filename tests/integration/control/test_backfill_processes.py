"""Backfills with real processes: a beat (whose control pump releases the runs), a
Celery worker and the recording ledger as the target. The backfill of the
fall-back day in Europe/Amsterdam runs to done with its concurrency cap held at
the target; overlap forbid lets one run at a time through; cancel stops it."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from dispatch import services
from dispatch.models import Backfill, Execution, Schedule
from dispatch.states import ACTIVE_STATES, ControlState
from tenants.roles import Principal
from tests.support.instants import zulu
from tests.support.ledger import Ledger
from tests.support.procs import beat_cmd, processes, wait_for, worker_cmd
from tests.support.rows import execution_row
from tests.support.worker_support import ONE_SHOT, purge

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

AMS = "Europe/Amsterdam"
# Clocks go back on Sunday 25 October 2026, 03:00 CEST -> 02:00 CET.
FALL_BACK_DAY = (
    datetime.fromisoformat("2026-10-25T00:00:00+02:00"),
    datetime.fromisoformat("2026-10-26T00:00:00+01:00"),
)
FALL_BACK_WEEK = (
    datetime.fromisoformat("2026-10-22T00:00:00+02:00"),
    datetime.fromisoformat("2026-10-29T00:00:00+01:00"),
)


class Concurrency:
    """The ledger's answer: 200 after `hold_s`, counting the calls in progress at once."""

    def __init__(self, hold_s: float) -> None:
        self.hold_s = hold_s
        self.now = 0
        self.peak = 0
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, req: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        with self._lock:
            self.now += 1
            self.calls += 1
            self.peak = max(self.peak, self.now)
        try:
            time.sleep(self.hold_s)
        finally:
            with self._lock:
                self.now -= 1
        return 200, {}, b"ok"


def hourly(
    principal: Principal, ledger: Ledger, *, concurrency: str = "allow", cron: str = "0 * * * *"
) -> Schedule:
    """An (hourly) Amsterdam schedule calling the ledger (saved with a placeholder target:
    a loopback receiver cannot pass the save-time SSRF check, as in worker_support)."""
    schedule = services.schedule_create(
        actor=principal,
        data={
            "name": f"bf-{uuid.uuid4().hex[:8]}",
            "cron": cron,
            "timezone": AMS,
            "target": {"type": "http", "url": "https://billing.internal/hook"},
            "retry": ONE_SHOT,
            "concurrency": concurrency,
        },
    )
    # No next run: the beat's own firing (a test may span the top of an hour) stays
    # out of what the test counts; the pump does not need one.
    Schedule.objects.filter(pk=schedule.pk).update(
        target={"type": "http", "url": f"{ledger.url}/hook", "timeout_s": 10}, next_run_at=None
    )
    return schedule


@pytest.fixture
def platform(tmp_path: Path, ledger: Ledger) -> Iterator[Callable[[], None]]:
    """A worker (4 slots: more than any backfill here may use) and a beat whose
    control pump looks for work every 0.2 s; `check()` fails if either died."""
    with _platform(tmp_path, ledger, pump_interval_s=0.2) as check:
        yield check


@pytest.fixture
def idle_pump_platform(tmp_path: Path, ledger: Ledger) -> Iterator[Callable[[], None]]:
    """The same, with a pump that looks for work on its own only every 60 s."""
    with _platform(tmp_path, ledger, pump_interval_s=60) as check:
        yield check


@contextlib.contextmanager
def _platform(
    tmp_path: Path, ledger: Ledger, *, pump_interval_s: float
) -> Iterator[Callable[[], None]]:
    purge(settings.CELERY_BROKER_URL)
    # The backfilled days are fixed (the 2026 fall-back) and now older than the default
    # 30 days of history: the beat's retention pass would purge the final rows a test
    # writes before its backfill reads them (CI saw the dead runs created again).
    env = {
        "TARGET_TEST_ALLOW": ledger.allow_entry,
        "CONTROL_INTERVAL_S": str(pump_interval_s),
        "RETENTION_DAYS": "36500",
    }
    with processes(tmp_path) as start:
        worker = start("w1", worker_cmd(queues="default.short", concurrency=4, name="w1"), **env)
        wait_for(lambda: " ready." in worker.output(), timeout=40, what="worker ready")
        beat = start("beat", beat_cmd("--name", "bf-beat", "--cycle", "0.2"), **env)
        wait_for(lambda: "acquired partition ranges" in beat.output(), timeout=40, what="beat up")

        def check() -> None:
            for proc in (worker, beat):
                assert proc.alive(), f"{proc.name} exited:\n{proc.output()[-3000:]}"

        yield check
    purge(settings.CELERY_BROKER_URL)


def ended(backfill_id: Any, check: Callable[[], None]) -> Callable[[], bool]:
    def predicate() -> bool:
        check()
        return Backfill.objects.get(pk=backfill_id).state != ControlState.RUNNING

    return predicate


@pytest.mark.parametrize(
    "cron,week,expected",
    [
        # The fall-back day: 02:00-03:00 happens twice, so an hourly schedule has 25 runs.
        ("0 * * * *", FALL_BACK_DAY, 25),
        # The last week of October: a fixed 02:30 runs once a day, the 25th included.
        ("30 2 * * *", FALL_BACK_WEEK, 7),
    ],
)
def test_a_dst_range_runs_to_done_within_its_concurrency_cap(
    platform: Callable[[], None],
    ledger: Ledger,
    admin_principal: Principal,
    api: APIClient,
    cron: str,
    week: tuple[datetime, datetime],
    expected: int,
) -> None:
    schedule = hourly(admin_principal, ledger, cron=cron)
    counter = Concurrency(hold_s=0.4)
    ledger.respond = counter
    start, end = week
    args = {
        "actor": admin_principal,
        "schedule_id": schedule.id,
        "range_from": start,
        "range_to": end,
    }
    dry = services.backfill_create(**args, max_concurrent=3, dry_run=True)
    planned = [zulu(item.scheduled_for) for item in dry.plan.items]
    assert len(planned) == expected and dry.backfill is None
    # The dry run lists what the schedule's preview lists over the range.
    shown = api.get(
        f"/v1/schedules/{schedule.id}/preview?from={zulu(start - timedelta(seconds=1))}&count=200"
    ).json()["occurrences"]
    assert planned == [o["scheduled_for"] for o in shown if o["scheduled_for"] < zulu(end)]
    created = services.backfill_create(**args, max_concurrent=3).backfill
    assert created is not None

    wait_for(ended(created.id, platform), timeout=120, what="backfill done")

    backfill = Backfill.objects.get(pk=created.id)
    assert backfill.state == ControlState.DONE, backfill.state
    rows = list(Execution.objects.filter(schedule=schedule).order_by("scheduled_for"))
    assert [zulu(e.scheduled_for) for e in rows] == planned  # what the run created == the dry run
    assert {(e.trigger, e.backfill_id, e.state) for e in rows} == {
        ("backfill", backfill.id, "succeeded")
    }
    # Every occurrence reached the target once, never more than three at a time.
    assert sorted(r["headers"]["X-Scheduled-For"] for r in ledger.requests) == planned
    assert counter.peak <= 3, counter.peak
    assert (backfill.created, backfill.skipped, backfill.position) == (expected, 0, expected)


def six_forbid_runs_one_at_a_time(
    platform: Callable[[], None],
    ledger: Ledger,
    admin_principal: Principal,
    *,
    hold_s: float,
    max_concurrent: int,
    timeout: float,
) -> None:
    """A backfill of six hours of an overlap-forbid schedule: every run succeeds (none
    skipped by the beat's overlap check), never two at the target at once."""
    schedule = hourly(admin_principal, ledger, concurrency="forbid")
    counter = Concurrency(hold_s=hold_s)
    ledger.respond = counter
    start = FALL_BACK_DAY[0]
    created = services.backfill_create(
        actor=admin_principal,
        schedule_id=schedule.id,
        range_from=start,
        range_to=start.replace(hour=6),
        max_concurrent=max_concurrent,
    ).backfill
    assert created is not None
    wait_for(ended(created.id, platform), timeout=timeout, what="backfill done")
    rows = Execution.objects.filter(schedule=schedule)
    assert sorted(rows.values_list("state", flat=True)) == ["succeeded"] * 6
    assert counter.calls == 6 and counter.peak == 1, (counter.calls, counter.peak)


def test_overlap_forbid_runs_one_at_a_time(
    platform: Callable[[], None], ledger: Ledger, admin_principal: Principal
) -> None:
    six_forbid_runs_one_at_a_time(
        platform, ledger, admin_principal, hold_s=0.3, max_concurrent=5, timeout=120
    )


def test_the_next_run_is_released_when_the_last_one_ends_not_an_interval_later(
    idle_pump_platform: Callable[[], None], ledger: Ledger, admin_principal: Principal
) -> None:
    """Under overlap forbid a backfill runs one at a time, so the pump's pace was the
    backfill's: one run per CONTROL_INTERVAL_S (issue 35, defect 9: a day of a
    15-minute schedule took 100 s). The backfill's start and each run's end wake the
    pump (LISTEN/NOTIFY): six runs end long before the first 60 s interval would."""
    six_forbid_runs_one_at_a_time(
        idle_pump_platform, ledger, admin_principal, hold_s=0.05, max_concurrent=4, timeout=40
    )


def test_cancel_stops_further_releases(
    platform: Callable[[], None], ledger: Ledger, admin_principal: Principal
) -> None:
    schedule = hourly(admin_principal, ledger)
    counter = Concurrency(hold_s=1.0)
    ledger.respond = counter
    start, end = FALL_BACK_DAY
    created = services.backfill_create(
        actor=admin_principal,
        schedule_id=schedule.id,
        range_from=start,
        range_to=end,
        max_concurrent=1,
    ).backfill
    assert created is not None
    wait_for(lambda: counter.calls >= 1, timeout=60, what="the first run to reach the target")
    services.backfill_cancel(actor=admin_principal, backfill_id=created.id)
    # The cancel waited for any chunk in progress: what exists now is all it released.
    released = Execution.objects.filter(backfill_id=created.id).count()
    wait_for(
        lambda: (
            not Execution.objects.filter(backfill_id=created.id, state__in=ACTIVE_STATES).exists()
        ),
        timeout=60,
        what="the released runs to end",
    )
    # Several pump rounds (0.2 s apart) with room for another run: none is released.
    time.sleep(1.5)
    platform()
    assert Execution.objects.filter(schedule=schedule).count() == released < 25
    backfill = Backfill.objects.get(pk=created.id)
    assert (
        backfill.state == ControlState.CANCELLED and backfill.cancelled_by == admin_principal.label
    )


def test_reprocess_failed_reruns_only_the_dead_runs(
    platform: Callable[[], None], ledger: Ledger, admin_principal: Principal
) -> None:
    schedule = hourly(admin_principal, ledger)
    start = FALL_BACK_DAY[0]
    hours = [start + timedelta(hours=h) for h in range(6)]
    dead = {hours[1], hours[4]}
    rows = {
        at: execution_row(schedule, at, state="dead" if at in dead else "succeeded") for at in hours
    }
    created = services.backfill_create(
        actor=admin_principal,
        schedule_id=schedule.id,
        range_from=start,
        range_to=start + timedelta(hours=6),
        reprocess="failed",
        max_concurrent=2,
    ).backfill
    assert created is not None
    wait_for(ended(created.id, platform), timeout=120, what="backfill done")

    # The target saw the dead occurrences again, as a new attempt, and nothing else.
    calls = sorted(
        (r["headers"]["X-Scheduled-For"], r["headers"]["X-Attempt"]) for r in ledger.requests
    )
    assert calls == sorted((zulu(at), "2") for at in dead), ledger.dump()
    for at, row in rows.items():
        row.refresh_from_db()
        assert row.state == "succeeded", (at, row.state)
        assert row.reruns == (1 if at in dead else 0), at
    backfill = Backfill.objects.get(pk=created.id)
    assert (backfill.rerun, backfill.skipped, backfill.created) == (2, 4, 0)
    assert Execution.objects.filter(schedule=schedule).count() == 6
