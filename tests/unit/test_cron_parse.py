"""Parsing, validation, H hashing and descriptions of cron expressions."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from dispatch.timing import cron

SEED = "0b7e4a52-8c1d-4f3e-9a26-5d0c7f1e2b93"
OTHER_SEED = "5f2d9c1a-3b4e-4c6d-8e7f-9a0b1c2d3e4f"
JAN_2026 = datetime(2026, 1, 1, tzinfo=UTC)


def occurrences(expr: str, *, days: int = 60, tz: str = "UTC", seed: str = SEED) -> list[datetime]:
    return cron.occurrences_between(
        expr, tz, start=JAN_2026, end=JAN_2026 + timedelta(days=days), seed=seed
    )


def resolved_fields(expr: str, seed: str) -> list[str]:
    return cron.resolve(expr, seed=seed).split()


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("", "expression is empty"),
        ("   \t ", "expression is empty"),
        ("0 0 * * *\x00", "expression contains a NUL byte"),
        (
            "@reboot",
            "'@reboot' is not supported: schedules fire on time, not on process start",
        ),
        (
            "* * * * * *",
            "expected 5 fields (minute hour day-of-month month day-of-week), got 6;"
            " a seconds field is not supported",
        ),
        (
            "0 0 0 1 1 * 2030",
            "expected 5 fields (minute hour day-of-month month day-of-week), got 7;"
            " seconds and year fields are not supported",
        ),
        ("0 0 * *", "expected 5 fields (minute hour day-of-month month day-of-week), got 4"),
        ("61 * * * *", "field 'minute': 61 is out of range 0-59"),
        ("0 24 * * *", "field 'hour': 24 is out of range 0-23"),
        ("0 0 32 * *", "field 'day of month': 32 is out of range 1-31"),
        ("0 0 0 * *", "field 'day of month': 0 is out of range 1-31"),
        ("0 0 * 13 *", "field 'month': 13 is out of range 1-12"),
        ("0 0 * * 8", "field 'day of week': 8 is out of range 0-7"),
        ("0 0 31 2 *", "field 'day of month': 31 never occurs in February"),
        ("0 0 30 2 *", "field 'day of month': 30 never occurs in February"),
        ("0 0 30,31 2 *", "field 'day of month': 30 and 31 never occur in February"),
        ("0 0 31 4,6,9 *", "field 'day of month': 31 never occurs in April, June or September"),
        ("*/0 * * * *", "field 'minute': step must be at least 1"),
        (
            "*/90 * * * *",
            "field 'minute': step 90 is larger than the field's range (60 values)",
        ),
        (
            "30-10 * * * *",
            "field 'minute': range '30-10' runs backwards (start must not be after end)",
        ),
        (
            "0 0 * * FRI-MON",
            "field 'day of week': range 'FRI-MON' runs backwards (start must not be after end)",
        ),
        ("0 0 * * FOO", "field 'day of week': unknown weekday name 'FOO'"),
        ("0 0 * FOO *", "field 'month': unknown month name 'FOO'"),
        ("0 0 * MON *", "field 'month': unknown month name 'MON'"),
        ("abc * * * *", "field 'minute': 'abc' is not a number"),
        ("1,,2 * * * *", "field 'minute': empty item in a list"),
        ("1-2-3 * * * *", "field 'minute': cannot parse '1-2-3'"),
        ("+5 * * * *", "field 'minute': cannot parse '+5'"),
        (
            "0 0 L * *",
            "field 'day of month': 'L' is not a number"
            " (L, W, # and ? are not supported; use standard cron syntax or H)",
        ),
        (
            "0 0 15W * *",
            "field 'day of month': cannot parse '15W'"
            " (L, W, # and ? are not supported; use standard cron syntax or H)",
        ),
        (
            "0 0 * * 1#2",
            "field 'day of week': cannot parse '1#2'"
            " (L, W, # and ? are not supported; use standard cron syntax or H)",
        ),
        (
            "0 0 ? * *",
            "field 'day of month': cannot parse '?'"
            " (L, W, # and ? are not supported; use standard cron syntax or H)",
        ),
        (
            "@fortnightly",
            "unknown macro '@fortnightly' (use one of @yearly, @annually, @monthly, @weekly,"
            " @daily, @midnight, @hourly)",
        ),
        ("@daily 5", "'@daily' stands alone: it cannot be followed by other fields"),
        ("H(5-70) * * * *", "field 'minute': 70 is out of range 0-59"),
        ("H(30-10) * * * *", "field 'minute': range in 'H(30-10)' runs backwards"),
        ("H/0 * * * *", "field 'minute': step must be at least 1"),
        (
            "H-5 * * * *",
            "field 'minute': cannot parse 'H-5' (hashed forms are H, H/n, H(a-b) and H(a-b)/n)",
        ),
        ("0 0 * * WEDS", "field 'day of week': unknown weekday name 'WEDS'"),
        (
            "0 0 * * 5L",
            "field 'day of week': cannot parse '5L'"
            " (L, W, # and ? are not supported; use standard cron syntax or H)",
        ),
        ("H/61 * * * *", "field 'minute': step 61 is larger than the field's range (60 values)"),
        ("0 0\n* * *", "expression contains an unsupported character '\\n'"),
        ("0 0 * * mon\u00a0", "expression contains an unsupported character '\\xa0'"),
        ("0 0\u00a0* * mon", "expression contains an unsupported character '\\xa0'"),
        ("0 0 * * *" + " " * 1000 + "x", "expression is too long (at most 1000 characters)"),
    ],
)
def test_invalid_expression_is_rejected_with_a_message_naming_the_problem(
    expr: str, message: str
) -> None:
    with pytest.raises(cron.CronError) as caught:
        cron.validate(expr, "UTC", seed=SEED)
    assert caught.value.message == message
    assert str(caught.value) == message


def test_cron_error_is_a_value_error() -> None:
    assert issubclass(cron.CronError, ValueError)


def test_non_text_expression_is_a_cron_error_not_a_type_error() -> None:
    with pytest.raises(cron.CronError, match="expression must be text"):
        cron.validate(5, "UTC", seed=SEED)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "expr",
    [
        "* * * * *",
        "*/5 0-6,22-23 * * MON-FRI",
        "0 0 29 2 *",
        "0 0 31 * *",
        "0 0 31 2 MON",
        "0 12 * * 7",
        "5/15 * * * *",
        "0 0 1 jan,Jul *",
        "  0   0  *  *  *  ",
        "H H(9-17) * * H",
        "H(0-29)/10 H/6 H/7 H/5 H(1-5)",
        "@daily",
        "@HOURLY",
    ],
)
def test_valid_expression_passes_validation(expr: str) -> None:
    cron.validate(expr, "Europe/Amsterdam", seed=SEED)


def test_feb_29_is_valid_and_runs_on_the_next_leap_day() -> None:
    first = cron.next_after("0 0 29 2 *", "UTC", after=JAN_2026, seed=SEED)
    assert first == datetime(2028, 2, 29, tzinfo=UTC)
    again = cron.next_after("0 0 29 2 *", "UTC", after=first, seed=SEED)
    assert again == datetime(2032, 2, 29, tzinfo=UTC)


def test_feb_29_skips_the_non_leap_year_2100() -> None:
    after = datetime(2097, 1, 1, tzinfo=UTC)
    assert cron.next_after("0 0 29 2 *", "UTC", after=after, seed=SEED) == datetime(
        2104, 2, 29, tzinfo=UTC
    )


def test_impossible_day_of_month_with_a_weekday_runs_on_that_weekday_quickly() -> None:
    # OR semantics: the 31st of February adds nothing, Mondays of February remain.
    started = time.perf_counter()
    runs = cron.occurrences_between(
        "0 0 31 2 MON", "UTC", start=JAN_2026, end=datetime(2030, 1, 1, tzinfo=UTC), seed=SEED
    )
    assert time.perf_counter() - started < 1.0
    assert runs
    assert all(r.month == 2 and r.weekday() == 0 for r in runs)
    assert len(runs) == 16  # four Mondays in each February of 2026-2029


@pytest.mark.parametrize(
    ("named", "numeric"),
    [
        ("0 9 * jan-mar mon-fri", "0 9 * 1-3 1-5"),
        ("0 9 * JAN-MAR Mon-Fri", "0 9 * 1-3 1-5"),
        ("30 6 * * SUN", "30 6 * * 0"),
        ("30 6 * * 7", "30 6 * * 0"),
        ("0 0 1 DEC,jun *", "0 0 1 6,12 *"),
    ],
)
def test_names_are_case_insensitive_and_mean_their_numbers(named: str, numeric: str) -> None:
    assert occurrences(named, days=400) == occurrences(numeric, days=400)
    assert occurrences(named, days=400)


@pytest.mark.parametrize(
    ("macro", "expansion"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
        ("@Daily", "0 0 * * *"),
    ],
)
def test_macros_expand_to_standard_expressions(macro: str, expansion: str) -> None:
    assert cron.resolve(macro, seed=SEED) == expansion
    assert occurrences(macro, days=40) == occurrences(expansion, days=40)


def test_step_with_a_start_value_runs_from_it_to_the_end_of_the_field() -> None:
    runs = occurrences("5/15 * * * *", days=1)
    assert [r.minute for r in runs[:5]] == [5, 20, 35, 50, 5]


def test_day_of_month_and_day_of_week_both_restricted_match_either() -> None:
    runs = occurrences("0 0 1 * MON", days=62)
    assert {r.date().isoformat() for r in runs} == {
        "2026-01-05", "2026-01-12", "2026-01-19", "2026-01-26", "2026-02-01", "2026-02-02",
        "2026-02-09", "2026-02-16", "2026-02-23", "2026-03-01", "2026-03-02",
    }  # fmt: skip


def test_star_day_of_month_with_a_weekday_means_only_that_weekday() -> None:
    runs = occurrences("0 0 * * MON", days=62)
    assert len(runs) == 9
    assert all(r.weekday() == 0 for r in runs)


def test_a_full_day_of_month_range_counts_as_star_like_croniter() -> None:
    # croniter treats 1-31 like *, so this is Mondays only (Vixie cron would OR it).
    assert occurrences("0 0 1-31 * MON", days=62) == occurrences("0 0 * * MON", days=62)


def test_hashed_fields_are_pinned_for_a_known_seed() -> None:
    # Pinned: if hashing changed, every H schedule would move on deploy.
    assert cron.resolve("H H * * *", seed=SEED) == "13 7 * * *"
    assert cron.resolve("H/15 H(9-17) H * H", seed=SEED) == "13-59/15 13 25 * 1"
    assert (
        cron.resolve("H(0-29)/10 H/6 H/7 H/5 H(1-5)", seed=SEED) == "3-29/10 1-23/6 4-28/7 1-12/5 5"
    )


def test_hashed_fields_resolve_the_same_every_time_for_one_seed() -> None:
    expr = "H H H H H"
    first = cron.resolve(expr, seed=OTHER_SEED)
    assert all(cron.resolve(expr, seed=OTHER_SEED) == first for _ in range(5))
    assert occurrences("H * * * *", seed=OTHER_SEED, days=1) == occurrences(
        "H * * * *", seed=OTHER_SEED, days=1
    )


def test_hashed_fields_spread_across_seeds() -> None:
    seeds = [f"00000000-0000-4000-8000-{i:012d}" for i in range(200)]
    minutes = {resolved_fields("H * * * *", s)[0] for s in seeds}
    assert len(minutes) > 40


def test_each_field_hashes_independently() -> None:
    seeds = [f"00000000-0000-4000-8000-{i:012d}" for i in range(200)]
    same = 0
    for seed in seeds:
        minute, hour = (int(v) for v in resolved_fields("H H * * *", seed)[:2])
        same += minute % 24 == hour
    assert same < 40  # about 200/24 if independent; 200 if both used one hash


def test_plain_h_stays_inside_each_fields_hash_range() -> None:
    for i in range(300):
        seed = f"11111111-0000-4000-8000-{i:012d}"
        minute, hour, dom, month, dow = (int(v) for v in resolved_fields("H H H H H", seed))
        assert 0 <= minute <= 59
        assert 0 <= hour <= 23
        assert 1 <= dom <= 28  # exists in every month
        assert 1 <= month <= 12
        assert 0 <= dow <= 6


def test_hashed_range_stays_inside_the_range() -> None:
    values = {int(resolved_fields("0 H(9-17) * * *", f"s-{i}")[1]) for i in range(300)}
    assert values <= set(range(9, 18))
    assert len(values) == 9


def test_hashed_step_starts_below_the_step_and_repeats_to_the_field_end() -> None:
    for i in range(100):
        runs = occurrences("H/15 * * * *", seed=f"seed-{i}", days=1)
        minutes = sorted({r.minute for r in runs})
        assert len(minutes) == 4
        assert minutes[0] < 15
        assert minutes == [minutes[0] + 15 * k for k in range(4)]


def test_hashed_range_with_step() -> None:
    for i in range(100):
        field = resolved_fields("H(30-59)/10 * * * *", f"seed-{i}")[0]
        runs = occurrences("H(30-59)/10 * * * *", seed=f"seed-{i}", days=1)
        minutes = sorted({r.minute for r in runs})
        assert 30 <= minutes[0] < 40
        assert minutes == list(range(minutes[0], 60, 10))
        assert field == f"{minutes[0]}-59/10"


def test_hashed_day_of_month_step_stays_within_28() -> None:
    for i in range(100):
        days = {r.day for r in occurrences("0 0 H/10 * *", seed=f"seed-{i}", days=400)}
        assert max(days) <= 28
        assert min(days) <= 10


def test_hashed_hour_counts_as_fixed_for_the_fold() -> None:
    # Amsterdam repeats 02:00-02:59 on 2026-10-25; a hashed hour that lands on 2
    # must run once there, like a literal 2.
    seed = next(
        s for s in (f"seed-{i}" for i in range(1000)) if resolved_fields("0 H * * *", s)[1] == "2"
    )
    start = datetime(2026, 10, 24, 12, tzinfo=UTC)
    runs = cron.occurrences_between(
        "30 H * * *", "Europe/Amsterdam", start=start, end=start + timedelta(days=1), seed=seed
    )
    assert runs == [datetime(2026, 10, 25, 0, 30, tzinfo=UTC)]


def test_resolve_expands_macros_and_keeps_other_fields_as_written() -> None:
    assert cron.resolve("@weekly", seed=SEED) == "0 0 * * 0"
    assert cron.resolve("  */5   9-17 * * mon-fri ", seed=SEED) == "*/5 9-17 * * mon-fri"


def test_describe_gives_a_human_sentence() -> None:
    assert cron.describe("17 3 * * *", seed=SEED) == "At 03:17 AM"
    assert cron.describe("@daily", seed=SEED) == "At 12:00 AM"
    assert cron.describe("0 9 * * MON-FRI", seed=SEED) == "At 09:00 AM, Monday through Friday"


def test_describe_of_a_hashed_expression_shows_its_resolution() -> None:
    assert cron.describe("H H * * *", seed=SEED) == (
        "At 07:13 AM (H H * * * resolves to 13 7 * * * for this schedule)"
    )


def test_describe_rejects_invalid_expressions() -> None:
    with pytest.raises(cron.CronError):
        cron.describe("0 0 31 2 *", seed=SEED)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("Mars/Base", "unknown timezone 'Mars/Base'"),
        ("", "timezone is empty"),
        ("  ", "timezone is empty"),
        ("localtime", "unknown timezone 'localtime'"),
        ("../../etc/passwd", "unknown timezone '../../etc/passwd'"),
        ("europe/amsterdam", "unknown timezone 'europe/amsterdam'"),
    ],
)
def test_unknown_or_empty_zone_is_rejected(name: str, message: str) -> None:
    with pytest.raises(cron.CronError) as caught:
        cron.get_zone(name)
    assert caught.value.message == message
    with pytest.raises(cron.CronError):
        cron.validate("0 0 * * *", name, seed=SEED)


def test_known_zone_is_returned() -> None:
    assert cron.get_zone("Europe/Amsterdam") == ZoneInfo("Europe/Amsterdam")
    assert cron.get_zone("UTC").key == "UTC"


NAIVE = datetime(2026, 1, 1)  # noqa: DTZ001 - deliberately naive


@pytest.mark.parametrize(
    "call",
    [
        lambda: cron.next_after("* * * * *", "UTC", after=NAIVE, seed=SEED),
        lambda: cron.occurrences_between("* * * * *", "UTC", start=NAIVE, end=JAN_2026, seed=SEED),
        lambda: cron.jitter_seconds(seed=SEED, scheduled_for=NAIVE, jitter_s=5),
        lambda: cron.would_run_at("* * * * *", "UTC", seed=SEED, at=NAIVE),
        lambda: cron.preview("* * * * *", "UTC", seed=SEED, after=NAIVE, count=1),
    ],
)
def test_naive_datetimes_are_a_programming_error(call: Callable[[], object]) -> None:
    with pytest.raises(ValueError, match="timezone-aware") as caught:
        call()
    assert not isinstance(caught.value, cron.CronError)


def test_instants_outside_the_supported_years_are_rejected() -> None:
    with pytest.raises(cron.CronError, match="between the years 1900 and 9000"):
        cron.next_after("* * * * *", "UTC", after=datetime(9999, 1, 1, tzinfo=UTC), seed=SEED)


def test_datetimes_in_other_zones_are_accepted_and_results_are_utc() -> None:
    after = datetime(2026, 1, 1, 1, 0, tzinfo=ZoneInfo("Europe/Amsterdam"))  # 00:00Z
    nxt = cron.next_after("30 * * * *", "UTC", after=after, seed=SEED)
    assert nxt == datetime(2026, 1, 1, 0, 30, tzinfo=UTC)
    assert nxt.tzinfo is UTC
