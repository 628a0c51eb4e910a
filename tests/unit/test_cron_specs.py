"""Several specs, intervals and bounds in dispatch.timing.cron: the union is the
sorted, deduplicated merge of each spec's own occurrences; an interval is elapsed
time across spring-forward and fall-back in Europe/Amsterdam and America/New_York;
start_at is inclusive, end_at exclusive; preview == occurrences_between == the
misfire plan for random spec sets with calendars and bounds."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from itertools import pairwise

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dispatch.timing import cron
from dispatch.timing.calendars import DateFilter, DateSet

TICK = timedelta(microseconds=1)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CRONS = ("0 6 * * 1-5", "*/20 * * * *", "30 2 * * *", "0 * * * *", "H 3 * * *", "15 1-3 * * 0")
# (zone, a day with a spring-forward, a day with a fall-back), 2026.
TRANSITIONS = (
    ("Europe/Amsterdam", date(2026, 3, 29), date(2026, 10, 25)),
    ("America/New_York", date(2026, 3, 8), date(2026, 11, 1)),
)


def interval(every: str, anchor: str) -> str:
    return cron.compose([cron.Spec(every=every, anchor=anchor)], start_at=None, end_at=None)


@st.composite
def timings(draw: st.DrawFn) -> tuple[str, str, list[str]]:
    zone, spring, fall = draw(st.sampled_from(TRANSITIONS))
    parts: list[str] = []
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            parts.append(draw(st.sampled_from(CRONS)))
        else:
            minutes = draw(st.sampled_from((17, 45, 60, 90, 150, 24 * 60)))
            day = draw(st.sampled_from((spring, fall))) - timedelta(days=draw(st.integers(0, 40)))
            anchor = f"{day.isoformat()}T0{draw(st.integers(0, 3))}:{draw(st.integers(0, 59)):02d}"
            parts.append(interval(f"{minutes}m", anchor))
    return zone, cron.SPEC_SEPARATOR.join(parts), parts


def test_union_of_cron_and_interval_is_deduplicated() -> None:
    text = cron.compose(
        [cron.Spec(cron="0 * * * *"), cron.Spec(every="30m", anchor="2026-01-01T00:00:00")],
        start_at=None,
        end_at=None,
    )
    start = datetime(2026, 6, 1, tzinfo=UTC)
    got = cron.occurrences_between(
        text, "UTC", start=start, end=start + timedelta(hours=2), seed=""
    )
    assert got == [start + timedelta(minutes=30 * k) for k in range(1, 5)]


@pytest.mark.parametrize(("zone", "spring", "fall"), TRANSITIONS)
@pytest.mark.parametrize("which", ["spring", "fall"])
def test_interval_is_elapsed_time_across_transitions(
    zone: str, spring: date, fall: date, which: str
) -> None:
    day = spring if which == "spring" else fall
    text = interval("90m", f"{(day - timedelta(days=30)).isoformat()}T00:15:00")
    start = datetime.combine(day, datetime.min.time(), UTC) - timedelta(days=1)
    got = cron.occurrences_between(text, zone, start=start, end=start + timedelta(days=3), seed="")
    # 90 real minutes apart on both sides of the transition ...
    assert {b - a for a, b in pairwise(got)} == {timedelta(minutes=90)}
    # ... so the wall clock shifts by the transition's hour, and the first run after
    # it says so.
    walls = {o.astimezone(cron.get_zone(zone)).minute for o in got}
    assert walls == {15, 45}
    notes = [o.note for o in cron.preview(text, zone, seed="", after=start, count=48) if o.note]
    assert len(notes) == 1 and "elapsed time" in notes[0]
    moved = "forward" if which == "spring" else "back"
    assert f"the clocks went {moved}" in notes[0]


def test_anchor_in_gap_and_fold_follow_the_cron_rule() -> None:
    zone = "Europe/Amsterdam"
    # 02:30 did not exist on 2026-03-29: the anchor is the gap's end, 03:00 CEST.
    gap = interval("1d", "2026-03-29T02:30:00")
    first = cron.next_after(gap, zone, after=datetime(2026, 3, 29, tzinfo=UTC), seed="")
    assert first == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    # 02:30 occurred twice on 2026-10-25: the anchor is the first, 02:30 CEST.
    fold = interval("1d", "2026-10-25T02:30:00")
    first = cron.next_after(fold, zone, after=datetime(2026, 10, 25, tzinfo=UTC), seed="")
    assert first == datetime(2026, 10, 25, 0, 30, tzinfo=UTC)
    # Occurrences before the anchor exist too (k < 0): elapsed days.
    earlier = cron.next_after(fold, zone, after=datetime(2026, 10, 1, tzinfo=UTC), seed="")
    assert earlier == datetime(2026, 10, 1, 0, 30, tzinfo=UTC)


def test_bounds_start_inclusive_end_exclusive_and_ended() -> None:
    start, end = datetime(2026, 6, 1, 10, tzinfo=UTC), datetime(2026, 6, 1, 13, tzinfo=UTC)
    text = cron.compose([cron.Spec(cron="0 * * * *")], start_at=start, end_at=end)
    got = cron.occurrences_between(
        text, "UTC", start=start - timedelta(days=1), end=end + timedelta(days=1), seed=""
    )
    assert got == [start, start + timedelta(hours=1), start + timedelta(hours=2)]
    assert cron.next_or_none(text, "UTC", after=end - timedelta(hours=1), seed="") is None
    assert cron.ended(text, "UTC", after=end - timedelta(hours=1), seed="")
    assert not cron.ended(text, "UTC", after=start, seed="")
    assert not cron.ended("0 * * * *", "UTC", after=end, seed="")
    assert cron.bounds(text) == (start, end)
    plan = cron.plan_misfire(
        text, "UTC", seed="", next_run_at=start, now=end + timedelta(hours=5),
        until=end + timedelta(hours=5), grace_s=60, policy="catch_up", catch_up_limit=10,
    )  # fmt: skip
    assert plan.fire == got and plan.next_run_at is None and plan.skipped_total == 0
    before = cron.would_run_at(text, "UTC", seed="", at=start - timedelta(hours=1))
    assert (
        not before.is_occurrence and before.outside == f"before start_at {'2026-06-01T10:00:00Z'}"
    )
    after = cron.would_run_at(text, "UTC", seed="", at=end)
    assert not after.is_occurrence and after.outside == "at or after end_at 2026-06-01T13:00:00Z"
    assert after.next is None


def test_compose_decompose_round_trip() -> None:
    specs = [cron.Spec(cron="0 6 * * 1-5"), cron.Spec(every="1h30m", anchor="2026-01-01T00:15:00")]
    start = datetime(2026, 12, 1, tzinfo=UTC)
    text = cron.compose(specs, start_at=start, end_at=None)
    assert cron.decompose(text) == (specs, start, None)
    again = cron.compose(*cron.decompose(text)[:1], start_at=start, end_at=None)
    assert again == text


@pytest.mark.parametrize(
    ("text", "why"),
    [("30s", "at least 1m"), ("90s", "whole number of minutes"), ("fast", "not a duration"),
     ("", "is required"), ("400d", "at most 366 days")],
)  # fmt: skip
def test_parse_every_rejects(text: str, why: str) -> None:
    with pytest.raises(cron.CronError, match=why):
        cron.parse_every(text)


@SETTINGS
@given(case=timings(), hours=st.integers(6, 72), offset_h=st.integers(-60, 24))
def test_union_equals_merge_of_each_spec(case: tuple[str, str, list[str]], hours: int,
                                         offset_h: int) -> None:  # fmt: skip
    zone, text, parts = case
    start = datetime(2026, 3, 8, tzinfo=UTC) + timedelta(hours=offset_h)
    end = start + timedelta(hours=hours)
    union = cron.occurrences_between(text, zone, start=start, end=end, seed="s")
    each: set[datetime] = set()
    for part in parts:
        each |= set(cron.occurrences_between(part, zone, start=start, end=end, seed="s"))
    assert union == sorted(each)


@SETTINGS
@given(
    case=timings(),
    offset_h=st.integers(-48, 24),
    bounds=st.tuples(st.integers(0, 40), st.integers(1, 60)),
    exclude=st.booleans(),
    policy=st.sampled_from(cron.MISFIRE_POLICIES),
)
def test_preview_between_and_misfire_plan_agree(
    case: tuple[str, str, list[str]],
    offset_h: int,
    bounds: tuple[int, int],
    exclude: bool,
    policy: str,
) -> None:
    zone, _, parts = case
    spring = next(t[1] for t in TRANSITIONS if t[0] == zone)
    base = datetime.combine(spring, datetime.min.time(), UTC) + timedelta(hours=offset_h)
    start_at = base + timedelta(hours=bounds[0])
    end_at = start_at + timedelta(hours=bounds[1])
    specs = cron.decompose(cron.SPEC_SEPARATOR.join(parts))[0]
    text = cron.compose(specs, start_at=start_at, end_at=end_at)
    dates = DateFilter(exclude=(DateSet.of("day", {spring: "the day"}),)) if exclude else None
    window_end = end_at + timedelta(hours=2)
    between = cron.occurrences_between(
        text, zone, start=base, end=window_end, seed="s", dates=dates
    )
    assert all(start_at <= o < end_at for o in between)
    shown = cron.preview(text, zone, seed="s", after=base, count=1000, dates=dates)
    assert [o.scheduled_for for o in shown] == between
    if not between:
        return
    plan = cron.plan_misfire(
        text, zone, seed="s", next_run_at=between[0], now=window_end, until=window_end,
        grace_s=0, policy=policy, catch_up_limit=3, max_listed=10_000, dates=dates,
    )  # fmt: skip
    assert sorted(plan.fire + plan.skipped) == between
    assert plan.skipped_total == len(plan.skipped) and plan.next_run_at is None
