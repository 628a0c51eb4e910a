"""The health blocks of the console, as inclusion tags: the schedule page's health card
and status grid (`{% schedule_health schedule %}`), its block reads what it shows
itself, so the page includes it with one line and its view stays as it is. (The
dashboard's block is its own request, console/views/health.py, loaded after the page.)"""

from __future__ import annotations

from typing import Any

from django import template

from console import charts
from console.access import viewer_zone
from console.templatetags.console_tags import fmt, zone_of
from dispatch import selectors, services

register = template.Library()

# The schedule page's grid: its newest executions and the next occurrences.
SCHEDULE_PAST = 48
SCHEDULE_FUTURE = 6


def context_zone(context: template.Context) -> Any:
    """The viewer's zone (the console shows every instant in it), even on a page whose
    `zone` is the schedule's."""
    return context.get("viewer_tz") or viewer_zone(context["request"])


@register.inclusion_tag("console/_health.html", takes_context=True)
def schedule_health(context: template.Context, schedule: Any) -> dict[str, Any]:
    tenant = context["principal"].tenant
    now = services.db_now()
    health = selectors.schedule_health(tenant=tenant, schedule=schedule, now=now)
    grid = selectors.status_grid(
        tenant=tenant, schedules=[schedule], now=now, past=SCHEDULE_PAST, future=SCHEDULE_FUTURE
    )
    zone = zone_of(context_zone(context))
    activity = selectors.activity_by_hour(tenant=tenant, now=now, schedule=schedule)
    return {
        "request": context["request"],
        "zone": zone,
        "activity": activity,
        "activity_scan": selectors.ACTIVITY_SCAN,
        "chart": charts.activity_chart(activity, zone),
        "chart_id": "schedule-activity",
        "chart_title": "Runs per hour, last 24 hours",
        "schedule": schedule,
        "health": health,
        "windows": list(health.windows.items()),
        "rows": grid,
        "outcomes": selectors.OUTCOMES,
        "show_names": False,
        "scan": selectors.HEALTH_SCAN,
    }


@register.filter
def outcome_label(outcome: str) -> str:
    return selectors.OUTCOMES.get(outcome, (outcome, ""))[0]


@register.filter
def outcome_symbol(outcome: str) -> str:
    return selectors.OUTCOMES.get(outcome, (outcome, "?"))[1]


@register.filter
def percent(rate: float | None) -> str:
    return "—" if rate is None else f"{rate * 100:.1f} %"


@register.filter
def cell_label(cell: selectors.GridCell, zone: Any) -> str:
    """What a cell says to a screen reader and on hover: time, outcome, and the reason."""
    at = fmt(cell.scheduled_for, zone_of(zone), seconds=False)
    text = f"{at}: {outcome_label(cell.outcome)}"
    return f"{text} ({cell.detail})" if cell.detail else text


@register.filter
def day_rate(health: selectors.ScheduleHealth | None) -> float | None:
    return None if health is None else health.windows["24h"].success_rate
