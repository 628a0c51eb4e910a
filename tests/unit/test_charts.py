"""The console's chart geometry (console/charts.py): bars where the figures say."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from console import charts
from dispatch.selectors import Activity, HourActivity, TimelineItem

T0 = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)


def item(seconds: float, kind: str) -> TimelineItem:
    return TimelineItem(at=T0 + timedelta(seconds=seconds), kind=kind, message=kind)


def test_timeline_steps_sit_on_one_axis_from_the_first_step_to_the_last() -> None:
    steps = charts.timeline_axis(
        [item(0, "scheduled"), item(60, "published"), item(61, "started"), item(100, "finished")]
    )
    assert [s.offset for s in steps] == [0.0, 600.0, 610.0, 996.0]
    # A bar lasts until the next step; the last one is a mark.
    assert [s.width for s in steps] == [600.0, 10.0, 390.0, charts.MIN_STEP]
    assert [s.lasted_s for s in steps] == [60.0, 1.0, 39.0, None]
    assert [s.elapsed_s for s in steps] == [0.0, 60.0, 61.0, 100.0]


def test_a_step_of_milliseconds_in_a_span_of_hours_still_shows() -> None:
    steps = charts.timeline_axis([item(0, "scheduled"), item(3600, "started"), item(3600.004, "x")])
    assert steps[1].width == charts.MIN_STEP and steps[1].lasted_s is not None
    assert abs(steps[1].lasted_s - 0.004) < 1e-9
    assert all(0 <= s.offset <= charts.AXIS - s.width for s in steps)


def test_one_step_or_none() -> None:
    assert charts.timeline_axis([]) == []
    (only,) = charts.timeline_axis([item(0, "scheduled")])
    assert only.offset == 0.0 and only.width == charts.MIN_STEP and only.lasted_s is None


def test_activity_bars_stack_by_outcome_under_a_round_top() -> None:
    hours = [
        HourActivity(
            hour=T0 + timedelta(hours=i), ok=ok, bad=bad, other=0, p95_s=None, lag_p95_s=None
        )
        for i, (ok, bad) in enumerate([(3, 0), (0, 0), (5, 2)])
    ]
    chart = charts.activity_chart(Activity(hours=hours, sampled=False), ZoneInfo("UTC"))
    assert chart.y_labels[1].text == "10"  # 7 runs at most: the axis tops at 10
    ok = [b for b in chart.bars if b.css == "bar-ok"]
    bad = [b for b in chart.bars if b.css == "bar-bad"]
    assert len(ok) == 2 and len(bad) == 1
    plot = charts.HEIGHT - charts.TOP - charts.BOTTOM
    assert ok[0].height == round(plot * 3 / 10, 1)
    # The failures sit on top of the same hour's successes.
    assert bad[0].x == ok[1].x and round(bad[0].y + bad[0].height, 1) == ok[1].y
    assert not chart.empty and chart.lag_points == ""
