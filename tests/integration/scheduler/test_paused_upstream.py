"""A paused upstream: its occurrences are recorded skipped as they fall due, so
its dependents are skipped naming it instead of waiting "pending" forever; the
misfire policy still decides, at resume, what resuming runs.

In-process beat against the real PostgreSQL and broker."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from dispatch import explain, services
from dispatch.models import Execution, ExecutionEvent, Schedule
from dispatch.scheduler.firing import PAUSED_RECORD_LIMIT
from dispatch.scheduler.loop import Beat
from dispatch.timing import cron
from tenants.roles import Principal
from tests.support.worker_support import db_now

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("empty_broker")]
TARGET = {"type": "http", "url": "https://billing.internal/hook"}


@pytest.fixture(scope="module")
def beat_config() -> dict[str, Any]:
    return {"name": "paused-beat", "sweep_interval_s": 0}


def paused_since(
    principal: Principal, name: str, *, minutes: int, **data: Any
) -> tuple[Schedule, Schedule]:
    """An every-minute upstream paused `minutes` ago (its next run still then), and a dependent."""
    up = services.schedule_create(
        actor=principal,
        data={"name": name, "cron": "* * * * *", "target": TARGET, "misfire_grace_s": 60} | data,
    )
    down = services.schedule_create(
        actor=principal,
        data={
            "name": f"{name}-report",
            "cron": "0 0 1 1 *",
            "target": TARGET,
            "depends_on": [str(up.id)],
        },
    )
    services.schedule_pause(actor=principal, schedule_id=up.id, reason="deploy freeze")
    since = db_now() - timedelta(minutes=minutes, seconds=30)
    first = cron.next_after(up.cron, up.timezone, after=since, seed=str(up.id))
    Schedule.objects.filter(pk=up.pk).update(next_run_at=first, paused_at=since)
    # Both existed well before the pause.
    Schedule.objects.filter(pk__in=[up.pk, down.pk]).update(created_at=since - timedelta(hours=1))
    ExecutionEvent.objects.filter(schedule=up, kind="paused").update(at=since)
    up.refresh_from_db()
    down.refresh_from_db()
    return up, down


def late_occurrences(up: Schedule, now: datetime) -> list[datetime]:
    return [
        o
        for o in cron.occurrences_between(
            up.cron,
            up.timezone,
            seed=str(up.id),
            start=up.next_run_at - timedelta(microseconds=1),
            end=now,
        )
        if o < now - timedelta(seconds=up.misfire_grace_s)
    ]


def test_paused_upstream_occurrences_skip_the_dependent_naming_it(
    beat: Beat, admin_principal: Principal
) -> None:
    up, down = paused_since(admin_principal, "export", minutes=5)
    expected = late_occurrences(up, db_now())
    assert len(expected) >= 4
    beat.cycle()

    recorded = Execution.objects.filter(schedule=up).order_by("scheduled_for")
    assert [e.scheduled_for for e in recorded][: len(expected)] == expected
    assert {(e.state, e.reason_code) for e in recorded} == {("skipped", "paused")}
    assert "paused by test:admin" in recorded[0].reason and "deploy freeze" in recorded[0].reason
    skipped = Execution.objects.filter(schedule=down).order_by("scheduled_for")
    assert [e.scheduled_for for e in skipped] == [e.scheduled_for for e in recorded]
    for e in skipped:
        assert e.state == "skipped" and e.reason_code == "upstream"
        assert "upstream export skipped while paused" in e.reason

    # Both sides explain it: the upstream was paused, the dependent skipped naming it.
    at = expected[1]
    answer = explain.explain(schedule=down, at=at)
    assert answer.code == "skipped_upstream" and "export" in answer.sentence, answer.sentence
    answer = explain.explain(schedule=up, at=at)
    assert answer.code == "paused" and "deploy freeze" in answer.sentence, answer.sentence

    # Recorded once: the next sweep writes nothing for what is already recorded.
    count = recorded.count()
    beat.cycle()
    assert Execution.objects.filter(schedule=up).count() in (count, count + 1)  # a new minute
    up.refresh_from_db()
    assert up.next_run_at >= db_now() - timedelta(seconds=up.misfire_grace_s + 60)


def test_resuming_still_follows_the_misfire_policy(beat: Beat, admin_principal: Principal) -> None:
    """run_once: what resuming runs (the latest missed occurrence) is left for the resume."""
    up, down = paused_since(admin_principal, "nightly", minutes=5, misfire="run_once")
    beat.cycle()
    recorded = list(Execution.objects.filter(schedule=up).order_by("scheduled_for"))
    late = late_occurrences(Schedule.objects.get(pk=up.pk), db_now())
    assert recorded and all(e.state == "skipped" for e in recorded)
    up.refresh_from_db()
    held = up.next_run_at
    assert held > recorded[-1].scheduled_for and (not late or held == late[-1])
    # The dependent of the held occurrence is not skipped: resuming may still run it.
    assert not Execution.objects.filter(schedule=down, scheduled_for=held).exists()
    services.schedule_resume(actor=admin_principal, schedule_id=up.id)
    beat.cycle()
    ran = Execution.objects.get(schedule=up, scheduled_for=held)
    assert ran.state == "queued" and ran.trigger == "catch_up"


def test_a_week_long_pause_is_recorded_in_bounded_batches(
    beat: Beat, admin_principal: Principal
) -> None:
    """10,000 missed minutes found at once (the beat was down too): bounded rows,
    the rest summed up in one event, the dependent's explainer still answers."""
    up, down = paused_since(admin_principal, "minutely", minutes=7 * 24 * 60)
    beat.cycle()
    assert Execution.objects.filter(schedule=up).count() == PAUSED_RECORD_LIMIT
    summary = ExecutionEvent.objects.get(schedule=up, kind="paused_skipped")
    assert "older occurrences missed while paused" in summary.message
    old = up.next_run_at + timedelta(days=1)
    answer = explain.explain(schedule=down, at=old)
    assert answer.code == "skipped_upstream" and "minutely" in answer.sentence, answer.sentence
    assert "paused" in answer.sentence
