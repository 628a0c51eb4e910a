"""A real beat process fires the timing text: a schedule of several coinciding specs
fires each instant once (cron and interval occurrences merged), an interval fires on
its elapsed-time grid, and a schedule with end_at fires until end_at and then has no
next occurrence (next_run_at NULL, out of the due index).

Independent of the time of day: times are taken from the database clock and the
interval's anchor is a fixed past minute, so any minute lies on its grid."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import pytest
from django.conf import settings

from dispatch import services
from dispatch.models import Execution, Schedule
from dispatch.timing import cron
from tenants.roles import Principal
from tests.support.procs import Proc, beat_cmd, wait_for
from tests.support.worker_support import db_now

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
TARGET = {"type": "http", "url": "https://billing.internal/hook"}
ZONE = "Europe/Amsterdam"


def fired(schedule: Schedule) -> list[dt.datetime]:
    return list(
        Execution.objects.filter(schedule=schedule)
        .order_by("scheduled_for")
        .values_list("scheduled_for", flat=True)
    )


def test_beat_fires_unions_intervals_and_stops_at_end_at(
    start: Callable[..., Proc], admin_principal: Principal
) -> None:
    now = db_now()
    body = {"timezone": ZONE, "target": TARGET, "misfire": "catch_up", "catch_up_limit": 20}
    union = services.schedule_create(
        actor=admin_principal,
        data=body
        | {
            "name": "union",
            "specs": [
                {"cron": "*/2 * * * *"},
                {"cron": "1-59/2 * * * *"},
                {"every": "2m", "anchor": "2026-01-01T00:00:00"},  # = */2: merged away
            ],
        },
    )
    every = services.schedule_create(
        actor=admin_principal,
        data=body | {"name": "interval", "specs": [{"every": "3m", "anchor": "2026-01-01T00:01"}]},
    )
    ending = services.schedule_create(
        actor=admin_principal,
        data=body | {"name": "ending", "cron": "* * * * *", "end_at": now + dt.timedelta(hours=1)},
    )
    # Then backdated to an end_at already passed (the current minute's start), as if the
    # beat had been down over it: the catch-up reaches it at once, so the test sees the
    # beat stop there without waiting for a real minute boundary. (The API refuses an
    # end_at that leaves no occurrence, so the row is edited.)
    end_at = now.replace(second=0, microsecond=0)
    Schedule.objects.filter(id=ending.id).update(
        cron=cron.compose([cron.Spec(cron="* * * * *")], start_at=None, end_at=end_at)
    )
    ending.refresh_from_db()
    # All behind by ten minutes (the beat was "down"): the catch-up covers them.
    behind = (now - dt.timedelta(minutes=10)).replace(second=0, microsecond=0)
    for s in (union, every, ending):
        first = cron.next_after(
            s.cron, ZONE, after=behind - dt.timedelta(seconds=1), seed=str(s.id)
        )
        Schedule.objects.filter(id=s.id).update(next_run_at=first)

    beat = start(
        "beat",
        beat_cmd("--name", "spec-beat", "--lease-ttl", "3", "--cycle", "0.2", "--lookahead", "2"),
        CELERY_BROKER_URL=settings.CELERY_BROKER_URL,
    )
    wait_for(
        lambda: Schedule.objects.get(id=ending.id).next_run_at is None,
        timeout=240,
        what="the ending schedule passing its end_at",
    )
    done = db_now()
    for s in (union, every, ending):
        expected = cron.occurrences_between(
            s.cron, ZONE, start=behind - dt.timedelta(seconds=1), end=done, seed=str(s.id)
        )
        got = [t for t in fired(s) if t <= done]
        # Each occurrence once (no duplicate of the coinciding specs), none missed.
        assert got == expected[: len(got)] and len(got) >= len(expected) - 1, (
            s.name, got, expected, beat.output()[-2000:]
        )  # fmt: skip
    assert all(t.minute % 3 == 1 for t in fired(every))  # the elapsed grid from :01
    ended = fired(ending)
    assert ended and max(ended) == end_at - dt.timedelta(minutes=1)
    assert Schedule.objects.get(id=ending.id).next_run_at is None
    beat.stop()
