"""A real beat process honours calendars: an every-minute schedule whose local dates
are excluded is not fired (not even its late catch-up occurrences) and its next run
moves to the first allowed date, while the same schedule without the calendar fires.

Independent of the time of day: the calendar excludes yesterday, today and tomorrow
in the schedule's zone (computed from the database clock), so whichever local
midnight falls during the test, nothing in the window is allowed; the next allowed
occurrence is checked through next_run_at and the explainer, not by waiting for it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from zoneinfo import ZoneInfo

import pytest
from django.conf import settings

from dispatch import explain, services
from dispatch.models import Calendar, Execution, Schedule, ScheduleCalendar
from dispatch.services import calendars as calendar_writes
from dispatch.states import ExecutionState
from tenants.models import Tenant
from tenants.roles import Principal
from tests.conftest import make_principal
from tests.support.procs import Proc, beat_cmd, wait_for
from tests.support.worker_support import db_now

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
TARGET = {"type": "http", "url": "https://billing.internal/hook"}
ZONE = "America/New_York"


def test_beat_does_not_fire_excluded_dates_and_moves_past_them(
    start: Callable[..., Proc], admin_principal: Principal, tenant: Tenant
) -> None:
    zone = ZoneInfo(ZONE)
    now = db_now()
    today = now.astimezone(zone).date()
    closed = [today + dt.timedelta(days=d) for d in (-1, 0, 1)]
    calendar_writes.calendar_create(
        actor=admin_principal,
        data={
            "name": "closed",
            "sources": [{"type": "dates", "dates": [str(d) for d in closed], "name": "closed"}],
        },
    )
    body = {
        "cron": "* * * * *",
        "timezone": ZONE,
        "target": TARGET,
        "misfire": "catch_up",
        "catch_up_limit": 3,
    }
    excluded = services.schedule_create(
        actor=admin_principal, data=body | {"name": "excluded", "exclude_calendars": ["closed"]}
    )
    control = services.schedule_create(actor=admin_principal, data=body | {"name": "control"})
    first_allowed = dt.datetime.combine(today + dt.timedelta(days=2), dt.time(), zone)
    assert excluded.next_run_at == first_allowed.astimezone(dt.UTC)
    # Both behind by ten minutes (the beat was "down"): the control catches up, the
    # excluded one has nothing to catch up — those minutes are on excluded dates.
    behind = now - dt.timedelta(minutes=10)
    Schedule.objects.filter(id__in=[excluded.id, control.id]).update(next_run_at=behind)

    beat = start(
        "beat",
        beat_cmd("--name", "cal-beat", "--lease-ttl", "3", "--cycle", "0.2", "--lookahead", "2"),
        CELERY_BROKER_URL=settings.CELERY_BROKER_URL,
    )

    def planned() -> bool:
        ran = Schedule.objects.get(id=excluded.id).next_run_at
        return Execution.objects.filter(schedule=control).count() >= 4 and ran != behind

    wait_for(planned, timeout=120, what="the beat planning both schedules")
    assert Execution.objects.filter(schedule=excluded).count() == 0, beat.output()[-3000:]
    assert Schedule.objects.get(id=excluded.id).next_run_at == first_allowed.astimezone(dt.UTC)
    # The beat is live after the catch-up (a one-off job due in a second fires) while
    # the excluded schedule stays silent. (A job rather than the control's next minute:
    # no wait for a real minute boundary.)
    probe, _ = services.job_create(
        actor=admin_principal,
        data={"target": TARGET, "name": "probe", "run_at": db_now() + dt.timedelta(seconds=1)},
    )
    wait_for(
        lambda: Execution.objects.filter(schedule=probe).exists(),
        timeout=60,
        what="the beat firing a job due after its catch-up",
    )
    assert Execution.objects.filter(schedule=excluded).count() == 0
    # Why the excluded schedule did not run a minute ago, and when it runs next.
    minute_ago = (db_now() - dt.timedelta(minutes=1)).replace(second=0, microsecond=0)
    answer = explain.explain(
        schedule=Schedule.objects.get(id=excluded.id), at=minute_ago, now=db_now()
    )
    assert answer.code == "excluded_by_calendar", answer.sentence
    assert "excluded by calendar 'closed'" in answer.sentence
    assert first_allowed.strftime("%Y-%m-%d") in answer.sentence
    beat.stop()


def hostile_ics(day: int) -> str:
    """The issue's 142 bytes: a rule every minute, no COUNT, no UNTIL (4.2 M datetimes
    over the planning years when expanded whole); a different DTSTART each, so no
    cache shares one expansion between them."""
    return (
        "BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\n"
        f"DTSTART;VALUE=DATE:202501{day:02d}\r\nRRULE:FREQ=MINUTELY\r\nSUMMARY:x\r\n"
        "END:VEVENT\r\nEND:VCALENDAR\r\n"
    )


def test_a_hostile_calendar_of_one_tenant_does_not_stall_the_beat_for_another(
    start: Callable[..., Proc], admin_principal: Principal, tenant: Tenant, other_tenant: Tenant
) -> None:
    """Tenant A's due schedule lists six calendars saved before the bounds (rows
    written directly, as a pre-fix row is), in the same batch as tenant B's
    every-minute schedule, behind by ten minutes. The beat reads stored dates only:
    B's catch-up fires at once and the beat stays up (before, the batch expanded the
    six rules inside its firing transaction: minutes of CPU, the watchdog exited the
    beat, and a restarted beat met the same batch again)."""
    hostile = [
        Calendar.objects.create(
            tenant=tenant, name=f"hostile-{i}", sources=[{"type": "ics", "content": hostile_ics(i)}]
        )
        for i in range(1, 7)
    ]
    body = {"cron": "* * * * *", "timezone": "UTC", "target": TARGET, "misfire": "catch_up"}
    victim = services.schedule_create(
        actor=admin_principal, data=body | {"name": "a", "catch_up_limit": 3}
    )
    ScheduleCalendar.objects.bulk_create(
        ScheduleCalendar(schedule=victim, calendar=c, role="exclude", position=i)
        for i, c in enumerate(hostile)
    )
    other = services.schedule_create(
        actor=make_principal(other_tenant), data=body | {"name": "b", "catch_up_limit": 5}
    )
    now = db_now()
    # A's first in the batch: its calendars are read before B's occurrences are planned.
    Schedule.objects.filter(id=victim.id).update(next_run_at=now - dt.timedelta(minutes=11))
    Schedule.objects.filter(id=other.id).update(next_run_at=now - dt.timedelta(minutes=10))

    beat = start(
        "beat",
        beat_cmd("--name", "cal-beat", "--lease-ttl", "3", "--cycle", "0.2", "--lookahead", "2"),
        CELERY_BROKER_URL=settings.CELERY_BROKER_URL,
    )
    # Ten minutes behind with catch_up_limit 5: five catch-up runs (the rest skipped).
    runs = Execution.objects.filter(schedule=other).exclude(state=ExecutionState.SKIPPED)
    wait_for(lambda: runs.count() >= 5 or not beat.alive(), timeout=90, what="tenant B's catch-up")
    assert beat.alive(), beat.output()[-3000:]
    assert runs.count() >= 5, beat.output()[-3000:]
    # The control pump expanded the six rows since (bounded: the rule is refused).
    wait_for(
        lambda: not Calendar.objects.filter(expanded__isnull=True).exists(),
        timeout=30,
        what="the refresh of the rows saved before the bounds",
    )
    assert beat.alive(), beat.output()[-3000:]
    beat.stop()
