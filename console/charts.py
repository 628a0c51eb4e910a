"""Server-drawn SVG charts: geometry only (rectangles, points, labels) for templates to
draw with CSS classes (the console's CSP allows no inline styles). No script needed."""

from __future__ import annotations

from dataclasses import dataclass
from zoneinfo import ZoneInfo

from dispatch.selectors import Activity, TimelineItem

WIDTH = 720
HEIGHT = 150
TOP = 8
BOTTOM = 22  # room for the hour labels
LEFT = 34  # room for the count labels


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    height: float
    css: str  # bar-ok / bar-bad / bar-other


@dataclass(frozen=True)
class Label:
    x: float
    y: float
    text: str


@dataclass(frozen=True)
class ActivityChart:
    width: int
    height: int
    bar_width: float
    bars: list[Bar]
    x_labels: list[Label]
    y_labels: list[Label]
    baseline: float
    lag_points: str  # an SVG polyline's points: p95 fire lag, scaled to its own maximum
    max_lag_s: float
    empty: bool


def _nice_top(value: int) -> int:
    """The axis' top: the count rounded up to 1, 2 or 5 x a power of ten."""
    top = 1
    while True:
        for step in (1, 2, 5):
            if top * step >= value:
                return top * step
        top *= 10


def activity_chart(activity: Activity, zone: ZoneInfo) -> ActivityChart:
    hours = activity.hours
    plot_h = HEIGHT - TOP - BOTTOM
    slot = (WIDTH - LEFT) / max(len(hours), 1)
    bar_w = max(slot * 0.72, 1.0)
    peak = _nice_top(max((h.runs for h in hours), default=0) or 1)
    baseline = TOP + plot_h
    bars: list[Bar] = []
    x_labels: list[Label] = []
    lags = [h.lag_p95_s for h in hours if h.lag_p95_s is not None]
    max_lag = max(lags, default=0.0)
    points = []
    for i, h in enumerate(hours):
        x = LEFT + i * slot + (slot - bar_w) / 2
        y = float(baseline)
        for count, css in ((h.ok, "bar-ok"), (h.bad, "bar-bad"), (h.other, "bar-other")):
            if count:
                height = plot_h * count / peak
                y -= height
                bars.append(Bar(x=round(x, 1), y=round(y, 1), height=round(height, 1), css=css))
        if i % 3 == 0:
            local = h.hour.astimezone(zone)
            x_labels.append(
                Label(x=round(x + bar_w / 2, 1), y=HEIGHT - 6, text=local.strftime("%H:%M"))
            )
        if h.lag_p95_s is not None and max_lag > 0:
            py = baseline - plot_h * h.lag_p95_s / max_lag
            points.append(f"{x + bar_w / 2:.1f},{py:.1f}")
    y_labels = [
        Label(x=LEFT - 6, y=baseline, text="0"),
        Label(x=LEFT - 6, y=TOP + 8, text=str(peak)),
    ]
    return ActivityChart(
        width=WIDTH,
        height=HEIGHT,
        bar_width=round(bar_w, 1),
        bars=bars,
        x_labels=x_labels,
        y_labels=y_labels,
        baseline=baseline,
        lag_points=" ".join(points) if len(points) > 1 else "",
        max_lag_s=max_lag,
        empty=not any(h.runs for h in hours),
    )


# --- an execution's timeline on a time axis -------------------------------------------

AXIS = 1000  # the axis' length in SVG units (drawn to the cell's width)
MIN_STEP = 4  # a step of a few milliseconds in a span of hours still shows as a mark


@dataclass(frozen=True)
class Step:
    """A timeline item placed on the axis from the first step to the last: where it
    starts, how long until the next step (its bar), and the time since the first."""

    item: TimelineItem
    offset: float
    width: float
    elapsed_s: float
    lasted_s: float | None  # None: the last step


def timeline_axis(items: list[TimelineItem]) -> list[Step]:
    if not items:
        return []
    first, last = items[0].at, items[-1].at
    span = max((last - first).total_seconds(), 0.0)
    steps = []
    for i, item in enumerate(items):
        start = (item.at - first).total_seconds()
        nxt = items[i + 1].at if i + 1 < len(items) else None
        lasted = max((nxt - item.at).total_seconds(), 0.0) if nxt is not None else None
        offset = AXIS * start / span if span else 0.0
        width = AXIS * (lasted or 0.0) / span if span else 0.0
        width = max(width, MIN_STEP)
        offset = min(offset, AXIS - width)
        steps.append(
            Step(
                item=item,
                offset=round(offset, 1),
                width=round(width, 1),
                elapsed_s=start,
                lasted_s=lasted,
            )
        )
    return steps
