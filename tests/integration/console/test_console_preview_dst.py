"""The schedule form's live preview (issue 35, defect 17): the zone's next clock change
within a year and what it does to this schedule, whether or not the ten runs listed
reach it (worded by the same DST rules as the runs' notes), and a "Preview from" that
moves where the list starts, a bad value an inline error."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from dispatch.timing import cron
from tests.support.console_support import World, db_now, form_data, text

pytestmark = pytest.mark.django_db


def preview(world: World, **fields: str) -> str:
    response = world.client("operator").post(
        "/schedules/preview", form_data(**fields), HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 200
    return text(response)


def next_change(html: str) -> str:
    found = re.search(
        r'<p class="warn" id="dst-next"><strong>Next clock change:</strong> ([^<]+)</p>', html
    )
    assert found, html
    return found.group(1)


def listed(html: str) -> list[str]:
    """The runs' times in the schedule's zone (the table's second column)."""
    return re.findall(r'<tr class=""><td>\d+</td><td><time [^>]*>([^<]+)</time>', html)


def test_the_next_clock_change_shows_though_the_ten_runs_do_not_reach_it(world: World) -> None:
    html = preview(world, cron="30 2 * * *", timezone="Europe/Amsterdam", preview_from="2027-01-10")
    runs = listed(html)
    assert runs[0] == "2027-01-10 02:30:00 CET" and runs[-1] == "2027-01-19 02:30:00 CET"
    assert "does not exist" not in "".join(re.findall(r"<td>([^<]*)</td></tr>", html)), (
        "no run listed is on the transition day"
    )
    assert next_change(html) == (
        "On 2027-03-28 at 02:00 CET the clocks go forward 1 hour to 03:00 CEST in "
        "Europe/Amsterdam: 02:30 does not exist on 2027-03-28 in Europe/Amsterdam; "
        "runs at 03:00 CEST."
    )
    # The same words as the run's own note when the list does reach that day.
    reached = preview(
        world, cron="30 2 * * *", timezone="Europe/Amsterdam", preview_from="2027-03-27"
    )
    assert "02:30 does not exist on 2027-03-28 in Europe/Amsterdam; runs at 03:00 CEST" in reached
    assert listed(reached)[:2] == ["2027-03-27 02:30:00 CET", "2027-03-28 03:00:00 CEST"]


def test_a_run_twice_a_fall_back_and_a_run_it_does_not_touch(world: World) -> None:
    hourly = preview(
        world, cron="30 * * * *", timezone="Europe/Amsterdam", preview_from="2027-08-01"
    )
    assert next_change(hourly) == (
        "On 2027-10-31 at 03:00 CEST the clocks go back 1 hour to 02:00 CET in "
        "Europe/Amsterdam: 02:30 occurs twice on 2027-10-31 in Europe/Amsterdam; "
        "runs in both (CEST and CET)."
    )
    office = preview(
        world, cron="0 9 * * 1-5", timezone="Europe/Amsterdam", preview_from="2027-08-01"
    )
    assert next_change(office) == (
        "On 2027-10-31 at 03:00 CEST the clocks go back 1 hour to 02:00 CET in "
        "Europe/Amsterdam: no run of this schedule is at a wall time the change repeats."
    )
    # A zone that keeps its clocks all year says nothing of a change.
    tokyo = preview(world, cron="30 2 * * *", timezone="Asia/Tokyo")
    assert listed(tokyo) and 'id="dst-next"' not in tokyo


def test_without_preview_from_the_list_starts_now_and_the_change_is_the_next_one(
    world: World,
) -> None:
    zone = ZoneInfo("America/New_York")
    now = db_now()
    html = preview(world, cron="30 2 * * *", timezone="America/New_York")
    first = datetime.strptime(listed(html)[0][:16], "%Y-%m-%d %H:%M").replace(tzinfo=zone)
    assert now < first.astimezone(UTC) <= now + timedelta(days=1, hours=1)
    said = next_change(html)
    change = cron.next_transition(zone, now)
    assert change is not None and change - now <= timedelta(days=366)
    day = (change - timedelta(seconds=1)).astimezone(zone).date().isoformat()
    assert said.startswith(f"On {day} at ") and "in America/New_York: " in said


def test_preview_from_moves_the_list_and_a_bad_one_is_an_inline_error(world: World) -> None:
    html = preview(
        world, cron="0 9 * * 1-5", timezone="Europe/Amsterdam", preview_from="2027-06-01T10:00"
    )
    assert listed(html)[0] == "2027-06-02 09:00:00 CEST", (
        "from 10:00 on: the 09:00 run that day is before it"
    )
    assert 'id="preview-start"' in html
    bad = preview(world, cron="0 25 * * *", preview_from="next tuesday")
    assert "Not valid yet" in bad and "<table" not in bad
    # Every wrong field named at once: the cron and the preview's start.
    assert "cron:" in bad
    assert (
        "Preview from: must be a date (2027-03-28) or a date and time (2027-03-28T02:00), "
        "not &#x27;next tuesday&#x27;"
    ) in bad
    assert "Preview from: " in preview(world, preview_from="12000-01-01")


def test_the_form_carries_the_preview_from_field(world: World) -> None:
    page = text(world.client("operator").get(f"/schedules/{world.schedule.id}/edit"))
    field = re.search(
        r'<input id="preview-from" name="preview_from" form="schedule-form"[^>]*>', page
    )
    assert (
        field
        and 'hx-post="/schedules/' in field.group(0)
        and 'hx-target="#preview"' in field.group(0)
    )
    assert '<label for="preview-from">Preview from</label>' in page
