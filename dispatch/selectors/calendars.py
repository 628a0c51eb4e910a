"""Reads of calendars: a tenant's list, one, its expanded dates, its month grid, and the
date filters of schedules (the beat loads a whole batch's in one query)."""

from __future__ import annotations

import calendar as calendar_module
import datetime as dt
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from dispatch import calendars
from dispatch.exceptions import InvalidSchedule
from dispatch.models import Calendar, ScheduleCalendar
from dispatch.selectors.paging import tenant_object
from dispatch.timing.calendars import DateFilter, DateSet
from tenants.models import Tenant

MAX_DATES_WINDOW = 3 * 366
# The last day the dates API answers for: its default `to` (a year after `from`) and
# the expansion's year ends must stay inside the calendar (9999-12-31).
LAST_DAY = dt.date(9998, 12, 31)


def calendar_list(*, tenant: Tenant) -> list[Calendar]:
    # Bounded by services.calendars.MAX_CALENDARS: no paging needed.
    return list(Calendar.objects.filter(tenant=tenant, deleted_at__isnull=True).order_by("name"))


def calendar_get(*, tenant: Tenant, calendar_id: uuid.UUID | str) -> Calendar:
    live = Calendar.objects.filter(deleted_at__isnull=True)
    return tenant_object(live, tenant=tenant, pk=calendar_id, what="calendar")


# DateSets by (id, version, updated_at, what): `what` is the year of the stored
# expansion, or the years of an on-demand one. Every edit bumps the version and the
# time (the time tells apart a version whose transaction rolled back from the next
# edit's), a refresh changes the year, so an entry never goes stale; bounded by
# clearing when full.
_EXPANDED: dict[tuple[uuid.UUID, int, dt.datetime, object], DateSet] = {}
_EXPANDED_MAX = 1024


def _remembered(
    key: tuple[uuid.UUID, int, dt.datetime, object], make: Callable[[], DateSet]
) -> DateSet:
    found = _EXPANDED.get(key)
    if found is None:
        if len(_EXPANDED) >= _EXPANDED_MAX:
            _EXPANDED.clear()
        found = _EXPANDED[key] = make()
    return found


def calendar_dates(calendar: Calendar, *, years: tuple[int, ...] | None = None) -> DateSet:
    """The calendar's dates for its planning years as stored on its row: what the beat,
    the planners and the health pages read, never expanding anything (a row not
    expanded yet reads as no dates until the refresh). With ``years`` outside the
    stored ones (the dates API), an on-demand expansion by the bounded expander."""
    base = (calendar.id, calendar.version, calendar.updated_at)
    held = (
        calendars.years_around(calendar.expanded_for)
        if calendar.expanded is not None and calendar.expanded_for is not None
        else ()
    )
    if years is None or set(years) <= set(held):
        return _remembered(
            (*base, calendar.expanded_for),
            lambda: calendars.stored_dates(calendar.name, calendar.expanded),
        )
    return _remembered(
        (*base, years), lambda: calendars.expand(calendar.name, calendar.sources, years=years)
    )


def calendar_date_list(calendar: Calendar, *, start: dt.date, end: dt.date) -> list[dict[str, Any]]:
    """The dates the calendar holds in [start, end], with their labels."""
    for name, day in (("from", start), ("to", end)):
        if day > LAST_DAY:
            raise InvalidSchedule.field(name, f"must be a date up to {LAST_DAY}")
    if end < start:
        raise InvalidSchedule.field("to", f"{end} is before from {start}")
    if (end - start).days > MAX_DATES_WINDOW:
        raise InvalidSchedule.field("to", f"the window spans at most {MAX_DATES_WINDOW} days")
    years = tuple(range(start.year, end.year + 1))
    expanded = calendar_dates(calendar, years=years)
    out: list[dict[str, Any]] = []
    for offset in range((end - start).days + 1):
        day = start + dt.timedelta(days=offset)
        label = expanded.label(day)
        if label is not None:
            out.append({"date": day.isoformat(), "name": label})
    return out


def filter_of(
    links: Iterable[tuple[str, Calendar]], *, years: tuple[int, ...] | None = None
) -> DateFilter | None:
    """One schedule's filter from its (role, calendar) links in order; None without any.
    ``years``: as calendar_dates' (the month grid's years may lie outside the stored)."""
    exclude: list[DateSet] = []
    only: list[DateSet] = []
    for role, calendar in links:
        (exclude if role == ScheduleCalendar.Role.EXCLUDE else only).append(
            calendar_dates(calendar, years=years)
        )
    if not exclude and not only:
        return None
    return DateFilter(exclude=tuple(exclude), only=tuple(only))


def schedule_filters(schedule_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, DateFilter]:
    """The date filters of these schedules, in ONE query; schedules without calendars
    are absent."""
    ids = list(schedule_ids)
    if not ids:
        return {}
    by_schedule: dict[uuid.UUID, list[tuple[str, Calendar]]] = defaultdict(list)
    links = (
        ScheduleCalendar.objects.filter(schedule_id__in=ids)
        .select_related("calendar")
        .order_by("schedule_id", "role", "position")
    )
    for link in links:
        by_schedule[link.schedule_id].append((link.role, link.calendar))
    out: dict[uuid.UUID, DateFilter] = {}
    for sid, pairs in by_schedule.items():
        found = filter_of(pairs)
        if found is not None:
            out[sid] = found
    return out


def schedule_filter(schedule_id: uuid.UUID) -> DateFilter | None:
    return schedule_filters([schedule_id]).get(schedule_id)


def schedule_calendar_names(schedule_id: uuid.UUID) -> dict[str, list[str]]:
    """`exclude_calendars` / `only_calendars` of a schedule, names in order."""
    out: dict[str, list[str]] = {"exclude_calendars": [], "only_calendars": []}
    links = (
        ScheduleCalendar.objects.filter(schedule_id=schedule_id)
        .select_related("calendar")
        .order_by("role", "position")
    )
    for link in links:
        out[f"{link.role}_calendars"].append(link.calendar.name)
    return out


def calendar_users(calendar: Calendar) -> list[tuple[uuid.UUID, str]]:
    """Live schedules listing the calendar: (id, name), by name."""
    return list(
        ScheduleCalendar.objects.filter(calendar=calendar, schedule__deleted_at__isnull=True)
        .order_by("schedule__name")
        .values_list("schedule_id", "schedule__name")
        .distinct()
    )


# --------------------------------------------------------------------------- month grid
# The months the grid shows: from 1900 (older years are not anyone's plan, and the
# holiday rules are not meant for them) to the last month the dates API answers for.
GRID_FIRST_MONTH = dt.date(1900, 1, 1)
GRID_LAST_MONTH = LAST_DAY.replace(day=1)
_WEEKS = calendar_module.Calendar(firstweekday=calendar_module.MONDAY)


@dataclass(frozen=True)
class GridDay:
    """One day of a month grid: whether a schedule listing the calendar (in the grid's
    role) runs on it, and if not, why in a few words (a holiday's name, "Saturday")."""

    day: dt.date
    excluded: bool
    why: str = ""


@dataclass(frozen=True)
class MonthGrid:
    """A month as weeks Monday to Sunday; a day of the month before or after is None."""

    first: dt.date
    weeks: tuple[tuple[GridDay | None, ...], ...]


def month_shift(month: dt.date, months: int) -> dt.date:
    """The first of the month ``months`` after (before, when negative) ``month``'s."""
    index = month.year * 12 + month.month - 1 + months
    return dt.date(index // 12, index % 12 + 1, 1)


def calendar_default_role(calendar: Calendar) -> str:
    """How the grid reads a calendar unless told: as the only dates when every live
    schedule listing it does so in `only_calendars` (business days), else as excluded
    dates (what a calendar is for, and what it is before any schedule lists it)."""
    roles = set(
        ScheduleCalendar.objects.filter(calendar=calendar, schedule__deleted_at__isnull=True)
        .values_list("role", flat=True)
        .distinct()
    )
    only = ScheduleCalendar.Role.ONLY
    return str(only) if roles == {only} else str(ScheduleCalendar.Role.EXCLUDE)


def calendar_month_grid(
    *,
    tenant: Tenant,
    calendar_id: uuid.UUID | str,
    first: dt.date,
    count: int = 1,
    role: str = ScheduleCalendar.Role.EXCLUDE,
) -> list[MonthGrid]:
    """The excluded days of ``count`` months from ``first``'s for a schedule listing
    the tenant's calendar in ``role`` ("exclude": its dates; "only": the dates not in
    it), decided by the beat's own rule (DateFilter.reason). Months past the last the
    grid shows are left out; a first month outside them is InvalidSchedule ("month")."""
    calendar = calendar_get(tenant=tenant, calendar_id=calendar_id)
    first = first.replace(day=1)
    if not GRID_FIRST_MONTH <= first <= GRID_LAST_MONTH:
        raise InvalidSchedule.field(
            "month",
            f"{first.isoformat()[:7]} is outside the months shown,"
            f" {GRID_FIRST_MONTH.isoformat()[:7]} to {GRID_LAST_MONTH.isoformat()[:7]}",
        )
    if role not in ScheduleCalendar.Role.values:
        raise InvalidSchedule.field("role", "must be exclude or only")
    months = [month_shift(first, n) for n in range(max(count, 1))]
    months = [m for m in months if m <= GRID_LAST_MONTH]
    years = tuple(range(months[0].year, months[-1].year + 1))
    rule = filter_of([(role, calendar)], years=years)
    assert rule is not None  # noqa: S101 - one link always makes a filter
    grids = []
    for month in months:
        weeks = []
        for week in _WEEKS.monthdatescalendar(month.year, month.month):
            days: list[GridDay | None] = []
            for day in week:
                if day.month != month.month:
                    days.append(None)
                    continue
                if rule.allows(day):
                    days.append(GridDay(day, excluded=False))
                elif role == ScheduleCalendar.Role.EXCLUDE:
                    # A dates or range source without a name labels its days "".
                    days.append(GridDay(day, True, rule.exclude[0].label(day) or "listed date"))
                else:
                    days.append(GridDay(day, True, "not in this calendar"))
            weeks.append(tuple(days))
        grids.append(MonthGrid(month, tuple(weeks)))
    return grids
