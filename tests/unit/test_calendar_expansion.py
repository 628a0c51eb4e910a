""".ics expansion is bounded: rules repeating within a day are refused, a rule is walked
lazily to the end of the planning years, a rule whose filters never match stops at
the step cap, and a calendar's expansion stops at the time budget — at save a 400
naming `sources[i].content` and why; for a row stored before these bounds, the
refused event is left out and the rest kept."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from dispatch import calendars
from dispatch.exceptions import InvalidSchedule


def ics(*rules: str, start: str = "20250106", summary: str = "closed") -> str:
    events = "".join(
        f"BEGIN:VEVENT\r\nUID:{i}@t\r\nDTSTART;VALUE=DATE:{start}\r\nSUMMARY:{summary} {i}\r\n"
        + (f"RRULE:{rule}\r\n" if rule else "")
        + "END:VEVENT\r\n"
        for i, rule in enumerate(rules)
    )
    return f"BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//t//t//EN\r\n{events}END:VCALENDAR\r\n"


def refusal(content: str) -> dict[str, Any]:
    with pytest.raises(InvalidSchedule) as caught:
        calendars.clean_sources([{"type": "ics", "content": content}], tenant=None)
    return dict(caught.value.detail or {})


@pytest.mark.parametrize("freq", ["SECONDLY", "MINUTELY", "HOURLY"])
def test_a_rule_repeating_within_a_day_is_refused_naming_the_source(freq: str) -> None:
    # The attacker's 142 bytes: no COUNT, no UNTIL — 4.2 M datetimes for MINUTELY.
    assert refusal(ics(f"FREQ={freq}")) == {
        "sources[0].content": [
            f"RRULE FREQ={freq} repeats within a day; a calendar holds dates: use FREQ=DAILY,"
            " WEEKLY, MONTHLY or YEARLY"
        ]
    }


def test_a_daily_rule_without_end_fills_exactly_the_planning_years() -> None:
    years = calendars.planning_years()
    sources = calendars.clean_sources(
        [{"type": "ics", "content": ics("FREQ=DAILY", start="19900101")}], tenant=None
    )
    dates = calendars.expand("daily", sources, years=years, strict=True)
    first, last = dt.date(min(years), 1, 1), dt.date(max(years), 12, 31)
    assert [day for day, _ in dates.dates] == [
        first + dt.timedelta(days=n) for n in range((last - first).days + 1)
    ]
    # The stored form reads back as the same dates.
    assert calendars.stored_dates("daily", calendars.stored_expansion(dates)) == dates


def test_a_rule_whose_filters_never_match_stops_at_the_step_cap(settings: Any) -> None:
    # The step cap, not the time budget, must stop it: on a loaded CI machine 100,000
    # steps took longer than the default 2 s budget.
    settings.CALENDAR_EXPAND_BUDGET_S = 120
    # 30 February: dateutil would walk day by day to the year 9999 looking for one.
    never = "FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30"
    assert refusal(ics(never)) == {
        "sources[0].content": [
            f"an RRULE takes more than {calendars.MAX_RULE_STEPS} steps to cover the planning"
            " years (its BY filters match rarely or never, or its DTSTART is far in the past)"
        ]
    }
    # A minute-by-minute rule disguised as a daily one is as costly: refused the same way.
    disguised = "FREQ=DAILY;BYHOUR=" + ",".join(map(str, range(24)))
    disguised += ";BYMINUTE=" + ",".join(map(str, range(60)))
    assert "steps to cover the planning years" in refusal(ics(disguised))["sources[0].content"][0]


def test_a_stored_row_keeps_its_other_dates_and_loses_what_is_refused(settings: Any) -> None:
    """A row saved before the bounds (the migration, the refresh and the dates API
    expand it leniently): the hostile events are left out, the rest expanded."""
    # Each hostile event is refused by its own bound (the step cap), never by the time
    # budget, which a loaded machine could reach first and which refuses the whole source.
    settings.CALENDAR_EXPAND_BUDGET_S = 120
    content = ics("FREQ=MINUTELY", "FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30", "", start="20270105")
    dates = calendars.expand(
        "old", [{"type": "ics", "content": content}], years=calendars.planning_years()
    )
    assert dates.dates == ((dt.date(2027, 1, 5), "closed 2"),)


def test_a_calendar_over_the_time_budget_is_refused_saying_so(settings: Any) -> None:
    settings.CALENDAR_EXPAND_BUDGET_S = 0.3
    # Each rule walks ~30 years of days (a third of the step cap: the cap must not be
    # what stops it); 200 of them cannot fit in 0.3 s on any machine.
    slow = ics(*["FREQ=DAILY;INTERVAL=1"] * 200, start="20000101")
    assert refusal(slow) == {
        "sources[0].content": [
            "expanding it takes longer than the calendar time budget of 0.3 s"
            " (CALENDAR_EXPAND_BUDGET_S)"
        ]
    }
