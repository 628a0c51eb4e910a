"""Calendars: create, update, delete (operators), and a schedule's calendar links.

Each write is one transaction with its audit row. An edit changes the future of the
schedules listing the calendar: their staged occurrences are withdrawn (the same
path as a schedule edit) and next_run_at recomputed, so the beat plans them again
under the new dates. A calendar in use cannot be deleted (409 naming the schedules);
an edit that would leave a schedule with no run in five years is refused (400).

A save expands the sources (the bounded expander, within CALENDAR_EXPAND_BUDGET_S)
and stores the dates on the row, which is all the beat reads; `calendars_refresh_once`
(a control-pump step) expands again the rows stored in an earlier year, since
holidays and recurring events depend on the planning years.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.db.models.functions import Now

from core.db import db_clock, db_now
from dispatch import calendars
from dispatch.exceptions import InvalidSchedule, StateConflict
from dispatch.lifecycle import completion
from dispatch.models import Calendar, Kind, Schedule, ScheduleCalendar
from dispatch.selectors.calendars import calendar_users, filter_of
from dispatch.selectors.paging import as_uuid, tenant_object
from dispatch.services.common import save_unique
from dispatch.states import AuditAction
from dispatch.timing import cron
from dispatch.timing.calendars import DateFilter
from tenants.audit import audit_record
from tenants.roles import Principal

MAX_CALENDARS = 200
MAX_NAME = 100
MAX_PER_SCHEDULE = 10
CALENDAR_FIELDS = ("exclude_calendars", "only_calendars")


def calendar_snapshot(calendar: Calendar) -> dict[str, Any]:
    return {
        "name": calendar.name,
        "description": calendar.description,
        "sources": calendars.source_summary(calendar.sources),
        "version": calendar.version,
    }


def record_audit(actor: Principal, action: str, calendar: Calendar, **kw: Any) -> None:
    audit_record(
        actor=actor, action=action, object_type="calendar", object_id=str(calendar.id), **kw
    )


def clean_name(value: Any) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME:
        raise InvalidSchedule.field("name", f"must be 1..{MAX_NAME} characters")
    if not value.isprintable():
        raise InvalidSchedule.field("name", "must be printable characters (no control characters)")
    return value.strip()


def clean_description(value: Any) -> str:
    if not isinstance(value, str) or len(value) > 500 or not value.isprintable():
        raise InvalidSchedule.field("description", "must be printable text, at most 500 characters")
    return value


_NAME_TAKEN = {"calendar_name_unique_live": ("name", "a calendar with this name already exists")}


def _locked(actor: Principal, calendar_id: str) -> Calendar:
    live = Calendar.objects.select_for_update().filter(deleted_at__isnull=True)
    return tenant_object(live, tenant=actor.tenant, pk=calendar_id, what="calendar")


def _store_expansion(calendar: Calendar, budget: calendars.Budget, *, strict: bool = True) -> None:
    """Expand the calendar's sources for this year's planning years onto its row; strict
    (sources being saved): 400 naming the source that cannot be, within the budget."""
    year = db_now().year
    dates = calendars.expand(
        calendar.name,
        calendar.sources,
        years=calendars.years_around(year),
        budget=budget,
        strict=strict,
    )
    calendar.expanded = calendars.stored_expansion(dates)
    calendar.expanded_for = year


@transaction.atomic
def calendar_create(*, actor: Principal, data: dict[str, Any]) -> Calendar:
    budget = calendars.Budget()
    calendar = Calendar(
        tenant=actor.tenant,
        name=clean_name(data.get("name")),
        description=clean_description(data.get("description", "")),
        sources=calendars.clean_sources(data.get("sources"), tenant=actor.tenant, budget=budget),
        created_by=actor.label,
        updated_by=actor.label,
    )
    _store_expansion(calendar, budget)
    live = Calendar.objects.filter(tenant=actor.tenant, deleted_at__isnull=True)
    if live.count() >= MAX_CALENDARS:
        raise InvalidSchedule.field("name", f"a tenant has at most {MAX_CALENDARS} calendars")
    save_unique(calendar, _NAME_TAKEN, force_insert=True)
    calendar.refresh_from_db(fields=["created_at", "updated_at"])
    record_audit(actor, AuditAction.CALENDAR_CREATE, calendar, after=calendar_snapshot(calendar))
    return calendar


@transaction.atomic
def calendar_update(*, actor: Principal, calendar_id: str, data: dict[str, Any]) -> Calendar:
    calendar = _locked(actor, calendar_id)
    before = calendar_snapshot(calendar)
    if "name" in data:
        calendar.name = clean_name(data["name"])
    if "description" in data:
        calendar.description = clean_description(data["description"])
    budget = calendars.Budget()
    if "sources" in data:
        calendar.sources = calendars.clean_sources(
            data["sources"], tenant=actor.tenant, budget=budget
        )
    if "sources" in data or calendar.expanded is None or calendar.expanded_for != db_now().year:
        # Sources kept as they are were checked when saved (or before the bounds
        # existed): an edit of the name does not fail on them.
        _store_expansion(calendar, budget, strict="sources" in data)
    calendar.version += 1
    calendar.updated_by = actor.label
    # The wall clock, not the transaction's: it also keys the expansion cache, and an
    # edit rolled back must not share a key with the next one (same version).
    calendar.updated_at = db_clock()
    save_unique(calendar, _NAME_TAKEN)
    if "sources" in data:
        _replan_users(actor, calendar)
    record_audit(
        actor,
        AuditAction.CALENDAR_UPDATE,
        calendar,
        before=before,
        after=calendar_snapshot(calendar),
    )
    return calendar


@transaction.atomic
def calendar_delete(*, actor: Principal, calendar_id: str) -> None:
    calendar = _locked(actor, calendar_id)
    users = calendar_users(calendar)
    if users:
        names = ", ".join(f"'{name}'" for _, name in users[:20])
        more = f" and {len(users) - 20} more" if len(users) > 20 else ""
        raise StateConflict(
            f"calendar '{calendar.name}' is used by schedules {names}{more}; remove it from "
            "their exclude_calendars / only_calendars first",
            detail={"schedules": [str(sid) for sid, _ in users]},
        )
    record_audit(actor, AuditAction.CALENDAR_DELETE, calendar, before=calendar_snapshot(calendar))
    calendar.deleted_at = Now()
    calendar.save(update_fields=["deleted_at"])


# Rows refreshed per round of the control pump: each is bounded by the budget, and
# the pump goes round again at once while there are more.
REFRESH_BATCH = 5


def calendars_refresh_once(*, limit: int = REFRESH_BATCH) -> int:
    """Expand again (bounded, leniently) the live calendars stored for an earlier year,
    or not expanded yet: how many were refreshed. Outside the firing path (a
    control-pump step); until refreshed the stored dates are read as they are.

    No lock is held while expanding: the row is written only if it is still the
    version that was expanded (another beat's pump doing the same, or an edit that
    stored its own expansion, makes this write a no-op)."""
    year = db_now().year
    stale = Calendar.objects.filter(
        Q(expanded_for__lt=year) | Q(expanded_for__isnull=True) | Q(expanded__isnull=True),
        deleted_at__isnull=True,
    ).order_by("expanded_for", "id")[:limit]
    refreshed = 0
    for calendar in stale:
        dates = calendars.expand(
            calendar.name, calendar.sources, years=calendars.years_around(year)
        )
        refreshed += Calendar.objects.filter(
            id=calendar.id, version=calendar.version, updated_at=calendar.updated_at
        ).update(expanded=calendars.stored_expansion(dates), expanded_for=year)
    return refreshed


def _replan_users(actor: Principal, calendar: Calendar) -> None:
    """The calendar's dates changed: withdraw what its schedules staged, recompute
    their next run under the new dates (400 if one would never fire)."""
    from dispatch.services.schedules import replanned_event, withdraw_staged

    users = [sid for sid, _ in calendar_users(calendar)]
    if not users:
        return
    now = db_now()
    schedules = Schedule.objects.select_for_update().filter(id__in=users).order_by("id")
    for schedule in schedules:
        if schedule.kind != Kind.CRON or schedule.paused or completion(schedule, now=now):
            continue
        withdrawn = withdraw_staged(schedule)
        links = [(link.role, link.calendar) for link in _links(schedule)]
        dates = filter_of(links)
        has_upstreams = schedule.depends_on.exists()
        if not has_upstreams:
            schedule.next_run_at = next_run(schedule, now=now, dates=dates, field="sources")
        schedule.save(update_fields=["next_run_at"])
        if withdrawn:
            replanned_event(
                schedule, actor, withdrawn, what=f"calendar '{calendar.name}' edited", now=now
            )


def _links(schedule: Schedule) -> list[ScheduleCalendar]:
    return list(
        ScheduleCalendar.objects.filter(schedule=schedule)
        .select_related("calendar")
        .order_by("role", "position")
    )


def next_run(
    schedule: Schedule, *, now: datetime, dates: DateFilter | None, field: str
) -> datetime:
    """The schedule's first run after ``now`` under ``dates``; 400 on ``field`` if the
    calendars leave none within five years."""
    try:
        return cron.next_after(
            schedule.cron, schedule.timezone, after=now, seed=str(schedule.id), dates=dates
        )
    except cron.CronError as exc:
        raise InvalidSchedule.field(
            field, f"schedule '{schedule.name}' would never run: {exc.message}"
        ) from None


# --------------------------------------------------------------------------- schedule links


@dataclass(frozen=True)
class CalendarChoice:
    """A schedule's calendars as validated from `exclude_calendars` / `only_calendars`."""

    exclude: tuple[Calendar, ...]
    only: tuple[Calendar, ...]

    def links(self) -> list[tuple[str, Calendar]]:
        exclude, only = str(ScheduleCalendar.Role.EXCLUDE), str(ScheduleCalendar.Role.ONLY)
        return [(exclude, c) for c in self.exclude] + [(only, c) for c in self.only]

    def names(self) -> dict[str, list[str]]:
        return {
            "exclude_calendars": [c.name for c in self.exclude],
            "only_calendars": [c.name for c in self.only],
        }


def _resolve(actor: Principal, field: str, value: Any) -> tuple[Calendar, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidSchedule.field(field, "must be a list of calendar names (or ids)")
    if len(value) > MAX_PER_SCHEDULE:
        raise InvalidSchedule.field(field, f"at most {MAX_PER_SCHEDULE} calendars")
    live = Calendar.objects.filter(tenant=actor.tenant, deleted_at__isnull=True)
    by_name = {c.name: c for c in live.filter(name__in=value)}
    ids = [u for u in (as_uuid(v) for v in value if v not in by_name) if u is not None]
    by_id = {str(c.id): c for c in live.filter(id__in=ids)} if ids else {}
    out: list[Calendar] = []
    for v in value:
        found = by_name.get(v) or by_id.get(str(as_uuid(v)) if as_uuid(v) else "")
        if found is None:
            raise InvalidSchedule.field(field, f"unknown calendar {v[:100]!r}")
        if found in out:
            raise InvalidSchedule.field(field, f"calendar {v[:100]!r} is listed twice")
        out.append(found)
    return tuple(out)


def clean_calendar_fields(
    actor: Principal, data: dict[str, Any], *, existing: Schedule | None = None
) -> CalendarChoice | None:
    """Pop `exclude_calendars` / `only_calendars` from ``data`` (they are not columns);
    the choice, merged over the existing schedule's, or None when neither was given."""
    given = {f: data.pop(f) for f in CALENDAR_FIELDS if f in data}
    if not given:
        return None
    current = [(link.role, link.calendar) for link in _links(existing)] if existing else []
    exclude = (
        _resolve(actor, "exclude_calendars", given["exclude_calendars"])
        if "exclude_calendars" in given
        else tuple(c for r, c in current if r == ScheduleCalendar.Role.EXCLUDE)
    )
    only = (
        _resolve(actor, "only_calendars", given["only_calendars"])
        if "only_calendars" in given
        else tuple(c for r, c in current if r == ScheduleCalendar.Role.ONLY)
    )
    return CalendarChoice(exclude=exclude, only=only)


def check_calendars_apply(
    choice: CalendarChoice | None, *, has_upstreams: bool, one_off: bool
) -> None:
    """Calendars move a cron schedule's occurrences. A dependent runs for its upstreams'
    occurrences and a one-off at its run_at, not by their own timing: calendars would do
    nothing there, so they are refused rather than stored and silently ignored."""
    if choice is None or not (choice.exclude or choice.only):
        return
    field = "exclude_calendars" if choice.exclude else "only_calendars"
    if one_off:
        raise InvalidSchedule.field(
            field, "a one-off runs at its run_at; calendars apply to cron schedules"
        )
    if has_upstreams:
        raise InvalidSchedule.field(
            field,
            "a schedule with depends_on runs after its upstreams' occurrences; "
            "give the calendars to the upstream schedule instead",
        )


def store_calendar_links(schedule: Schedule, choice: CalendarChoice) -> None:
    ScheduleCalendar.objects.filter(schedule=schedule).delete()
    ScheduleCalendar.objects.bulk_create(
        ScheduleCalendar(schedule=schedule, calendar=cal, role=role, position=i)
        for i, (role, cal) in enumerate(choice.links())
    )


def choice_filter(choice: CalendarChoice) -> DateFilter | None:
    return filter_of(choice.links())


def schedule_uses(schedule_id: uuid.UUID) -> bool:
    return ScheduleCalendar.objects.filter(schedule_id=schedule_id).exists()
