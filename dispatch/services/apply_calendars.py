"""The calendars of a schedules-as-code file (`calendars` in POST /v1/schedules:apply).

Inside apply's one transaction (dispatch/services/apply.py) and before its
schedules, which name them: a missing name is created, a calendar whose
description or sources differ is updated, an equal one is left alone (no write, no
version bump). Every write goes through the calendar services, so audit rows and
the re-planning of the schedules that list an edited calendar are theirs.

Sources are compared as stored (dispatch/calendars.clean_sources): an .ics given as
a url is fetched again — the file says "the calendar at this url" — and an .ics given
as content (what export writes, with its url and fetch time as its origin) is taken
as it is. With `prune`, calendars the file does not name are deleted, after the
schedules were pruned, and only when the request has a `calendars` list at all (a
file of schedules alone never deletes calendars); one still listed by a schedule
that stays is calendar_delete's 409, which names the schedules, and nothing is applied.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from dispatch import calendars
from dispatch.exceptions import InvalidSchedule, under
from dispatch.models import Calendar
from dispatch.services.calendars import (
    MAX_CALENDARS,
    calendar_create,
    calendar_delete,
    calendar_update,
    clean_description,
    clean_name,
)
from tenants.roles import Principal

CALENDAR_KEYS = ("name", "description", "sources")


@dataclass
class CalendarChange:
    name: str
    action: str  # create | update | unchanged | delete
    id: uuid.UUID | None = None
    version: int | None = None
    fields: dict[str, dict[str, Any]] = field(default_factory=dict)


def _shown(sources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return calendars.source_summary(sources)


def _same_sources(stored: list[dict[str, Any]], wanted: list[dict[str, Any]]) -> bool:
    # A url fetched again has a new fetch time: the same content from the same url is
    # the same calendar (the stored time stays).
    def dates(sources: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in item.items() if k != "fetched_at"} for item in sources]

    return dates(stored) == dates(wanted)


def _wanted(actor: Principal, index: int, raw: Any) -> dict[str, Any]:
    """A calendar definition checked as POST /v1/calendars checks its body."""
    if not isinstance(raw, dict):
        raise InvalidSchedule.field(f"calendars[{index}]", "must be an object with name, sources")
    unknown = sorted(k for k in raw if k not in CALENDAR_KEYS)
    if unknown:
        raise InvalidSchedule.field(f"calendars[{index}].{unknown[0]}", "unknown field")
    try:
        return {
            "name": clean_name(raw.get("name")),
            "description": clean_description(raw.get("description", "")),
            "sources": calendars.clean_sources(raw.get("sources"), tenant=actor.tenant),
        }
    except InvalidSchedule as exc:
        raise under(f"calendars[{index}]", exc) from None


def calendars_apply(*, actor: Principal, definitions: Any) -> list[CalendarChange]:
    """Make the tenant's calendars named in `definitions` match them (in request order)."""
    if not isinstance(definitions, list):
        raise InvalidSchedule.field("calendars", "must be a list of calendar definitions")
    if len(definitions) > MAX_CALENDARS:
        raise InvalidSchedule.field("calendars", f"a tenant has at most {MAX_CALENDARS} calendars")
    wanted = [_wanted(actor, i, raw) for i, raw in enumerate(definitions)]
    seen: dict[str, int] = {}
    for i, item in enumerate(wanted):
        if item["name"] in seen:
            raise InvalidSchedule.field(
                f"calendars[{i}].name",
                f"duplicate: {item['name']!r} is also calendars[{seen[item['name']]}]",
            )
        seen[item["name"]] = i
    live = {
        c.name: c
        for c in Calendar.objects.select_for_update().filter(
            tenant=actor.tenant, deleted_at__isnull=True, name__in=list(seen)
        )
    }
    changes = []
    for i, item in enumerate(wanted):
        try:
            changes.append(_carry_out(actor, item, live.get(item["name"])))
        except InvalidSchedule as exc:
            raise under(f"calendars[{i}]", exc) from None
    return changes


def _carry_out(actor: Principal, item: dict[str, Any], existing: Calendar | None) -> CalendarChange:
    if existing is None:
        created = calendar_create(actor=actor, data=item)
        return CalendarChange(item["name"], "create", created.id, created.version)
    fields: dict[str, dict[str, Any]] = {}
    if existing.description != item["description"]:
        fields["description"] = {"before": existing.description, "after": item["description"]}
    if not _same_sources(existing.sources, item["sources"]):
        fields["sources"] = {"before": _shown(existing.sources), "after": _shown(item["sources"])}
    if not fields:
        return CalendarChange(item["name"], "unchanged", existing.id, existing.version)
    data = {key: item[key] for key in fields}  # cleaned sources: clean again, no fetch
    updated = calendar_update(actor=actor, calendar_id=str(existing.id), data=data)
    return CalendarChange(item["name"], "update", updated.id, updated.version, fields)


def calendars_prune(*, actor: Principal, keep: set[str]) -> list[CalendarChange]:
    """Delete the tenant's live calendars not named in `keep` (409 if one is in use)."""
    gone = (
        Calendar.objects.filter(tenant=actor.tenant, deleted_at__isnull=True)
        .exclude(name__in=keep)
        .order_by("name")
    )
    changes = []
    for calendar in gone:
        calendar_delete(actor=actor, calendar_id=str(calendar.id))
        changes.append(CalendarChange(calendar.name, "delete", calendar.id, calendar.version))
    return changes
