"""Template helpers: timestamps in the viewer's or the schedule's zone, UTC on hover."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from django import template
from django.templatetags.static import static
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from console import nav as navigation
from console.access import known_zone
from dispatch.states import ExplainCode
from dispatch.timing.clock import instant_text
from dispatch.timing.durations import measured, relative

register = template.Library()

BADGES = {
    "succeeded": "ok",
    "running": "run",
    "queued": "wait",
    "scheduled": "wait",
    "retry_scheduled": "warn",
    "failed": "bad",
    "timed_out": "bad",
    "dead": "bad",
    "skipped": "muted",
    "cancelled": "muted",
}


def zone_of(value: Any) -> ZoneInfo:
    if isinstance(value, ZoneInfo):
        return value
    return known_zone(value) or ZoneInfo("UTC")


def fmt(value: datetime, zone: ZoneInfo, *, seconds: bool = True) -> str:
    return instant_text(value, zone, seconds=seconds)


@register.simple_tag(takes_context=True)
def ts(
    context: template.Context,
    value: datetime | None,
    zone: Any = None,
    *,
    local: Any = None,
    rel: bool = False,
) -> SafeString | str:
    """`<time>` in the viewer's zone, with the UTC instant on hover: the console's one
    rule for an instant. `local` (a schedule's zone) adds the schedule's wall time,
    labelled with that zone, where it matters (its next runs); it is left out when it
    reads the same as the viewer's. `zone` is for a column headed with its zone only
    ("In Europe/Berlin", "UTC"). `rel` says it relative to the page's `now` ("5 min
    ago"), the absolute time on hover: for lists that refresh, where recency is the
    point (the dashboard's failures and running runs)."""
    if value is None:
        return "—"
    tz = zone_of(zone) if zone else zone_of(context.get("viewer_tz"))
    utc = value.astimezone(UTC)
    now = context.get("now")
    if rel and isinstance(now, datetime):
        absolute = dict.fromkeys([fmt(value, tz), fmt(utc, ZoneInfo("UTC"))])
        return format_html(
            '<time datetime="{}" title="{}">{}</time>',
            utc.isoformat().replace("+00:00", "Z"),
            " · ".join(absolute),
            relative((now - value).total_seconds()),
        )
    shown = format_html(
        '<time datetime="{}" title="{}">{}</time>',
        utc.isoformat().replace("+00:00", "Z"),
        fmt(utc, ZoneInfo("UTC")),
        fmt(value, tz),
    )
    if local:
        own = zone_of(local)
        # Left out when it reads the same: the viewer is in that zone, or one that
        # keeps the same time and name.
        if fmt(value, own, seconds=False) != fmt(value, tz, seconds=False):
            return format_html(
                '{} <small class="muted local-time">({}, {})</small>',
                shown,
                fmt(value, own, seconds=False),
                own.key,
            )
    return shown


@register.simple_tag(takes_context=True)
def ts_text(context: template.Context, value: datetime | None) -> str:
    """The same instant as plain text in the viewer's zone (an attribute, a label)."""
    if value is None:
        return ""
    return fmt(value, zone_of(context.get("viewer_tz")))


@register.filter
def badge(state: str) -> SafeString:
    return format_html(
        '<span class="badge badge-{}">{}</span>',
        BADGES.get(state, "muted"),
        state.replace("_", " "),
    )


# The explainer's answer codes by what they mean for the person asking: it ran well,
# it failed, it did not run for a reason worth a look, it is under way or waiting, or
# there was nothing to run. Every code is listed (a test keeps the list whole: a new
# code must be given its tone, not fall to "muted" by oversight).
ANSWER_TONES: dict[str, str] = {
    ExplainCode.RAN: "ok",
    ExplainCode.RUNNING: "run",
    ExplainCode.RETRYING: "warn",
    ExplainCode.FAILED: "bad",
    ExplainCode.TIMED_OUT: "bad",
    ExplainCode.DEAD: "bad",
    ExplainCode.MISSING: "bad",
    ExplainCode.PENDING: "wait",
    ExplainCode.HELD: "warn",
    ExplainCode.PAUSED: "warn",
    ExplainCode.SKIPPED_MISFIRE: "warn",
    ExplainCode.SKIPPED_OVERLAP: "warn",
    ExplainCode.SKIPPED_UPSTREAM: "warn",
    ExplainCode.SKIPPED_KEY: "warn",
    ExplainCode.SKIPPED_QUOTA: "warn",
    ExplainCode.SKIPPED: "warn",
    ExplainCode.CANCELLED: "muted",
    ExplainCode.NOT_AN_OCCURRENCE: "muted",
    ExplainCode.DST_SHIFTED: "muted",
    ExplainCode.EXCLUDED_BY_CALENDAR: "muted",
    ExplainCode.NOT_CREATED_YET: "muted",
    ExplainCode.ARCHIVED: "muted",
    ExplainCode.DELETED: "muted",
    ExplainCode.COMPLETED: "muted",
}
# Words for the codes that "snake_case -> Sentence case" would spell badly.
ANSWER_WORDS: dict[str, str] = {
    ExplainCode.DST_SHIFTED: "DST shifted",
    ExplainCode.SKIPPED_MISFIRE: "Skipped: misfire",
    ExplainCode.SKIPPED_OVERLAP: "Skipped: overlap",
    ExplainCode.SKIPPED_UPSTREAM: "Skipped: upstream",
    ExplainCode.SKIPPED_KEY: "Skipped: concurrency key",
    ExplainCode.SKIPPED_QUOTA: "Skipped: quota",
}


@register.filter
def answer_badge(code: str) -> SafeString:
    """The explainer's answer code as a badge: coloured by its meaning, in words ("dead"
    → "Dead"), the code itself in `data-code` and its meaning on hover."""
    words = ANSWER_WORDS.get(code) or code.replace("_", " ").capitalize()
    meaning = ExplainCode(code).label if code in ExplainCode.values else ""
    return format_html(
        '<span class="badge badge-{}" id="answer-code" data-code="{}" title="{}: {}">{}</span>',
        ANSWER_TONES.get(code, "muted"),
        code,
        code,
        meaning,
        words,
    )


@register.filter
def duration(value: float | timedelta | None) -> str:
    """A measured duration (seconds, or a timedelta) in ms, s or min: the console's one
    rule for run durations, percentiles and lags (dispatch.timing.durations.measured)."""
    if value is None:
        return "—"
    return measured(value.total_seconds() if isinstance(value, timedelta) else float(value))


@register.filter
def duration_between(later: datetime | None, earlier: datetime | None) -> str:
    """`later - earlier` as a duration; "" when either is missing."""
    if later is None or earlier is None:
        return ""
    return duration(later - earlier)


@register.filter
def who(label: str) -> str:
    return label.removeprefix("user:") if label else ""


@register.filter
def as_json(value: Any) -> str:
    """A stored JSON value (a target, a retry policy) as pretty JSON, not a Python repr.
    Targets hold secret references ({"secret": "vault:…"}) only, never their values."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


@register.filter
def tagged(messages: Iterable[Any], tag: str) -> str:
    """The text of the first message of the request tagged `tag` (a field's own error
    after a redirect: the footer's time zone), "" when none; the request's messages
    are spent, as any reading of them does."""
    found = ""
    for message in messages:
        if not found and tag in str(getattr(message, "extra_tags", "")).split():
            found = str(message)
    return found


@register.simple_tag(takes_context=True)
def nav(context: template.Context) -> list[dict[str, object]]:
    """The sidebar's groups for this viewer, the current page's item marked."""
    request = context["request"]
    return navigation.menu(
        request.path,
        can_admin=bool(context.get("can_admin")),
        is_staff=bool(getattr(request.user, "is_staff", False)),
    )


@register.simple_tag
def icon(name: str, label: str = "") -> SafeString:
    """An icon of static/console/icons.svg; decorative unless given a label."""
    aria = (
        format_html('role="img" aria-label="{}"', label)
        if label
        else mark_safe('aria-hidden="true"')
    )
    return format_html(
        '<svg class="icon" {} focusable="false"><use href="{}#i-{}"></use></svg>',
        aria,
        static("console/icons.svg"),
        name,
    )


@register.filter
def untagged(messages: Iterable[Any], tag: str) -> list[Any]:
    """The request's messages not tagged `tag`: the page-wide ones
    (templates/console/_messages.html), without a field's own error that the field
    shows beside itself (`tagged`)."""
    return [m for m in messages if tag not in str(getattr(m, "extra_tags", "")).split()]
