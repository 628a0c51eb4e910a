"""Calendars in the cron math: an excluded LOCAL date removes every occurrence on it
(DST days included), the planners agree with each other, and skipping is bounded."""

from __future__ import annotations

import shutil
import subprocess
import sys
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatch.timing import cron
from dispatch.timing.calendars import DateFilter, DateSet
from tests.support.instants import z

SEED = "6a1f3c2e-7d4b-4e8a-9c05-1b2d3e4f5a6b"
TICK = timedelta(microseconds=1)


def excluding(name: str, *days: str, weekdays: tuple[int, ...] = ()) -> DateFilter:
    dates = {date.fromisoformat(d): f"holiday {d}" for d in days}
    return DateFilter(exclude=(DateSet.of(name, dates, weekdays),))


def local_days(instants: list[datetime], tz: str) -> set[date]:
    return {i.astimezone(ZoneInfo(tz)).date() for i in instants}


def day_bounds(day: str, tz: str) -> tuple[datetime, datetime]:
    zone, d = ZoneInfo(tz), date.fromisoformat(day)
    start = datetime.combine(d, time(), tzinfo=zone).astimezone(UTC)
    end = datetime.combine(d + timedelta(days=1), time(), tzinfo=zone).astimezone(UTC)
    return start, end


def test_excluded_date_removes_every_occurrence_and_keeps_its_neighbours() -> None:
    dates = excluding("NL holidays", "2026-12-25")
    runs = cron.occurrences_between(
        "0 * * * *", "Europe/Amsterdam", start=z(2026, 12, 23, 22, 59), end=z(2026, 12, 26, 22, 59),
        seed=SEED, dates=dates,
    )  # fmt: skip
    assert local_days(runs, "Europe/Amsterdam") == {date(2026, 12, 24), date(2026, 12, 26)}
    assert len(runs) == 48


def test_local_date_not_utc_date_decides() -> None:
    # 23:30 in New York on 24 December is 04:30 UTC on the 25th: it runs when the
    # 25th is excluded and does not when the 24th is.
    at = z(2026, 12, 25, 4, 30)
    assert cron.next_after(
        "30 23 * * *", "America/New_York", after=at - TICK, seed=SEED,
        dates=excluding("x", "2026-12-25"),
    ) == at  # fmt: skip
    assert cron.next_after(
        "30 23 * * *", "America/New_York", after=at - TICK, seed=SEED,
        dates=excluding("x", "2026-12-24"),
    ) == z(2026, 12, 26, 4, 30)  # fmt: skip


@pytest.mark.parametrize(
    ("tz", "day", "nominal"),
    [
        ("Europe/Amsterdam", "2026-03-29", 23),
        ("Europe/Amsterdam", "2026-10-25", 25),
        ("America/New_York", "2026-03-08", 23),
        ("America/New_York", "2026-11-01", 25),
    ],
)
def test_a_holiday_on_a_dst_day_removes_all_of_that_day(tz: str, day: str, nominal: int) -> None:
    start, end = day_bounds(day, tz)
    window = {"start": start - timedelta(hours=2) - TICK, "end": end + timedelta(hours=2) - TICK}
    plain = cron.occurrences_between("0 * * * *", tz, seed=SEED, **window)
    filtered = cron.occurrences_between(
        "0 * * * *", tz, seed=SEED, dates=excluding("h", day), **window
    )
    assert len(plain) - len(filtered) == nominal
    assert date.fromisoformat(day) not in local_days(filtered, tz)
    # A gap's end (02:30 runs at 03:00 on spring-forward day) is on the excluded day too.
    gap = cron.occurrences_between("30 2 * * *", tz, seed=SEED, dates=excluding("h", day), **window)
    assert gap == []


def test_weekday_preset_and_only_sets() -> None:
    weekends = excluding("weekends", weekdays=(5, 6))
    runs = cron.occurrences_between(
        "0 9 * * *", "Europe/Amsterdam", start=z(2026, 12, 1), end=z(2026, 12, 15), seed=SEED,
        dates=weekends,
    )  # fmt: skip
    assert all(r.weekday() < 5 for r in runs) and len(runs) == 10
    only = DateFilter(only=(DateSet.of("month end", {date(2026, 12, 31): "close"}),))
    assert cron.next_after(
        "0 9 * * *", "Europe/Amsterdam", after=z(2026, 12, 1), seed=SEED, dates=only
    ) == z(2026, 12, 31, 8)
    assert only.reason(date(2026, 12, 30)) == (
        "excluded: 2026-12-30 is not in calendar 'month end'"
    )


def test_exhaustion_is_a_clear_error_not_a_hang() -> None:
    everything = excluding("all days", weekdays=tuple(range(7)))
    with pytest.raises(cron.CronError, match=r"never fires.*5 years"):
        cron.next_after("* * * * *", "UTC", after=z(2026, 1, 1), seed=SEED, dates=everything)
    assert cron.preview("* * * * *", "UTC", seed=SEED, after=z(2026, 1, 1), count=5,
                        dates=everything) == []  # fmt: skip
    plan = cron.plan_misfire(
        "* * * * *", "UTC", seed=SEED, next_run_at=z(2026, 1, 1), now=z(2026, 1, 3),
        until=z(2026, 1, 3, 0, 1), grace_s=60, policy="catch_up", catch_up_limit=3,
        dates=everything,
    )  # fmt: skip
    assert plan.fire == [] and plan.skipped_total == 0 and plan.next_run_at is None


def test_an_exclusion_just_inside_the_horizon_still_finds_the_run() -> None:
    dates = {date(2026, 1, 1) + timedelta(days=i): "closed" for i in range(5 * 365)}
    filt = DateFilter(exclude=(DateSet.of("long", dates),))
    found = cron.next_after("0 9 * * *", "UTC", after=z(2025, 12, 31, 12), seed=SEED, dates=filt)
    assert found == datetime.combine(date(2026, 1, 1) + timedelta(days=5 * 365), time(9), UTC)


def test_would_run_at_reports_the_exclusion_reason_and_runnable_neighbours() -> None:
    dates = DateFilter(exclude=(DateSet.of("NL holidays", {date(2026, 12, 25): "Christmas Day"}),))
    w = cron.would_run_at("0 9 * * *", "Europe/Amsterdam", seed=SEED, at=z(2026, 12, 25, 8),
                          dates=dates)  # fmt: skip
    assert not w.is_occurrence
    assert w.excluded == "excluded by calendar 'NL holidays': 2026-12-25 Christmas Day"
    assert w.previous == z(2026, 12, 24, 8) and w.next == z(2026, 12, 26, 8)
    ex = cron.excluded_between(
        "0 9 * * *", "Europe/Amsterdam", start=z(2026, 12, 20), end=z(2026, 12, 31), seed=SEED,
        dates=dates,
    )  # fmt: skip
    assert [(e.scheduled_for, e.reason) for e in ex] == [(z(2026, 12, 25, 8), w.excluded)]


def test_misfire_plan_neither_fires_nor_counts_excluded_occurrences() -> None:
    dates = excluding("h", "2026-12-25", "2026-12-26")
    args = {
        "seed": SEED, "next_run_at": z(2026, 12, 20), "now": z(2026, 12, 28),
        "until": z(2026, 12, 28, 0, 1), "grace_s": 60, "policy": "catch_up", "catch_up_limit": 3,
    }  # fmt: skip
    plain = cron.plan_misfire("*/10 * * * *", "Europe/Amsterdam", **args)  # type: ignore[arg-type]
    filt = cron.plan_misfire("*/10 * * * *", "Europe/Amsterdam", dates=dates, **args)  # type: ignore[arg-type]
    assert plain.skipped_total - filt.skipped_total == 2 * 144
    assert not local_days(filt.skipped + filt.fire, "Europe/Amsterdam") & {
        date(2026, 12, 25), date(2026, 12, 26),
    }  # fmt: skip


ZONES = st.sampled_from(["Europe/Amsterdam", "America/New_York", "UTC", "Australia/Lord_Howe"])
EXPRS = st.sampled_from(["0 * * * *", "*/15 * * * *", "30 2 * * *", "0 9 * * 1-5", "H H * * *"])


@settings(max_examples=40, deadline=None)
@given(
    expr=EXPRS,
    tz=ZONES,
    start=st.datetimes(min_value=datetime(2026, 1, 1), max_value=datetime(2027, 12, 1)),  # noqa: DTZ001
    excluded=st.sets(st.integers(0, 20), max_size=8),
)
def test_planners_agree_with_filtering_the_plain_list(
    expr: str, tz: str, start: datetime, excluded: set[int]
) -> None:
    begin = start.replace(tzinfo=UTC)
    end = begin + timedelta(days=20)
    first = begin.astimezone(ZoneInfo(tz)).date()
    days = {first + timedelta(days=i): "x" for i in excluded}
    dates = DateFilter(exclude=(DateSet.of("p", days),))
    plain = cron.occurrences_between(expr, tz, start=begin, end=end, seed=SEED)
    expected = [o for o in plain if o.astimezone(ZoneInfo(tz)).date() not in days]
    got = cron.occurrences_between(expr, tz, start=begin, end=end, seed=SEED, dates=dates)
    assert got == expected
    plan = cron.plan_misfire(
        expr, tz, seed=SEED, next_run_at=begin + TICK, now=end, until=end, grace_s=0,
        policy="skip", catch_up_limit=0, max_listed=5,
    ) if expected else None  # fmt: skip
    if plan is not None:
        filt = cron.plan_misfire(
            expr, tz, seed=SEED, next_run_at=begin + TICK, now=end, until=end, grace_s=0,
            policy="skip", catch_up_limit=0, max_listed=5, dates=dates,
        )  # fmt: skip
        late = [o for o in expected if o < end]
        assert filt.skipped_total == len(late)
        assert filt.skipped == late[-5:]


def test_timing_imports_as_another_package_without_django_or_calendar_sources(
    tmp_path: Path,
) -> None:
    # The Python client links this package in as `scheduler_client.timing`: no
    # absolute `dispatch.` import, and none of Django, holidays or icalendar.
    shutil.copytree(Path(cron.__file__).parent, tmp_path / "client_timing")
    code = (
        "import sys\n"
        "for name in ('django', 'holidays', 'icalendar', 'dispatch'):\n"
        "    sys.modules[name] = None\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "from client_timing import calendars, cron\n"
        "print(cron.DateFilter is calendars.DateFilter)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"
