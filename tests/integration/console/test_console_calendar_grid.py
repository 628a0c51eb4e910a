"""A calendar's page draws a month grid: each day a schedule listing the calendar
would not run on is struck through and says why (a listed date, a preset's weekday,
a holiday's name); ?month=YYYY-MM moves it, a bad month is an inline error (never a
500); a calendar listed only under `only_calendars` is read that way; another
tenant's calendar is a 404 (the page and the selector)."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from dispatch.exceptions import NotFound
from dispatch.models import Calendar
from dispatch.selectors import calendars as calendar_reads
from dispatch.services import calendars as calendar_writes
from tests.support.console_support import World, form_data

pytestmark = pytest.mark.django_db


@pytest.fixture
def office(world: World) -> Calendar:
    """A listed date without a name, a named one, and the weekends."""
    return calendar_writes.calendar_create(
        actor=world.admin_p,
        data={
            "name": "office",
            "sources": [
                {"type": "dates", "dates": ["2027-01-01"]},
                {"type": "dates", "dates": ["2027-01-04"], "name": "office closed"},
                {"type": "preset", "preset": "weekends"},
            ],
        },
    )


def _day(html: str, day: str) -> tuple[str, str]:
    """The attributes and content of the grid's cell for ``day`` (YYYY-MM-DD)."""
    found = re.search(rf'<td data-date="{day}"([^>]*)>(.*?)</td>', html, re.S)
    assert found is not None, f"no cell for {day}"
    return found.group(1), found.group(2)


def _excluded(html: str, day: str) -> bool:
    attrs, content = _day(html, day)
    if 'data-excluded="true"' in attrs:
        # Said in words as well as drawn: struck through, a title, text for readers.
        assert "<s>" in content and 'class="sr-only"> excluded: ' in content, content
        assert 'title="Excluded: ' in attrs, attrs
        return True
    assert 'data-excluded="false"' in attrs and "<s>" not in content, (attrs, content)
    return False


def _why(html: str, day: str) -> str:
    found = re.search(r'title="Excluded: ([^"]*)"', _day(html, day)[0])
    assert found is not None
    return found.group(1)


def _months(html: str) -> list[str]:
    return re.findall(r'<table class="cal-month" id="cal-month-([0-9-]+)"', html)


def test_grid_marks_the_excluded_days_with_why(world: World, office: Calendar) -> None:
    response = world.client("viewer").get(f"/calendars/{office.id}/?month=2027-01")
    assert response.status_code == 200
    html = response.content.decode()
    assert _months(html) == ["2027-01", "2027-02", "2027-03"]
    assert "<caption>January 2027</caption>" in html
    # Seven weekday heads per month, Monday first.
    head = re.search(r'id="cal-month-2027-01".*?<thead>(.*?)</thead>', html, re.S)
    assert head is not None
    assert re.findall(r'<th scope="col"><abbr title="(\w+)">', head.group(1)) == [
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
    ]
    # 2027-01-01 is a Friday: the first week has four empty cells before it.
    first_week = re.search(r'id="cal-month-2027-01".*?<tbody><tr>(.*?)</tr>', html, re.S)
    assert first_week is not None
    assert first_week.group(1).startswith("<td></td>" * 4 + '<td data-date="2027-01-01"')

    assert _excluded(html, "2027-01-01") and _why(html, "2027-01-01") == "listed date"
    assert _excluded(html, "2027-01-02") and _why(html, "2027-01-02") == "Saturday"
    assert _excluded(html, "2027-01-03") and _why(html, "2027-01-03") == "Sunday"
    assert _excluded(html, "2027-01-04") and _why(html, "2027-01-04") == "office closed"
    for day in ("2027-01-05", "2027-01-08", "2027-02-01", "2027-03-31"):
        assert not _excluded(html, day), day
    assert _excluded(html, "2027-03-27")  # a Saturday in the third month


def test_a_holiday_says_its_name(world: World) -> None:
    nl = calendar_writes.calendar_create(
        actor=world.admin_p,
        data={"name": "NL", "sources": [{"type": "holidays", "country": "NL"}]},
    )
    html = world.client("viewer").get(f"/calendars/{nl.id}/?month=2027-12").content.decode()
    assert _excluded(html, "2027-12-25") and _why(html, "2027-12-25") == "Christmas Day"
    assert not _excluded(html, "2027-12-23")


def test_the_month_parameter_moves_the_grid(world: World, office: Calendar) -> None:
    client = world.client("viewer")
    page = f"/calendars/{office.id}/"
    this_month = dt.datetime.now(dt.UTC).date().replace(day=1)
    html = client.get(page).content.decode()
    assert _months(html)[0] == f"{this_month:%Y-%m}" and len(_months(html)) == 3
    assert 'id="cal-grid-now"' not in html, "already at this month"

    html = client.get(f"{page}?month=2027-01").content.decode()
    later = re.search(r'<a href="([^"]*)" id="cal-grid-later">', html)
    earlier = re.search(r'<a href="([^"]*)" id="cal-grid-earlier">', html)
    assert later is not None and later.group(1) == "?month=2027-04#cal-grid-h"
    assert earlier is not None and earlier.group(1) == "?month=2026-10#cal-grid-h"
    html = client.get(f"{page}?month=2027-04").content.decode()
    assert _months(html) == ["2027-04", "2027-05", "2027-06"]
    assert 'data-date="2027-01-01"' not in html
    # Across a year's end, and to the last months the grid shows.
    assert _months(client.get(f"{page}?month=2031-11").content.decode()) == [
        "2031-11",
        "2031-12",
        "2032-01",
    ]
    html = client.get(f"{page}?month=9998-11").content.decode()
    assert _months(html) == ["9998-11", "9998-12"] and 'id="cal-grid-later"' not in html


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("month=2027-13", "month: &quot;2027-13&quot; is not a month YYYY-MM"),
        ("month=jan", "month: &quot;jan&quot; is not a month YYYY-MM"),
        ("month=", "month: &quot;&quot; is not a month YYYY-MM"),
        ("month=0000-01", "month: &quot;0000-01&quot; is not a month YYYY-MM"),
        ("month=2027-1", "month: &quot;2027-1&quot; is not a month YYYY-MM"),
        ("month=1899-12", "month: 1899-12 is outside the months shown, 1900-01 to 9998-12"),
        ("month=9999-01", "month: 9999-01 is outside the months shown"),
        ("role=sometimes", "role: &quot;sometimes&quot; must be exclude or only"),
    ],
)
def test_a_bad_parameter_is_an_inline_error(
    world: World, office: Calendar, query: str, message: str
) -> None:
    response = world.client("viewer").get(f"/calendars/{office.id}/?{query}")
    assert response.status_code == 400
    html = response.content.decode()
    errors = re.search(
        r'<div class="error" role="alert" id="calendar-grid-errors">(.*?)</div>', html
    )
    assert errors is not None and message in errors.group(1), html[:3000]
    # The page is still whole: the grid falls back to this month.
    this_month = dt.datetime.now(dt.UTC).date().replace(day=1)
    assert _months(html)[0] == f"{this_month:%Y-%m}"


def test_a_calendar_used_as_only_dates_is_read_that_way(world: World) -> None:
    workdays = calendar_writes.calendar_create(
        actor=world.admin_p,
        data={"name": "workdays", "sources": [{"type": "preset", "preset": "business_days"}]},
    )
    client = world.client("operator")
    page = f"/calendars/{workdays.id}/?month=2027-01"
    # Unused, it reads as excluded dates: its weekdays are struck through.
    html = client.get(page).content.decode()
    assert _excluded(html, "2027-01-04") and _why(html, "2027-01-04") == "Monday"
    assert not _excluded(html, "2027-01-02")
    response = client.post("/schedules/new", form_data(name="weekdays", only_calendars="workdays"))
    assert response.status_code == 302, response.content.decode()[:2000]
    # Listed only under only_calendars: the days it does not hold are struck through.
    html = client.get(page).content.decode()
    assert _excluded(html, "2027-01-02") and _why(html, "2027-01-02") == "not in this calendar"
    assert not _excluded(html, "2027-01-04")
    assert "<strong>the only dates</strong>" in html
    # Either reading on request.
    html = client.get(f"{page}&role=exclude").content.decode()
    assert _excluded(html, "2027-01-04") and not _excluded(html, "2027-01-02")


def test_another_tenants_calendar_is_a_404(world: World, office: Calendar) -> None:
    outsider = world.client("outsider")
    assert outsider.get(f"/calendars/{office.id}/?month=2027-01").status_code == 404
    with pytest.raises(NotFound):
        calendar_reads.calendar_month_grid(
            tenant=world.other, calendar_id=office.id, first=dt.date(2027, 1, 1)
        )
    # Its own tenant reads one month.
    (month,) = calendar_reads.calendar_month_grid(
        tenant=world.tenant, calendar_id=office.id, first=dt.date(2027, 1, 1)
    )
    excluded = [d.day.day for week in month.weeks for d in week if d is not None and d.excluded]
    assert excluded == [1, 2, 3, 4, 9, 10, 16, 17, 23, 24, 30, 31]
