"""Template helpers: timestamps in the viewer's or the schedule's zone, UTC on hover."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

from console.access import known_zone

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
    local = value.astimezone(zone)
    text = local.strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")
    if seconds and local.microsecond:
        text += f".{local.microsecond // 1000:03d}"
    return f"{text} {local.tzname()}"


@register.simple_tag(takes_context=True)
def ts(context: template.Context, value: datetime | None, zone: Any = None) -> SafeString | str:
    """`<time>` in `zone` (default: the viewer's), with the UTC instant on hover."""
    if value is None:
        return "—"
    tz = zone_of(zone) if zone else zone_of(context.get("viewer_tz"))
    utc = value.astimezone(UTC)
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        utc.isoformat().replace("+00:00", "Z"),
        fmt(utc, ZoneInfo("UTC")),
        fmt(value, tz),
    )


@register.filter
def badge(state: str) -> SafeString:
    return format_html(
        '<span class="badge badge-{}">{}</span>',
        BADGES.get(state, "muted"),
        state.replace("_", " "),
    )


@register.filter
def seconds_between(later: datetime | None, earlier: datetime | None) -> str:
    if later is None or earlier is None:
        return ""
    delta: timedelta = later - earlier
    return f"{delta.total_seconds():.3f} s"


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


@register.filter
def untagged(messages: Iterable[Any], tag: str) -> list[Any]:
    """The request's messages not tagged `tag`: the page-wide ones
    (templates/console/_messages.html), without a field's own error that the field
    shows beside itself (`tagged`)."""
    return [m for m in messages if tag not in str(getattr(m, "extra_tags", "")).split()]
