"""One rule for times in the console (issue 35, defect 15): every instant in the
viewer's zone (the header names it, UTC on hover), a schedule's own wall time added
only where it matters, labelled with its zone: the calendars' "Changed" column, the
resume plan and the message after resuming, the bulk review's plan, the schedule page."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from django.test import Client

from dispatch import services
from dispatch.models import Calendar, Schedule
from dispatch.services import calendars as calendar_writes
from tests.support.console_support import TARGET, World, text

pytestmark = pytest.mark.django_db

CHANGED = datetime(2026, 7, 1, 10, 0, tzinfo=UTC)  # 12:00 CEST in Amsterdam
NEXT = datetime(2031, 7, 1, 8, 0, tzinfo=UTC)  # 10:00 CEST in Amsterdam, 04:00 EDT in New York


def amsterdam(world: World, who: str, *, csrf: bool = False) -> Client:
    client = world.client(who, csrf=csrf)
    assert client.post("/prefs/tz", {"tz": "Europe/Amsterdam"}).status_code == 302
    return client


def paused_new_york_schedule(world: World) -> Schedule:
    """A schedule whose zone is neither UTC nor the viewer's, paused, its next run ahead."""
    schedule = services.schedule_create(
        actor=world.admin_p,
        data={
            "name": "ny-close",
            "cron": "0 4 * * *",
            "timezone": "America/New_York",
            "target": TARGET,
        },
    )
    services.schedule_pause(actor=world.admin_p, schedule_id=schedule.id, reason="", until=None)
    Schedule.objects.filter(pk=schedule.id).update(next_run_at=NEXT)
    return Schedule.objects.get(pk=schedule.id)


def test_calendars_changed_column_is_in_the_viewers_zone(world: World) -> None:
    calendar = calendar_writes.calendar_create(
        actor=world.admin_p,
        data={"name": "nl-holidays", "sources": [{"type": "preset", "preset": "weekends"}]},
    )
    Calendar.objects.filter(pk=calendar.pk).update(updated_at=CHANGED)
    html = text(amsterdam(world, "viewer").get("/calendars/"))
    row = re.search(r"<tr><td><a [^>]*>nl-holidays</a>.*?</tr>", html, re.S)
    assert row, html[:3000]
    assert (
        '<time datetime="2026-07-01T10:00:00Z" title="2026-07-01 10:00:00 UTC">'
        "2026-07-01 12:00:00 CEST</time>"
    ) in row.group(0)
    assert "10:00 UTC" not in row.group(0).replace('title="2026-07-01 10:00:00 UTC"', "")


def test_resume_plan_and_message_are_in_the_viewers_zone(world: World) -> None:
    schedule = paused_new_york_schedule(world)
    client = amsterdam(world, "operator")
    page = text(client.get(f"/schedules/{schedule.id}/"))
    plan = re.search(r'<span class="plan" id="resume-plan">([^<]*)</span>', page)
    assert plan and plan.group(1).endswith("keeps the next run at 2031-07-01 10:00:00 CEST."), plan
    # The schedule page's instants are the viewer's too; its next run adds its own zone.
    assert re.search(r"Paused by [^<]+ at <time [^>]+>[^<]+ CES?T</time>", page)
    assert (
        "2031-07-01 10:00:00 CEST</time> "
        '<small class="muted local-time">(2031-07-01 04:00 EDT, America/New_York)</small>'
    ) in page

    done = client.post(f"/schedules/{schedule.id}/resume", follow=True)
    html = text(done)
    message = re.search(r'<p class="notice" role="status">([^<]*)</p>', html)
    assert message, html[:3000]
    assert message.group(1) == (
        "Resumed. Nothing was missed while paused: resuming now keeps the next run "
        "at 2031-07-01 10:00:00 CEST."
    )


def test_bulk_resume_review_words_times_in_the_viewers_zone(world: World) -> None:
    schedule = paused_new_york_schedule(world)
    client = amsterdam(world, "operator")
    review = text(
        client.post(
            "/schedules/bulk", {"action": "resume", "scope": "ids", "ids": [str(schedule.id)]}
        )
    )
    assert "keeps the next run at 2031-07-01 10:00:00 CEST." in review, review[:3000]
    # The API's dry run (no viewer) stays in UTC, as its answers are.
    outcome = services.bulk_schedules(
        actor=world.admin_p, action="resume", ids=[str(schedule.id)], dry_run=True
    )
    assert outcome.preview is not None
    assert outcome.preview["items"][0]["text"].endswith("at 2031-07-01 08:00:00 UTC.")
