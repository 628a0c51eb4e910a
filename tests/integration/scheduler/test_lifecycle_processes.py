"""max_runs through a real beat and a real Celery worker (separate processes): a
schedule with max_runs=3 stops after exactly three successes counted at the receiver —
its failed fires do not count — and is then `completed` with nothing left scheduled.

Fast occurrences without waiting minutes: the every-minute schedule is set eight
minutes behind with misfire `catch_up` (limit 8), so the beat fires the missed
occurrences at once, whatever the time of day. The worker runs one at a time
(concurrency 1): when the third success lands, nothing else of the schedule is
running, so "already running ones finish normally" adds none, and every occurrence
published before the schedule completed is skipped when claimed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from dispatch import services
from dispatch.models import Execution, ExecutionEvent, Schedule
from dispatch.states import EventKind, ReasonCode
from tenants.roles import Principal
from tests.support.ledger import Ledger
from tests.support.procs import Proc, beat_cmd, processes, wait_for
from tests.support.worker_support import ONE_SHOT, QUEUES, db_now, purge, worker_processes

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
MISSED = 8
FAILING = 2  # the receiver's first calls answer 500


class Outcomes:
    """What the receiver answered: the first FAILING calls fail, the rest succeed."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls = 0
        self.succeeded: list[str] = []

    def __call__(self, req: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        with self.lock:
            self.calls += 1
            if self.calls <= FAILING:
                return 500, {}, b"down"
            self.succeeded.append(req["headers"].get("X-Execution-Id", ""))
            return 200, {}, b"ok"


def minutes_behind() -> datetime:
    """MISSED minutes before now, on the minute, not within seconds of the next minute:
    a boundary passed before the beat starts adds an occurrence the limit then
    skips (CI saw ten runs where the counts below expect nine)."""
    now = db_now()
    if now.second >= 40:
        time.sleep(61 - now.second)
        now = db_now()
    return (now - timedelta(minutes=MISSED)).replace(second=0, microsecond=0)


@pytest.fixture
def outcomes() -> Outcomes:
    return Outcomes()


@pytest.fixture
def platform(
    tmp_path: Path, outcomes: Outcomes
) -> Iterator[tuple[Ledger, Callable[..., Proc], Callable[..., Proc]]]:
    purge(settings.CELERY_BROKER_URL)
    with (
        Ledger(outcomes) as ledger,
        worker_processes(tmp_path) as start_worker,
        processes(tmp_path) as start,
    ):
        yield ledger, start, start_worker
    purge(settings.CELERY_BROKER_URL)


def test_max_runs_stops_after_exactly_three_successes(
    platform: tuple[Ledger, Callable[..., Proc], Callable[..., Proc]],
    outcomes: Outcomes,
    admin_principal: Principal,
    settings: Any,
) -> None:
    ledger, start, start_worker = platform
    settings.TARGET_TEST_ALLOW = [ledger.allow_entry]
    schedule = services.schedule_create(
        actor=admin_principal,
        data={
            "name": "campaign",
            "cron": "* * * * *",
            "target": {"type": "http", "url": f"{ledger.url}/hook", "timeout_s": 10},
            "retry": ONE_SHOT,
            "concurrency": "allow",
            "misfire": "catch_up",
            "catch_up_limit": MISSED,
            "max_runs": 3,
        },
    )
    behind = minutes_behind()
    Schedule.objects.filter(pk=schedule.pk).update(next_run_at=behind)
    worker = start_worker(
        "lw", queues=",".join(QUEUES), concurrency=1, TARGET_TEST_ALLOW=ledger.allow_entry
    )
    beat = start("beat", beat_cmd("--name", "life-beat", "--cycle", "0.2", "--lease-ttl", "5"))

    def settled() -> bool:
        stored = Schedule.objects.get(pk=schedule.pk)
        active = Execution.objects.filter(
            schedule=schedule, state__in=["scheduled", "queued", "running", "retry_scheduled"]
        )
        return stored.completed_at is not None and not active.exists()

    wait_for(settled, timeout=90, what="the schedule completed with nothing in flight")
    stored = Schedule.objects.get(pk=schedule.pk)
    runs = Execution.objects.filter(schedule=schedule)
    succeeded = runs.filter(state="succeeded")
    context = f"{beat.output()[-2000:]}\n{worker.output()[-2000:]}"
    # Exactly three successes at the receiver and in the records; the failures before them
    # did not count.
    assert len(outcomes.succeeded) == 3, context
    assert sorted(outcomes.succeeded) == sorted(str(e.id) for e in succeeded)
    assert runs.filter(state="dead").count() == FAILING
    assert stored.runs_succeeded == 3 and stored.next_run_at is None
    # The occurrences published before it completed were skipped at claim, not run.
    skipped = runs.filter(state="skipped", reason_code=ReasonCode.SCHEDULE_COMPLETED)
    assert skipped.count() >= MISSED - FAILING - 3, context
    assert runs.count() == FAILING + 3 + skipped.count(), context
    assert outcomes.calls == FAILING + 3
    event = ExecutionEvent.objects.get(schedule=schedule, kind=EventKind.COMPLETED)
    assert "completed: reached max_runs 3" in event.message
    # Nothing left scheduled, while the beat is still up: out of the due index for good.
    assert beat.alive() and worker.alive()
    assert not Execution.objects.filter(schedule=schedule, state="scheduled").exists()


def test_end_at_passed_during_an_outage_fires_only_what_came_before_then_completes(
    platform: tuple[Ledger, Callable[..., Proc], Callable[..., Proc]],
    admin_principal: Principal,
) -> None:
    """The beat was "down" for eight minutes and end_at fell three minutes ago: the
    catch-up fires the five occurrences before end_at, none after, and the schedule is
    then completed (reason end_at) with no next run."""
    _, start, _ = platform
    from dispatch.api.serializers import schedule_out
    from dispatch.timing import cron

    schedule = services.schedule_create(
        actor=admin_principal,
        data={
            "name": "ending",
            "cron": "* * * * *",
            "target": {"type": "http", "url": "https://billing.internal/hook"},
            "concurrency": "allow",
            "misfire": "catch_up",
            "catch_up_limit": MISSED,
        },
    )
    behind = minutes_behind()
    end = behind + timedelta(minutes=5)
    # Time passed: the stored timing text gains an end_at that is now in the past.
    text = cron.compose([cron.Spec(cron="* * * * *")], start_at=None, end_at=end)
    Schedule.objects.filter(pk=schedule.pk).update(cron=text, next_run_at=behind)
    beat = start("beat", beat_cmd("--name", "end-beat", "--cycle", "0.2", "--lease-ttl", "5"))
    wait_for(
        lambda: Schedule.objects.get(pk=schedule.pk).next_run_at is None,
        timeout=60,
        what="the beat moving the schedule past its end_at",
    )
    fired = sorted(
        Execution.objects.filter(schedule=schedule).values_list("scheduled_for", flat=True)
    )
    assert fired == [behind + timedelta(minutes=m) for m in range(5)], beat.output()[-2000:]
    out = schedule_out(Schedule.objects.get(pk=schedule.pk))
    assert out["completed"] is True and out["completed_reason"] == "end_at"
    assert out["completed_at"] == end.isoformat().replace("+00:00", "Z")
