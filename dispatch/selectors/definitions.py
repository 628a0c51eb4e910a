"""Schedules as code: a schedule's definition in the shape `POST /v1/schedules:apply`
takes and `GET /v1/schedules:export` gives (API field names, depends_on as names).

One normalization serves both the export and apply's comparison, so a file that
was exported applies as "unchanged": `definition_of` (every field, defaults
included) is what apply compares; `definition_export` drops the defaults from it;
`definition_filled` puts them back into a definition as written.
"""

from __future__ import annotations

from datetime import UTC
from typing import Any

from django.conf import settings
from django.db.models import Prefetch, QuerySet

from dispatch import calendars
from dispatch.models import Calendar, DurationClass, Misfire, Overlap, Priority, Schedule
from dispatch.selectors.schedules import schedule_fields
from dispatch.timing import retry
from tenants.models import Tenant

# What a definition means when it leaves a field out: clean_schedule's defaults
# (dispatch/schedule_fields.py), in API names. The round-trip test pins the two together.
DEFAULTS: dict[str, Any] = {
    "timezone": "UTC",
    "retry": dict(retry.DEFAULT_POLICY),
    "concurrency": Overlap.FORBID.value,
    "misfire": Misfire.SKIP.value,
    "misfire_grace_s": settings.DEFAULT_MISFIRE_GRACE_S,
    "catch_up_limit": 10,
    "jitter_s": 0,
    "concurrency_key": None,
    "priority": Priority.DEFAULT.value,
    "duration": DurationClass.SHORT.value,
    "depends_on": [],
    "exclude_calendars": [],
    "only_calendars": [],
    "max_runs": None,
    "delete_after": None,
}
# Definition fields stored as links to other rows: a schedule knows them only once
# saved, so apply takes their wanted value from the file itself (by name, as given).
LINKED_FIELDS = ("depends_on", "exclude_calendars", "only_calendars")
# Always in an exported definition, default or not.
ALWAYS = ("name", "target")
# In a definition, not in the stored schedule's definition fields: handled by apply itself.
CONTROL_FIELDS = ("version", "paused")


def _iso_z(value: Any) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def definition_with(schedule: Schedule, depends_on: list[str]) -> dict[str, Any]:
    """The full definition of `schedule` (saved or not), its upstreams given by name.
    Apply builds the wanted definition on an unsaved schedule with this."""
    fields = schedule_fields(schedule)
    fields.pop("kind")
    return fields | {
        "cron": schedule.cron or None,
        "run_at": _iso_z(schedule.run_at.astimezone(UTC)) if schedule.run_at else None,
        "target": schedule.target,
        "retry": dict(retry.DEFAULT_POLICY) | dict(schedule.retry or {}),
        "depends_on": sorted(depends_on),
    }


def upstream_names(schedule: Schedule) -> list[str]:
    """The live upstreams' names (from the prefetch of `definitions_live` when there is one)."""
    return sorted(d.name for d in schedule.depends_on.all() if d.deleted_at is None)


def definition_of(schedule: Schedule) -> dict[str, Any]:
    """A stored schedule's full definition, defaults included (apply compares these)."""
    return definition_with(schedule, upstream_names(schedule))


def definition_filled(definition: dict[str, Any]) -> dict[str, Any]:
    """A definition as written (fields left out mean their default) with the defaults
    filled in: the full data an update needs, since a field missing from the file
    means "the default", not "as it is now"."""
    filled = {k: v for k, v in definition.items() if k not in CONTROL_FIELDS}
    for key, value in DEFAULTS.items():
        if filled.get(key) is None:
            filled[key] = [] if key in LINKED_FIELDS else value
    if isinstance(filled.get("retry"), dict):
        filled["retry"] = dict(retry.DEFAULT_POLICY) | filled["retry"]
    return filled


def _kept(key: str, value: Any) -> bool:
    if key in ALWAYS:
        return True
    if key in ("cron", "run_at"):
        return value is not None
    return key in DEFAULTS and value != DEFAULTS[key]


def definition_export(schedule: Schedule) -> dict[str, Any]:
    """The definition as a file would hold it: only the fields that differ from the
    default (name, cron or run_at, and target always), `paused: true` only when paused."""
    out = {k: v for k, v in definition_of(schedule).items() if _kept(k, v)}
    if "retry" in out:
        # Only the policy's keys that differ: the rest are filled back on apply.
        out["retry"] = {k: v for k, v in out["retry"].items() if DEFAULTS["retry"].get(k) != v}
    if schedule.paused:
        out["paused"] = True
    return out


def definitions_live(*, tenant: Tenant) -> QuerySet[Schedule]:
    """The tenant's live schedules that are definitions: not the one-off jobs of
    /v1/jobs (those carry the request digest their idempotency is checked with)."""
    return (
        Schedule.objects.filter(tenant=tenant, deleted_at__isnull=True, request_digest="")
        .prefetch_related(
            Prefetch("depends_on", queryset=Schedule.objects.only("name", "deleted_at")),
            "calendar_links__calendar",
        )
        .order_by("name", "id")
    )


def definitions_export(*, tenant: Tenant) -> list[dict[str, Any]]:
    """GET /v1/schedules:export: every definition of the tenant, by name."""
    return [definition_export(s) for s in definitions_live(tenant=tenant)]


def calendar_definition(calendar: Calendar) -> dict[str, Any]:
    """A calendar as apply's `calendars` takes it: its sources as stored (an .ics with its
    content, and its url and fetch time as the origin), so applying it fetches nothing."""
    out: dict[str, Any] = {"name": calendar.name}
    if calendar.description:
        out["description"] = calendar.description
    out["sources"] = calendars.shown_sources(calendar.sources)
    return out


def calendar_definitions_export(*, tenant: Tenant) -> list[dict[str, Any]]:
    """GET /v1/schedules:export's calendars: every live one of the tenant, by name."""
    live = Calendar.objects.filter(tenant=tenant, deleted_at__isnull=True).order_by("name")
    return [calendar_definition(c) for c in live]
