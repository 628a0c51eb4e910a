"""Template helpers of the alerts pages: a form's value and errors by input name, and
the schedule page's alerts part."""

from __future__ import annotations

from typing import Any

from django import template

from console.views.alerts import SCHEDULE_OVERRIDES, schedule_alerts_context

register = template.Library()


@register.filter
def field(mapping: dict[str, Any] | None, name: str) -> Any:
    """`mapping[name]` (a form value or a field's list of errors), else ""."""
    return (mapping or {}).get(name, "")


@register.inclusion_tag("console/_schedule_alerts.html", takes_context=True)
def schedule_alerts(context: template.Context, schedule: Any) -> dict[str, Any]:
    """The schedule's alert state, policy form and snooze control; a re-rendered POST
    (alerts_schedule.html) passes the sent values and the errors in its context."""
    ctx = schedule_alerts_context(context["principal"], schedule)
    ctx.update({key: context[key] for key in SCHEDULE_OVERRIDES if key in context})
    return (
        ctx
        | {
            key: context.get(key)
            for key in ("request", "csrf_token", "can_operate", "can_admin", "viewer_tz")
        }
        | {"schedule": schedule}
    )
