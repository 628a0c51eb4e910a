"""The windows a newest-first history read walks (partitions.newest_first_windows):
day partitions, contiguous, newest first, doubling going back, together covering
everything the read's bounds admit, whatever days are held."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta
from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from dispatch.history.partitions import day_start, newest_first_windows
from dispatch.selectors.paging import cursor_below, decode_cursor, encode_cursor, newest_after

NOW = datetime(2026, 12, 6, 10, 30, tzinfo=UTC)
TODAY = datetime(2026, 12, 6, tzinfo=UTC)
# 40 days kept and a week ahead, as retention leaves them.
HELD = [NOW.date() + timedelta(days=d) for d in range(-40, 8)]
# Hypothesis takes naive bounds; `timezones` makes every value it draws aware.
instants = st.datetimes(
    min_value=datetime(2026, 9, 1),  # noqa: DTZ001
    max_value=datetime(2027, 3, 1),  # noqa: DTZ001
    timezones=st.just(UTC),
)
helds = st.lists(st.dates(min_value=date(2026, 10, 1), max_value=date(2027, 1, 1)), unique=True)


def test_from_today_upwards_then_doubling_back_then_the_rest() -> None:
    windows = list(newest_first_windows(NOW, held=HELD))
    assert windows[0] == (TODAY, None)  # today and every day ahead, in one read
    assert windows[1] == (TODAY - timedelta(days=1), TODAY)
    sizes = [(hi - lo).days for lo, hi in windows[1:-1]]  # type: ignore[operator]
    assert sizes == [1, 2, 4, 8, 16, 9]  # the last takes the 9 days left of the 40
    assert windows[-1] == (None, TODAY - timedelta(days=40))  # the lower catch-all


def test_a_table_holding_no_days_behind_today_is_two_reads() -> None:
    assert list(newest_first_windows(NOW, held=HELD[40:])) == [(TODAY, None), (None, TODAY)]


def test_a_lower_bound_stops_the_walk_at_its_day() -> None:
    since = TODAY - timedelta(days=2, hours=5)
    windows = list(newest_first_windows(NOW, held=HELD, lower=since))
    assert windows == [
        (TODAY, None),
        (TODAY - timedelta(days=1), TODAY),
        (None, TODAY - timedelta(days=1)),  # the rest: `since` bounds it
    ]


@given(now=instants, held=helds, upper=st.none() | instants, lower=st.none() | instants)
def test_contiguous_and_covering_whatever_the_bounds(
    now: datetime, held: list[date], upper: datetime | None, lower: datetime | None
) -> None:
    windows = list(newest_first_windows(now, held=sorted(held), upper=upper, lower=lower))
    assert windows[0][1] is None and windows[-1][0] is None  # unbounded at both ends
    assert all(newer[0] == older[1] for newer, older in pairwise(windows))  # no gap, no overlap
    inner = [lo for lo, _ in windows[:-1]]
    assert all(lo.hour == lo.minute == lo.second == 0 for lo in inner)  # type: ignore[union-attr]
    assert inner == sorted(inner, reverse=True) and len(set(inner)) == len(inner)
    top = upper or now
    assert not inner or inner[0] <= top  # the cursor's own day is in the first read
    if lower is not None:
        # No window lies wholly below the lower bound (it would read nothing).
        assert all(lo > lower for lo in inner)  # type: ignore[operator]


def test_a_budget_of_days_stops_the_walk_where_held_days_are_left() -> None:
    walk = newest_first_windows(NOW, held=HELD, days=4)
    assert walk.windows == [
        (TODAY, None),  # the top day counts as one
        (TODAY - timedelta(days=1), TODAY),
        (TODAY - timedelta(days=3), TODAY - timedelta(days=1)),  # 2 days: 4 read
    ]
    assert walk.cut == TODAY - timedelta(days=3)
    # Going on below the cut is the same walk from there.
    below = newest_first_windows(NOW, held=HELD, upper=walk.cut - timedelta(microseconds=1))
    assert below.windows[0] == (TODAY - timedelta(days=4), None)


def test_a_budget_the_held_days_fit_in_reads_everything() -> None:
    walk = newest_first_windows(NOW, held=HELD[20:], days=40)  # 20 days behind today
    assert walk.cut is None and walk.windows[-1] == (None, TODAY - timedelta(days=20))
    assert walk.windows == newest_first_windows(NOW, held=HELD[20:]).windows


@given(
    now=instants,
    held=helds,
    upper=st.none() | instants,
    lower=st.none() | instants,
    days=st.integers(min_value=1, max_value=50),
)
def test_a_budgeted_walk_reads_at_most_its_days_and_says_where_it_stopped(
    now: datetime, held: list[date], upper: datetime | None, lower: datetime | None, days: int
) -> None:
    walk = newest_first_windows(now, held=sorted(held), upper=upper, lower=lower, days=days)
    whole = newest_first_windows(now, held=sorted(held), upper=upper, lower=lower)
    assert walk.windows[0] == whole.windows[0] and whole.cut is None
    assert all(newer[0] == older[1] for newer, older in pairwise(walk.windows))
    top = walk.windows[0][0]
    if walk.cut is None:
        assert walk.windows[-1][0] is None  # down to the lower catch-all: everything
    else:
        # Stopped at a window's lower bound, with held days left below it, after
        # reading exactly `days` of them (the top day is one).
        assert walk.windows[-1][0] == walk.cut
        assert any(day_start(d) < walk.cut for d in held)
        read = [d for d in held if walk.cut <= day_start(d) and top and day_start(d) < top]
        assert len(read) + 1 == days


def test_a_page_after_a_cut_starts_its_walk_on_the_day_below_it() -> None:
    """The cut's own day holds nothing after its cursor (the nil id is below every id):
    reading it again would spend a read and a day of the budget on nothing."""
    walk = newest_first_windows(NOW, held=HELD, days=4)
    assert walk.cut is not None
    top = newest_after(*decode_cursor(cursor_below(walk.cut)))
    assert top == walk.cut - timedelta(microseconds=1)
    below = newest_first_windows(NOW, held=HELD, upper=top, days=4)
    assert below.windows[0] == (walk.cut - timedelta(days=1), None)
    # A row's own cursor keeps its instant: rows of that instant with a lower id follow.
    row = uuid.uuid4()
    assert newest_after(*decode_cursor(encode_cursor(walk.cut, row))) == walk.cut
