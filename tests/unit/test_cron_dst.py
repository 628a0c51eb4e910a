"""DST behaviour: gaps run at the end of the gap, folds run once (fixed hour) or
twice (wildcard hour), equal instants fire once, and zone rules follow the date."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest

from dispatch.timing import cron
from tests.support.instants import z

SEED = "6a1f3c2e-7d4b-4e8a-9c05-1b2d3e4f5a6b"
TICK = timedelta(microseconds=1)


def local_day(expr: str, tz: str, day: str) -> list[datetime]:
    """Occurrences from local midnight of `day` to local midnight of the next day."""
    zone = ZoneInfo(tz)
    d = date.fromisoformat(day)
    start = datetime.combine(d, time(), tzinfo=zone).astimezone(UTC)
    end = datetime.combine(d + timedelta(days=1), time(), tzinfo=zone).astimezone(UTC)
    return cron.occurrences_between(expr, tz, start=start - TICK, end=end - TICK, seed=SEED)


def strictly_increasing(values: list[datetime]) -> bool:
    return all(a < b for a, b in pairwise(values))


# ----------------------------------------------------------------- whole-day counts


@pytest.mark.parametrize(
    ("tz", "day"), [("Europe/Amsterdam", "2026-03-29"), ("America/New_York", "2026-03-08")]
)
def test_hourly_runs_23_times_on_a_spring_forward_day(tz: str, day: str) -> None:
    runs = local_day("0 * * * *", tz, day)
    assert len(runs) == 23
    assert strictly_increasing(runs)


@pytest.mark.parametrize(
    ("tz", "day"), [("Europe/Amsterdam", "2026-10-25"), ("America/New_York", "2026-11-01")]
)
def test_hourly_runs_25_times_on_a_fall_back_day(tz: str, day: str) -> None:
    runs = local_day("0 * * * *", tz, day)
    assert len(runs) == 25
    assert strictly_increasing(runs)


@pytest.mark.parametrize(
    ("tz", "day"), [("Europe/Amsterdam", "2026-07-01"), ("America/New_York", "2026-01-15")]
)
def test_hourly_runs_24_times_on_an_ordinary_day(tz: str, day: str) -> None:
    assert len(local_day("0 * * * *", tz, day)) == 24


# ----------------------------------------------------------------- Europe/Amsterdam


def test_fixed_time_in_the_spring_gap_runs_at_the_end_of_the_gap_in_amsterdam() -> None:
    assert local_day("30 2 * * *", "Europe/Amsterdam", "2026-03-29") == [z(2026, 3, 29, 1, 0)]


def test_fixed_hour_runs_once_on_autumn_fold_in_amsterdam() -> None:
    assert local_day("30 2 * * *", "Europe/Amsterdam", "2026-10-25") == [z(2026, 10, 25, 0, 30)]


def test_fixed_hour_with_minute_step_runs_only_in_the_first_copy_of_the_fold() -> None:
    assert local_day("*/15 2 * * *", "Europe/Amsterdam", "2026-10-25") == [
        z(2026, 10, 25, 0, 0), z(2026, 10, 25, 0, 15), z(2026, 10, 25, 0, 30),
        z(2026, 10, 25, 0, 45),
    ]  # fmt: skip


def test_all_gap_times_of_a_fixed_hour_collapse_into_one_run() -> None:
    assert local_day("*/15 2 * * *", "Europe/Amsterdam", "2026-03-29") == [z(2026, 3, 29, 1, 0)]


def test_hour_step_runs_in_both_copies_of_the_repeated_hour() -> None:
    runs = local_day("0 */2 * * *", "Europe/Amsterdam", "2026-10-25")
    assert len(runs) == 13
    assert z(2026, 10, 25, 0, 0) in runs  # 02:00 CEST
    assert z(2026, 10, 25, 1, 0) in runs  # 02:00 CET


def test_hour_step_in_the_spring_gap_moves_to_the_end_of_the_gap() -> None:
    runs = local_day("0 */2 * * *", "Europe/Amsterdam", "2026-03-29")
    assert len(runs) == 12
    assert runs[:3] == [z(2026, 3, 28, 23, 0), z(2026, 3, 29, 1, 0), z(2026, 3, 29, 2, 0)]


def test_half_hourly_on_the_spring_day_merges_gap_times_with_the_hour_after() -> None:
    runs = local_day("*/30 * * * *", "Europe/Amsterdam", "2026-03-29")
    assert len(runs) == 46  # 23 real hours; 02:00 and 02:30 both become 03:00 CEST
    assert runs.count(z(2026, 3, 29, 1, 0)) == 1


def test_repeated_hour_instants_interleave_and_come_out_in_utc_order() -> None:
    runs = cron.occurrences_between(
        "*/20 * * * *", "Europe/Amsterdam",
        start=z(2026, 10, 24, 23, 50), end=z(2026, 10, 25, 2, 0), seed=SEED,
    )  # fmt: skip
    assert runs == [
        z(2026, 10, 25, 0, 0), z(2026, 10, 25, 0, 20), z(2026, 10, 25, 0, 40),  # 02:xx CEST
        z(2026, 10, 25, 1, 0), z(2026, 10, 25, 1, 20), z(2026, 10, 25, 1, 40),  # 02:xx CET
        z(2026, 10, 25, 2, 0),  # 03:00 CET
    ]  # fmt: skip


def test_next_after_inside_the_fold_finds_the_second_copy_of_an_earlier_wall_time() -> None:
    # 00:45Z is 02:45 CEST; 02:00 CET (01:00Z) is later in time but earlier on the wall.
    after = z(2026, 10, 25, 0, 45)
    assert cron.next_after("0 * * * *", "Europe/Amsterdam", after=after, seed=SEED) == z(
        2026, 10, 25, 1, 0
    )


def test_next_after_inside_the_fold_skips_the_second_copy_for_a_fixed_hour() -> None:
    after = z(2026, 10, 25, 0, 45)
    assert cron.next_after("30 2 * * *", "Europe/Amsterdam", after=after, seed=SEED) == z(
        2026, 10, 26, 1, 30
    )


def test_next_after_from_the_second_copy_of_the_fold_continues_in_it() -> None:
    after = z(2026, 10, 25, 1, 5)  # 02:05 CET
    runs = [cron.next_after("*/20 * * * *", "Europe/Amsterdam", after=after, seed=SEED)]
    assert runs == [z(2026, 10, 25, 1, 20)]


def test_next_after_the_end_of_a_gap_is_strictly_after_it() -> None:
    after = z(2026, 3, 29, 1, 0)
    assert cron.next_after("30 2 * * *", "Europe/Amsterdam", after=after, seed=SEED) == z(
        2026, 3, 30, 0, 30
    )


# ----------------------------------------------------------------- America/New_York


def test_fixed_hour_runs_once_on_autumn_fold_in_new_york() -> None:
    assert local_day("30 1 * * *", "America/New_York", "2026-11-01") == [z(2026, 11, 1, 5, 30)]


def test_fixed_time_in_the_spring_gap_runs_at_the_end_of_the_gap_in_new_york() -> None:
    assert local_day("30 2 * * *", "America/New_York", "2026-03-08") == [z(2026, 3, 8, 7, 0)]


def test_wildcard_hour_runs_in_both_copies_of_the_repeated_hour_in_new_york() -> None:
    runs = local_day("30 * * * *", "America/New_York", "2026-11-01")
    assert len(runs) == 25
    assert z(2026, 11, 1, 5, 30) in runs  # 01:30 EDT
    assert z(2026, 11, 1, 6, 30) in runs  # 01:30 EST


def test_weekday_step_schedule_keeps_local_time_across_the_change_in_new_york() -> None:
    runs = cron.occurrences_between(
        "0 9 * * 1-5", "America/New_York",
        start=z(2026, 3, 5), end=z(2026, 3, 11), seed=SEED,
    )  # fmt: skip
    assert runs == [z(2026, 3, 5, 14), z(2026, 3, 6, 14), z(2026, 3, 9, 13), z(2026, 3, 10, 13)]


# ----------------------------------------------------------------- Australia/Lord_Howe


def test_lord_howe_half_hour_gap_moves_the_run_to_0230() -> None:
    # 2026-10-04: 02:00 +1030 becomes 02:30 +11 (15:30Z on the 3rd).
    assert local_day("15 2 * * *", "Australia/Lord_Howe", "2026-10-04") == [z(2026, 10, 3, 15, 30)]


def test_lord_howe_hourly_on_the_spring_day_runs_24_times() -> None:
    runs = local_day("0 * * * *", "Australia/Lord_Howe", "2026-10-04")
    assert len(runs) == 24  # 02:00 does not exist and runs at 02:30 instead
    assert z(2026, 10, 3, 15, 30) in runs


def test_lord_howe_fixed_hour_runs_once_in_the_half_hour_fold() -> None:
    # 2026-04-05: 02:00 +11 goes back to 01:30 +1030, repeating 01:30-01:59.
    assert local_day("45 1 * * *", "Australia/Lord_Howe", "2026-04-05") == [z(2026, 4, 4, 14, 45)]


def test_lord_howe_wildcard_hour_runs_in_both_copies_of_the_half_hour_fold() -> None:
    runs = local_day("45 * * * *", "Australia/Lord_Howe", "2026-04-05")
    assert len(runs) == 25
    assert z(2026, 4, 4, 14, 45) in runs
    assert z(2026, 4, 4, 15, 15) in runs


def test_lord_howe_ten_minute_step_counts_a_day_of_24_and_a_half_hours() -> None:
    runs = local_day("*/10 * * * *", "Australia/Lord_Howe", "2026-04-05")
    assert len(runs) == 147
    assert strictly_increasing(runs)


# ----------------------------------------------------------------- midnight transitions


def test_santiago_midnight_that_does_not_exist_runs_at_one_am() -> None:
    assert local_day("0 0 * * *", "America/Santiago", "2026-09-06") == [z(2026, 9, 6, 4, 0)]
    assert len(local_day("0 * * * *", "America/Santiago", "2026-09-06")) == 23


def test_santiago_repeated_late_evening_runs_once_for_a_fixed_hour() -> None:
    # 2026-04-05 00:00 -03 goes back to 2026-04-04 23:00 -04.
    assert local_day("30 23 * * *", "America/Santiago", "2026-04-04") == [z(2026, 4, 5, 2, 30)]


def test_santiago_repeated_late_evening_runs_twice_for_a_wildcard_hour() -> None:
    runs = local_day("30 * * * *", "America/Santiago", "2026-04-04")
    assert len(runs) == 25
    assert runs[-2:] == [z(2026, 4, 5, 2, 30), z(2026, 4, 5, 3, 30)]


def test_santiago_daily_midnight_runs_once_a_day_across_both_changes() -> None:
    for start in (z(2026, 4, 1), z(2026, 9, 2)):
        runs = cron.occurrences_between(
            "0 0 * * *", "America/Santiago", start=start, end=start + timedelta(days=8), seed=SEED
        )
        assert len(runs) == 8
        local_dates = [r.astimezone(ZoneInfo("America/Santiago")).date() for r in runs]
        assert len(set(local_dates)) == 8


def test_beirut_midnight_gap_and_late_evening_fold() -> None:
    assert local_day("0 0 * * *", "Asia/Beirut", "2026-03-29") == [z(2026, 3, 28, 22, 0)]
    assert len(local_day("0 * * * *", "Asia/Beirut", "2026-10-24")) == 25
    assert local_day("30 23 * * *", "Asia/Beirut", "2026-10-24") == [z(2026, 10, 24, 20, 30)]


def test_havana_midnight_gap_runs_at_one_am() -> None:
    assert local_day("0 0 * * *", "America/Havana", "2026-03-08") == [z(2026, 3, 8, 5, 0)]


# ----------------------------------------------------------------- zone without DST


def test_kolkata_has_no_dst_so_every_day_is_the_same() -> None:
    runs = cron.occurrences_between(
        "30 2 * * *", "Asia/Kolkata", start=z(2026, 1, 1), end=z(2027, 1, 1), seed=SEED
    )
    assert len(runs) == 365
    assert {(r.hour, r.minute) for r in runs} == {(21, 0)}
    for day in ("2026-03-29", "2026-10-25", "2026-03-08", "2026-11-01"):
        assert len(local_day("0 * * * *", "Asia/Kolkata", day)) == 24


def test_kolkata_preview_has_no_dst_notes() -> None:
    out = cron.preview("*/30 * * * *", "Asia/Kolkata", seed=SEED, after=z(2026, 1, 1), count=1000)
    assert all(o.note is None for o in out)


# ----------------------------------------------------------------- rules that changed


def test_sao_paulo_used_dst_in_2018_but_not_after_2019() -> None:
    assert local_day("0 0 * * *", "America/Sao_Paulo", "2018-11-04") == [z(2018, 11, 4, 3, 0)]
    assert len(local_day("0 * * * *", "America/Sao_Paulo", "2018-11-04")) == 23
    # The same Sunday under the old rule, after DST was abolished: an ordinary day.
    assert local_day("0 0 * * *", "America/Sao_Paulo", "2019-11-03") == [z(2019, 11, 3, 3, 0)]
    assert len(local_day("0 * * * *", "America/Sao_Paulo", "2019-11-03")) == 24


def test_sao_paulo_last_fall_back_repeats_an_hour_once_and_never_again() -> None:
    assert len(local_day("0 * * * *", "America/Sao_Paulo", "2019-02-16")) == 25
    assert local_day("30 23 * * *", "America/Sao_Paulo", "2019-02-16") == [z(2019, 2, 17, 1, 30)]
    assert len(local_day("0 * * * *", "America/Sao_Paulo", "2020-02-15")) == 24


def test_istanbul_changed_clocks_in_2015_but_not_after_2016() -> None:
    assert len(local_day("0 * * * *", "Europe/Istanbul", "2015-11-08")) == 25
    assert len(local_day("0 * * * *", "Europe/Istanbul", "2016-10-30")) == 24
    assert local_day("30 3 * * *", "Europe/Istanbul", "2016-03-27") == [z(2016, 3, 27, 1, 0)]


def test_tehran_changed_clocks_in_2022_but_not_in_2023() -> None:
    assert len(local_day("0 * * * *", "Asia/Tehran", "2022-03-22")) == 23
    assert len(local_day("0 * * * *", "Asia/Tehran", "2022-09-21")) == 25
    assert len(local_day("0 * * * *", "Asia/Tehran", "2023-03-22")) == 24
    assert len(local_day("0 * * * *", "Asia/Tehran", "2023-09-21")) == 24
    assert local_day("0 0 * * *", "Asia/Tehran", "2023-03-22") == [z(2023, 3, 21, 20, 30)]


# ----------------------------------------------------------------- local view


def test_preview_local_times_carry_the_right_fold() -> None:
    out = cron.preview(
        "30 * * * *", "Europe/Amsterdam", seed=SEED, after=z(2026, 10, 25, 0), count=2
    )
    assert [o.local.isoformat() for o in out] == [
        "2026-10-25T02:30:00+02:00",
        "2026-10-25T02:30:00+01:00",
    ]
    assert [o.local.fold for o in out] == [0, 1]


# --- the next clock change and what it does to a schedule (the form's preview) ----------


@pytest.mark.parametrize(
    ("tz", "after", "expected"),
    [
        (
            "Europe/Amsterdam",
            datetime(2026, 12, 6, tzinfo=UTC),
            datetime(2027, 3, 28, 1, 0, tzinfo=UTC),
        ),
        (
            "Europe/Amsterdam",
            datetime(2027, 3, 28, 1, 0, tzinfo=UTC),
            datetime(2027, 10, 31, 1, 0, tzinfo=UTC),
        ),
        (
            "Australia/Sydney",
            datetime(2026, 12, 6, tzinfo=UTC),
            datetime(2027, 4, 3, 16, 0, tzinfo=UTC),
        ),
        (
            "Australia/Lord_Howe",
            datetime(2026, 12, 6, tzinfo=UTC),
            datetime(2027, 4, 3, 15, 0, tzinfo=UTC),
        ),
    ],
)
def test_next_transition_is_the_first_instant_on_the_new_offset(
    tz: str, after: datetime, expected: datetime
) -> None:
    zone = ZoneInfo(tz)
    found = cron.next_transition(zone, after)
    assert found == expected
    assert (found - timedelta(seconds=1)).astimezone(zone).utcoffset() != found.astimezone(
        zone
    ).utcoffset()


def test_no_transition_in_a_zone_that_keeps_its_clocks_or_beyond_the_horizon() -> None:
    assert cron.next_transition(ZoneInfo("Asia/Tokyo"), datetime(2026, 12, 6, tzinfo=UTC)) is None
    assert (
        cron.next_transition(
            ZoneInfo("Europe/Amsterdam"),
            datetime(2026, 12, 6, tzinfo=UTC),
            within=timedelta(days=30),
        )
        is None
    )
    assert (
        cron.transition_effect(
            "30 2 * * *", "UTC", seed=SEED, after=datetime(2026, 12, 6, tzinfo=UTC)
        )
        is None
    )


@pytest.mark.parametrize(
    ("expr", "after"),
    [
        ("30 2 * * *", datetime(2026, 12, 6, tzinfo=UTC)),  # a gap
        ("30 2 * * *", datetime(2027, 6, 1, tzinfo=UTC)),  # a fold, fixed hour
        ("*/20 * * * *", datetime(2027, 6, 1, tzinfo=UTC)),  # a fold, every so many hours
        ("every 5h from 2026-01-01T00:00", datetime(2026, 12, 6, tzinfo=UTC)),  # an interval
    ],
)
def test_the_effect_is_the_note_of_the_run_the_preview_shows(expr: str, after: datetime) -> None:
    """One rule: the effect quotes the DST note `preview` gives that run, not a copy of it."""
    effect = cron.transition_effect(expr, "Europe/Amsterdam", seed=SEED, after=after)
    assert effect is not None and effect.note
    around = cron.preview(
        expr, "Europe/Amsterdam", seed=SEED, after=effect.at - timedelta(hours=2), count=20
    )
    assert effect.note == next(o.note for o in around if o.note)
    assert effect.text.endswith(f": {effect.note}.")


def test_no_effect_for_a_schedule_that_ends_before_the_change() -> None:
    expr = cron.compose(
        [cron.Spec(cron="30 2 * * *")], start_at=None, end_at=datetime(2027, 1, 1, tzinfo=UTC)
    )
    assert (
        cron.transition_effect(
            expr, "Europe/Amsterdam", seed=SEED, after=datetime(2026, 12, 6, tzinfo=UTC)
        )
        is None
    )
    # One that runs on past it says what the change does.
    assert cron.transition_effect(
        "30 2 * * *", "Europe/Amsterdam", seed=SEED, after=datetime(2026, 12, 6, tzinfo=UTC)
    )
