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
from dispatch.timing.clock import instant_text

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
    context: template.Context, value: datetime | None, zone: Any = None, *, local: Any = None
) -> SafeString | str:
    """`<time>` in the viewer's zone, with the UTC instant on hover: the console's one
    rule for an instant. `local` (a schedule's zone) adds the schedule's wall time,
    labelled with that zone, where it matters (its next runs); it is left out when it
    reads the same as the viewer's. `zone` is for a column headed with its zone only
    ("In Europe/Berlin", "UTC")."""
    if value is None:
        return "—"
    tz = zone_of(zone) if zone else zone_of(context.get("viewer_tz"))
    utc = value.astimezone(UTC)
    shown = format_html(
        '<time datetime="{}" title="{}">{}</time>',
        utc.isoformat().replace("+00:00", "Z"),
        fmt(utc, ZoneInfo("UTC")),
        fmt(value, tz),
    )
    if local:
        own = zone_of(local)
        if own.key != tz.key:
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
