"""Misfire planning: which late occurrences fire, which are skipped, and counting
skipped ones exactly without listing them."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest

from dispatch.timing import cron
from tests.support.instants import z

SEED = "9d8c7b6a-5f4e-4d3c-8b2a-1f0e9d8c7b6a"
TICK = timedelta(microseconds=1)


def quarter_hours(start: datetime, end: datetime) -> list[datetime]:
    out, t = [], start
    while t <= end:
        out.append(t)
        t += timedelta(minutes=15)
    return out


# A `*/15` schedule whose beat was down from 09:00 to 12:00:30 (a 3-hour outage):
# 09:00 ... 11:45 are late (12 of them), 12:00 is still within the 60 s grace.
OUTAGE = {
    "next_run_at": z(2026, 5, 4, 9, 0),
    "now": z(2026, 5, 4, 12, 0, 30),
    "until": z(2026, 5, 4, 12, 5, 30),
    "grace_s": 60,
}
LATE = quarter_hours(z(2026, 5, 4, 9, 0), z(2026, 5, 4, 11, 45))


def plan(policy: str, *, limit: int = 10, **kw: object) -> cron.MisfirePlan:
    args: dict[str, object] = {**OUTAGE, **kw}
    return cron.plan_misfire(
        "*/15 * * * *", "Europe/Amsterdam", seed=SEED, policy=policy, catch_up_limit=limit,
        **args,  # type: ignore[arg-type]
    )  # fmt: skip


def test_skip_fires_only_the_on_time_occurrence_after_an_outage() -> None:
    p = plan("skip")
    assert len(LATE) == 12
    assert p.fire == [z(2026, 5, 4, 12, 0)]
    assert p.skipped == LATE
    assert p.skipped_total == 12
    assert p.next_run_at == z(2026, 5, 4, 12, 15)


def test_run_once_fires_the_latest_late_occurrence_and_skips_the_rest() -> None:
    p = plan("run_once")
    assert p.fire == [z(2026, 5, 4, 11, 45), z(2026, 5, 4, 12, 0)]
    assert p.skipped == LATE[:-1]
    assert p.skipped_total == 11


def test_catch_up_fires_the_latest_n_late_occurrences_and_skips_the_earlier_ones() -> None:
    p = plan("catch_up", limit=3)
    assert p.fire == [*LATE[-3:], z(2026, 5, 4, 12, 0)]
    assert p.skipped == LATE[:9]
    assert p.skipped_total == 9


def test_catch_up_with_a_limit_above_the_backlog_fires_everything() -> None:
    p = plan("catch_up", limit=100)
    assert p.fire == [*LATE, z(2026, 5, 4, 12, 0)]
    assert p.skipped == []
    assert p.skipped_total == 0


def test_catch_up_with_limit_zero_behaves_like_skip() -> None:
    assert plan("catch_up", limit=0) == plan("skip")


def test_occurrence_exactly_at_now_minus_grace_is_on_time() -> None:
    p = plan("skip", now=z(2026, 5, 4, 12, 1), grace_s=60)
    assert p.fire == [z(2026, 5, 4, 12, 0)]
    p = plan("skip", now=z(2026, 5, 4, 12, 1), grace_s=59)
    assert p.fire == []
    assert p.skipped[-1] == z(2026, 5, 4, 12, 0)
    assert p.skipped_total == 13


def test_a_grace_longer_than_the_outage_makes_nothing_late() -> None:
    p = plan("skip", grace_s=4 * 3600)
    assert p.fire == [*LATE, z(2026, 5, 4, 12, 0)]
    assert p.skipped_total == 0


def test_zero_grace_makes_everything_before_now_late() -> None:
    p = plan("skip", now=z(2026, 5, 4, 12, 0), grace_s=0)
    assert p.fire == [z(2026, 5, 4, 12, 0)]
    assert p.skipped_total == 12


def test_next_run_at_itself_is_considered() -> None:
    p = plan("catch_up", limit=100, next_run_at=z(2026, 5, 4, 11, 45))
    assert p.fire == [z(2026, 5, 4, 11, 45), z(2026, 5, 4, 12, 0)]


def test_nothing_is_late_when_now_is_before_next_run_at() -> None:
    p = plan(
        "skip",
        next_run_at=z(2026, 5, 4, 12, 0),
        now=z(2026, 5, 4, 11, 58),
        until=z(2026, 5, 4, 12, 30),
    )
    assert p.fire == [z(2026, 5, 4, 12, 0), z(2026, 5, 4, 12, 15), z(2026, 5, 4, 12, 30)]
    assert p.skipped_total == 0
    assert p.next_run_at == z(2026, 5, 4, 12, 45)


def test_skipped_list_is_capped_to_the_most_recent_but_the_total_is_complete() -> None:
    p = plan("skip", max_listed=5)
    assert p.skipped == LATE[-5:]
    assert p.skipped_total == 12
    p = plan("catch_up", limit=3, max_listed=2)
    assert p.skipped == LATE[7:9]
    assert p.skipped_total == 9


def test_max_listed_zero_lists_nothing() -> None:
    p = plan("skip", max_listed=0)
    assert p.skipped == []
    assert p.skipped_total == 12


def test_per_minute_schedule_down_for_60_days_is_counted_exactly_and_fast() -> None:
    started = time.perf_counter()
    p = cron.plan_misfire(
        "* * * * *", "Europe/Amsterdam", seed=SEED,
        next_run_at=z(2026, 9, 1), now=z(2026, 10, 31), until=z(2026, 10, 31, 0, 1),
        grace_s=60, policy="catch_up", catch_up_limit=3,
    )  # fmt: skip
    elapsed = time.perf_counter() - started
    # Every UTC minute from 1 Sep 00:00 to 30 Oct 23:58 is late (the fall-back
    # hour on 25 Oct repeats wall-clock minutes, not instants).
    late = 60 * 24 * 60 - 1
    assert p.skipped_total == late - 3
    assert len(p.skipped) == 1000
    assert p.skipped[-1] == z(2026, 10, 30, 23, 55)
    assert p.skipped[0] == z(2026, 10, 30, 23, 55) - timedelta(minutes=999)
    assert p.fire == [
        z(2026, 10, 30, 23, 56), z(2026, 10, 30, 23, 57), z(2026, 10, 30, 23, 58),
        z(2026, 10, 30, 23, 59), z(2026, 10, 31, 0, 0), z(2026, 10, 31, 0, 1),
    ]  # fmt: skip
    assert p.next_run_at == z(2026, 10, 31, 0, 2)
    assert elapsed < 2.0


def test_hourly_for_a_whole_local_year_counts_8760_despite_dst() -> None:
    started = time.perf_counter()
    p = cron.plan_misfire(
        "0 * * * *", "Europe/Amsterdam", seed=SEED,
        next_run_at=z(2025, 12, 31, 23), now=z(2026, 12, 31, 23), until=z(2026, 12, 31, 23),
        grace_s=0, policy="skip", catch_up_limit=0, max_listed=10,
    )  # fmt: skip
    assert p.skipped_total == 8760
    assert p.fire == [z(2026, 12, 31, 23)]
    assert time.perf_counter() - started < 2.0


@pytest.mark.parametrize(
    ("expr", "tz", "start"),
    [
        ("*/7 * * * *", "Europe/Amsterdam", z(2026, 3, 20)),
        ("*/7 * * * *", "Europe/Amsterdam", z(2026, 10, 18)),
        ("30 * * * *", "America/New_York", z(2026, 10, 28)),
        ("*/10 1-3 * * *", "Australia/Lord_Howe", z(2026, 4, 1)),
        ("0,15 * * * *", "Australia/Lord_Howe", z(2026, 9, 28)),
        ("5 * * * *", "America/Santiago", z(2026, 4, 1)),
        ("*/20 0 * * *", "America/Santiago", z(2026, 9, 1)),
        ("15 23 * * *", "Asia/Beirut", z(2026, 10, 20)),
        ("0 0 * * *", "America/Sao_Paulo", z(2018, 10, 30)),
    ],
)
def test_counted_total_equals_the_listed_occurrences_across_dst(
    expr: str, tz: str, start: datetime
) -> None:
    end = start + timedelta(days=12)
    listed = cron.occurrences_between(expr, tz, start=start - TICK, end=end - TICK, seed=SEED)
    p = cron.plan_misfire(
        expr, tz, seed=SEED, next_run_at=start, now=end, until=end,
        grace_s=0, policy="skip", catch_up_limit=0, max_listed=10**6,
    )  # fmt: skip
    assert p.skipped_total == len(listed)
    assert p.skipped == listed


def test_run_once_after_a_long_outage_fires_the_latest_late_occurrence() -> None:
    p = cron.plan_misfire(
        "0 3 * * *", "Europe/Amsterdam", seed=SEED,
        next_run_at=z(2024, 1, 1, 2), now=z(2026, 6, 1, 12), until=z(2026, 6, 1, 12, 5),
        grace_s=300, policy="run_once", catch_up_limit=10,
    )  # fmt: skip
    assert p.fire == [z(2026, 6, 1, 1, 0)]
    late = 366 + 365 + 151 + 1  # 2024, 2025, Jan-May 2026, and 1 June itself
    assert p.skipped_total == late - 1
    assert p.skipped[-1] == z(2026, 5, 31, 1, 0)
    assert p.next_run_at == z(2026, 6, 2, 1, 0)


def test_plan_never_moves_next_run_at_backwards() -> None:
    p = plan("skip", next_run_at=z(2026, 5, 4, 13, 0), until=z(2026, 5, 4, 12, 5))
    assert p.fire == []
    assert p.next_run_at == z(2026, 5, 4, 13, 0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"policy": "later"}, "unknown misfire policy 'later' (use skip, run_once or catch_up)"),
        ({"policy": "skip", "grace_s": -1}, "grace must be zero or more seconds"),
        ({"policy": "catch_up", "limit": -1}, "catch-up limit must be zero or more"),
        ({"policy": "skip", "max_listed": -1}, "max_listed must be zero or more"),
    ],
)
def test_bad_plan_arguments_are_cron_errors(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(cron.CronError) as caught:
        plan(**kwargs)  # type: ignore[arg-type]
    assert caught.value.message == message


def test_naive_now_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        plan("skip", now=datetime(2026, 5, 4, 12))  # noqa: DTZ001
