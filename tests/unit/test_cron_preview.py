"""Previews with DST notes and jitter, and would_run_at explanations."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from itertools import pairwise

import pytest

from dispatch.timing import cron
from tests.support.instants import z

SEED = "2c4e6a8b-1d3f-4b5c-9e7a-0f1e2d3c4b5a"


def notes(expr: str, tz: str, after: datetime, count: int) -> list[tuple[str, str | None]]:
    out = cron.preview(expr, tz, seed=SEED, after=after, count=count)
    return [(o.scheduled_for.isoformat(), o.note) for o in out]


# ----------------------------------------------------------------- notes


def test_gap_note_names_the_missing_time_and_where_it_runs() -> None:
    assert notes("30 2 * * *", "Europe/Amsterdam", z(2026, 3, 28, 12), 2) == [
        (
            "2026-03-29T01:00:00+00:00",
            "02:30 does not exist on 2026-03-29 in Europe/Amsterdam; runs at 03:00 CEST",
        ),
        ("2026-03-30T00:30:00+00:00", None),
    ]


def test_gap_note_on_a_half_hour_shift() -> None:
    assert notes("15 2 * * *", "Australia/Lord_Howe", z(2026, 10, 3), 1) == [
        (
            "2026-10-03T15:30:00+00:00",
            "02:15 does not exist on 2026-10-04 in Australia/Lord_Howe; runs at 02:30 +11",
        )
    ]


def test_gap_note_mentions_a_merge_with_the_regular_run_after_the_gap() -> None:
    out = notes("0 * * * *", "Europe/Amsterdam", z(2026, 3, 29, 0, 30), 1)
    assert out == [
        (
            "2026-03-29T01:00:00+00:00",
            "02:00 does not exist on 2026-03-29 in Europe/Amsterdam; runs at 03:00 CEST,"
            " together with the regular 03:00 run",
        )
    ]


def test_gap_note_lists_several_missing_times() -> None:
    out = notes("*/15 2 * * *", "Europe/Amsterdam", z(2026, 3, 29), 1)
    assert out[0][1] == (
        "02:00, 02:15, 02:30 and 02:45 do not exist on 2026-03-29 in Europe/Amsterdam;"
        " runs once, at 03:00 CEST"
    )


def test_gap_note_summarises_a_whole_missing_hour() -> None:
    out = notes("* 2 * * *", "Europe/Amsterdam", z(2026, 3, 29), 1)
    assert out[0][1] == (
        "02:00 to 02:59 (60 times) do not exist on 2026-03-29 in Europe/Amsterdam;"
        " runs once, at 03:00 CEST"
    )


def test_fold_note_for_a_fixed_hour_says_it_runs_once_at_the_first() -> None:
    assert notes("30 2 * * *", "Europe/Amsterdam", z(2026, 10, 24, 12), 2) == [
        (
            "2026-10-25T00:30:00+00:00",
            "02:30 occurs twice on 2026-10-25 in Europe/Amsterdam; runs once, at the first (CEST)",
        ),
        ("2026-10-26T01:30:00+00:00", None),
    ]
    assert notes("30 1 * * *", "America/New_York", z(2026, 10, 31, 12), 1) == [
        (
            "2026-11-01T05:30:00+00:00",
            "01:30 occurs twice on 2026-11-01 in America/New_York; runs once, at the first (EDT)",
        )
    ]


def test_fold_note_for_a_wildcard_hour_is_on_both_runs() -> None:
    note = "02:30 occurs twice on 2026-10-25 in Europe/Amsterdam; runs in both (CEST and CET)"
    assert notes("30 * * * *", "Europe/Amsterdam", z(2026, 10, 24, 23, 45), 3) == [
        ("2026-10-25T00:30:00+00:00", note),
        ("2026-10-25T01:30:00+00:00", note),
        ("2026-10-25T02:30:00+00:00", None),
    ]


def test_fold_note_in_a_zone_with_numeric_abbreviations() -> None:
    assert notes("30 23 * * *", "America/Santiago", z(2026, 4, 4, 12), 1) == [
        (
            "2026-04-05T02:30:00+00:00",
            "23:30 occurs twice on 2026-04-04 in America/Santiago; runs once, at the first (-03)",
        )
    ]


def test_ordinary_days_have_no_note() -> None:
    out = cron.preview("0 9 * * *", "Europe/Amsterdam", seed=SEED, after=z(2026, 6, 1), count=30)
    assert all(o.note is None for o in out)


# ----------------------------------------------------------------- count and bounds


def test_preview_of_1000_per_minute_runs_is_fast_and_increasing() -> None:
    started = time.perf_counter()
    out = cron.preview(
        "* * * * *", "Europe/Amsterdam", seed=SEED, after=z(2026, 10, 24, 23), count=1000,
        jitter_s=30,
    )  # fmt: skip
    elapsed = time.perf_counter() - started
    assert len(out) == 1000
    assert all(a.scheduled_for < b.scheduled_for for a, b in pairwise(out))
    assert out[0].scheduled_for == z(2026, 10, 24, 23, 1)
    assert out[-1].scheduled_for == z(2026, 10, 24, 23, 1) + timedelta(minutes=999)
    assert elapsed < 1.0


def test_preview_is_strictly_after_the_given_instant() -> None:
    out = cron.preview("0 * * * *", "UTC", seed=SEED, after=z(2026, 1, 1, 5), count=1)
    assert out[0].scheduled_for == z(2026, 1, 1, 6)


def test_preview_of_zero_is_empty() -> None:
    assert cron.preview("* * * * *", "UTC", seed=SEED, after=z(2026, 1, 1), count=0) == []


@pytest.mark.parametrize(("count", "jitter"), [(1001, 0), (-1, 0), (5, -1)])
def test_preview_rejects_bad_count_or_jitter(count: int, jitter: int) -> None:
    with pytest.raises(cron.CronError):
        cron.preview(
            "* * * * *", "UTC", seed=SEED, after=z(2026, 1, 1), count=count, jitter_s=jitter
        )


# ----------------------------------------------------------------- jitter


def test_jitter_delays_due_at_but_keeps_scheduled_for_nominal() -> None:
    def run() -> list[cron.Occurrence]:
        return cron.preview(
            "*/5 * * * *", "UTC", seed=SEED, after=z(2026, 1, 1), count=200, jitter_s=120
        )

    out = run()
    delays = [(o.due_at - o.scheduled_for).total_seconds() for o in out]
    assert all(0 <= d <= 120 for d in delays)
    assert all(o.scheduled_for.second == 0 and o.scheduled_for.minute % 5 == 0 for o in out)
    assert len(set(delays)) > 50  # spread, not one shared offset
    assert run() == out


def test_jitter_is_deterministic_per_schedule_and_occurrence() -> None:
    at = z(2026, 7, 1, 12)
    value = cron.jitter_seconds(seed=SEED, scheduled_for=at, jitter_s=3600)
    assert cron.jitter_seconds(seed=SEED, scheduled_for=at, jitter_s=3600) == value
    same_instant = at.astimezone(cron.get_zone("Asia/Kolkata"))
    assert cron.jitter_seconds(seed=SEED, scheduled_for=same_instant, jitter_s=3600) == value
    others = {
        cron.jitter_seconds(seed=f"seed-{i}", scheduled_for=at, jitter_s=3600) for i in range(50)
    }
    assert len(others) > 40


def test_zero_jitter_is_zero_and_negative_jitter_is_rejected() -> None:
    assert cron.jitter_seconds(seed=SEED, scheduled_for=z(2026, 1, 1), jitter_s=0) == 0
    with pytest.raises(cron.CronError, match="jitter must be zero or more seconds"):
        cron.jitter_seconds(seed=SEED, scheduled_for=z(2026, 1, 1), jitter_s=-5)


# ----------------------------------------------------------------- would_run_at


def test_would_run_at_an_occurrence_floors_to_the_minute() -> None:
    w = cron.would_run_at("*/15 * * * *", "UTC", seed=SEED, at=z(2026, 5, 4, 9, 15, 42))
    assert w == cron.WouldRun(
        at=z(2026, 5, 4, 9, 15),
        is_occurrence=True,
        scheduled_for=z(2026, 5, 4, 9, 15),
        previous=z(2026, 5, 4, 9, 0),
        next=z(2026, 5, 4, 9, 30),
        note=None,
    )


def test_would_run_at_a_non_occurrence_gives_neighbours() -> None:
    w = cron.would_run_at("0 9 * * MON-FRI", "Europe/Amsterdam", seed=SEED, at=z(2026, 5, 9, 7))
    assert not w.is_occurrence
    assert w.scheduled_for is None
    assert w.previous == z(2026, 5, 8, 7)  # Friday 09:00 CEST
    assert w.next == z(2026, 5, 11, 7)  # Monday
    assert w.note is None and w.dst is None


def test_would_run_at_just_after_a_gap_explains_the_shift() -> None:
    # 01:30Z is 03:30 CEST: someone expecting "02:30 + 1 hour" asks why nothing ran.
    w = cron.would_run_at("30 2 * * *", "Europe/Amsterdam", seed=SEED, at=z(2026, 3, 29, 1, 30))
    assert not w.is_occurrence
    assert w.previous == z(2026, 3, 29, 1, 0)
    assert w.note == "02:30 did not exist on 2026-03-29 in Europe/Amsterdam; it ran at 03:00 CEST"
    assert w.dst == "gap"


def test_would_run_at_the_gap_end_is_an_occurrence_with_the_note() -> None:
    w = cron.would_run_at("30 2 * * *", "Europe/Amsterdam", seed=SEED, at=z(2026, 3, 29, 1, 0))
    assert w.is_occurrence
    assert w.note == "02:30 did not exist on 2026-03-29 in Europe/Amsterdam; it ran at 03:00 CEST"
    assert w.dst == "gap"


def test_would_run_at_an_hour_after_the_gap_has_no_note() -> None:
    w = cron.would_run_at("30 2 * * *", "Europe/Amsterdam", seed=SEED, at=z(2026, 3, 29, 2, 0))
    assert w.note is None and w.dst is None


def test_would_run_at_the_second_copy_of_a_fixed_hour_explains_it_ran_once() -> None:
    w = cron.would_run_at("30 2 * * *", "Europe/Amsterdam", seed=SEED, at=z(2026, 10, 25, 1, 30))
    assert not w.is_occurrence
    assert w.previous == z(2026, 10, 25, 0, 30)
    assert w.note == (
        "02:30 occurred twice on 2026-10-25 in Europe/Amsterdam; it ran once, at the first (CEST)"
    )
    assert w.dst == "fold"


def test_would_run_at_the_second_copy_of_a_wildcard_hour_is_an_occurrence() -> None:
    w = cron.would_run_at("30 * * * *", "Europe/Amsterdam", seed=SEED, at=z(2026, 10, 25, 1, 30))
    assert w.is_occurrence
    assert w.previous == z(2026, 10, 25, 0, 30)
    assert w.next == z(2026, 10, 25, 2, 30)
    assert w.note == (
        "02:30 occurred twice on 2026-10-25 in Europe/Amsterdam; it ran in both (CEST and CET)"
    )
    assert w.dst == "fold"


def test_would_run_at_looks_back_at_most_about_400_days() -> None:
    w = cron.would_run_at("0 0 29 2 *", "UTC", seed=SEED, at=z(2031, 1, 1))
    assert w.previous is None  # 2028-02-29 is further back than 400 days
    assert w.next == z(2032, 2, 29)
    w = cron.would_run_at("0 0 29 2 *", "UTC", seed=SEED, at=z(2029, 1, 1))
    assert w.previous == z(2028, 2, 29)
