"""Server-drawn SVG charts: geometry only (rectangles, points, labels) for templates to
draw with CSS classes (the console's CSP allows no inline styles). No script needed."""

from __future__ import annotations

from dataclasses import dataclass
from zoneinfo import ZoneInfo

from dispatch.selectors import Activity

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
