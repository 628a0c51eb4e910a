"""Calendar pages: the tenant's calendars with a create form (sources as JSON, as in
the API), one calendar's dates for the coming year and a grid of three months
(?month=YYYY-MM moves it; ?role=only reads the calendar as `only_calendars` do), its
edit and its delete. Each change lands on a page that says what was done, once
(console.views.common.done).

Writes go through dispatch.services.calendars; a 400 names the field (shown with
the form), a delete of a calendar in use shows the 409's message (which names the
schedules using it).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from console.access import base_context, tenant_view
from console.views.common import done
from core.api import inputs
from dispatch.calendars import PRESETS
from dispatch.exceptions import InvalidSchedule, NotFound, StateConflict
from dispatch.models import Calendar, ScheduleCalendar
from dispatch.selectors import calendars as calendar_reads
from dispatch.services import calendars as calendar_writes
from tenants.roles import Principal, Role

# Shown as help beside an empty field, never as its value: a value there was a real
# calendar (NL holidays and weekends) that one click on Create saved by accident.
EXAMPLE = '[{"type": "holidays", "country": "NL"}, {"type": "preset", "preset": "weekends"}]'


# The form's fields besides the JSON: each makes one source of its kind without
# writing JSON (the common kinds); dispatch/calendars.py judges them as any source.
# The JSON field stays, for the rest (ranges, .ics text, several of a kind) and for
# editing what a calendar has: a calendar's sources are the JSON's, then these.
LABELS = {
    "name": "Name",
    "description": "Description",
    "dates": "Dates",
    "country": "Public holidays of",
    "subdivision": "Region",
    "ics_url": "iCalendar URL",
    "preset": "Days of the week",
}
SOURCE_FIELDS = ("dates", "country", "subdivision", "ics_url", "preset", "sources")
_SOURCE_KEY = re.compile(r"sources\[(\d+)\](?:\.(\w+))?$")


@dataclass
class CalendarInput:
    """A posted calendar form: what was typed, the service's data, which field each
    source came from (by index, to show a source's error beside its field) and the
    errors by field ("sources" is the JSON's, whose messages name their path)."""

    form: dict[str, str]
    data: dict[str, Any]
    origin: list[str] = field(default_factory=list)
    invalid: dict[str, list[str]] = field(default_factory=dict)

    def add(self, source: dict[str, Any], origin: str) -> None:
        self.data["sources"].append(source)
        self.origin.append(origin)

    def refuse(self, name: str, reason: str) -> None:
        self.invalid.setdefault(name, []).append(reason)

    def service_error(self, exc: InvalidSchedule) -> None:
        detail = exc.detail if isinstance(exc.detail, dict) else {}
        if not detail:
            self.refuse("sources", exc.message)
        for key, reasons in detail.items():
            for reason in reasons:
                self.refuse(*self._placed(key, str(reason)))

    def _placed(self, key: str, reason: str) -> tuple[str, str]:
        """The field a service error belongs to, and its text there."""
        found = _SOURCE_KEY.match(key)
        if found and int(found.group(1)) < len(self.origin):
            origin = self.origin[int(found.group(1))]
            if origin == "sources":
                return "sources", f"{key}: {reason}"
            if origin == "country" and found.group(2) == "subdivision":
                return "subdivision", reason
            return origin, reason
        if key in LABELS:
            return key, reason
        return "sources", f"{key}: {reason}"

    def summary(self) -> list[str]:
        return [
            reason if name == "sources" else f"{LABELS[name]}: {reason}"
            for name, reasons in self.invalid.items()
            for reason in reasons
        ]


def _form_data(post: Any) -> CalendarInput:
    form = {k: post.get(k, "") for k in ("name", "description", *SOURCE_FIELDS)}
    got = CalendarInput(form, {"name": form["name"], "description": form["description"]})
    got.data["sources"] = []
    if form["sources"].strip():
        try:
            # The API's JSON rules: depth, finite numbers, storable text.
            given = inputs.loads_json(form["sources"], "sources")
        except inputs.InvalidInput as exc:
            got.refuse("sources", exc.message)
        else:
            for source in given if isinstance(given, list) else [given]:
                got.add(source, "sources")  # not a list: the service says what it must be
    dates = [d for d in re.split(r"[\s,]+", form["dates"]) if d]
    if dates:
        got.add({"type": "dates", "dates": dates}, "dates")
    country, region = form["country"].strip(), form["subdivision"].strip()
    if country:
        got.add({"type": "holidays", "country": country, "subdivision": region or None}, "country")
    elif region:
        got.refuse("subdivision", "needs the country it is a region of")
    if form["ics_url"].strip():
        got.add({"type": "ics", "url": form["ics_url"].strip()}, "ics_url")
    if form["preset"]:
        got.add({"type": "preset", "preset": form["preset"]}, "preset")
    if not got.data["sources"]:
        got.data["sources"] = None  # none given: the service's "must be a non-empty list"
    return got


def _form_context(form: dict[str, str], got: CalendarInput | None = None) -> dict[str, Any]:
    """What templates/console/_calendar_form.html shows: the values, the errors (all
    of them above the form, each beside its field too), the choices and the example."""
    return {
        "form": form,
        "errors": got.summary() if got else [],
        "invalid": got.invalid if got else {},
        "presets": list(PRESETS),
        "example": EXAMPLE,
    }


def _saved_form(calendar: Calendar) -> dict[str, str]:
    """An existing calendar's form: its sources as JSON, the other source fields empty
    (what they make is added to the JSON's)."""
    return {
        "name": calendar.name,
        "description": calendar.description,
        "sources": json.dumps(calendar.sources, indent=1),
    }


# The month grid: how many months a page shows (the nav moves by as many), the
# weekdays' heads (Monday first, as ISO weeks and the calendar's weekday presets).
GRID_MONTHS = 3
WEEKDAYS = (
    ("Monday", "Mo"),
    ("Tuesday", "Tu"),
    ("Wednesday", "We"),
    ("Thursday", "Th"),
    ("Friday", "Fr"),
    ("Saturday", "Sa"),
    ("Sunday", "Su"),
)
_MONTH = re.compile(r"([0-9]{4})-([0-9]{2})")


def _month(text: str) -> dt.date | None:
    """The first of the month ``text`` (YYYY-MM) names; None if it names none."""
    found = _MONTH.fullmatch(text)
    if found is None:
        return None
    try:
        return dt.date(int(found[1]), int(found[2]), 1)
    except ValueError:  # month 13, year 0000
        return None


def _grid(request: HttpRequest, principal: Principal, calendar: Calendar) -> dict[str, Any]:
    """The month grid's context: its months from ?month (this month without it), read
    in ?role (by default as the schedules listing the calendar read it), links to the
    months before and after, and what was wrong with the parameters (shown inline;
    the grid falls back to this month, as the calendar's default role)."""
    today = dt.datetime.now(dt.UTC).date()
    errors: list[str] = []
    first = today.replace(day=1)
    month = request.GET.get("month")
    if month is not None:
        given = _month(month)
        if given is None:
            errors.append(f'month: "{month[:20]}" is not a month YYYY-MM, such as {today:%Y-%m}')
        else:
            first = given
    role = request.GET.get("role")
    if role is not None and role not in ScheduleCalendar.Role.values:
        errors.append(f'role: "{role[:20]}" must be exclude or only')
        role = None
    shown_role = role or calendar_reads.calendar_default_role(calendar)

    def months(start: dt.date) -> list[calendar_reads.MonthGrid]:
        return calendar_reads.calendar_month_grid(
            tenant=principal.tenant,
            calendar_id=calendar.id,
            first=start,
            count=GRID_MONTHS,
            role=shown_role,
        )

    try:
        shown = months(first)
    except InvalidSchedule as exc:  # a month outside the grid's years
        errors.append(exc.message)
        first = today.replace(day=1)
        shown = months(first)

    def link(start: dt.date, as_role: str | None = role) -> str:
        query = {"month": f"{start:%Y-%m}"} | ({"role": as_role} if as_role else {})
        return f"?{urlencode(query)}#cal-grid-h"

    before = calendar_reads.month_shift(first, -GRID_MONTHS)
    after = calendar_reads.month_shift(first, GRID_MONTHS)
    return {
        "months": shown,
        "errors": errors,
        "role": shown_role,
        "today": today,
        "weekdays": WEEKDAYS,
        "earlier": link(max(before, calendar_reads.GRID_FIRST_MONTH))
        if first > calendar_reads.GRID_FIRST_MONTH
        else "",
        "later": link(after) if after <= calendar_reads.GRID_LAST_MONTH else "",
        "now": link(today.replace(day=1)) if first != today.replace(day=1) else "",
        "as_exclude": link(first, ScheduleCalendar.Role.EXCLUDE),
        "as_only": link(first, ScheduleCalendar.Role.ONLY),
    }


def _get(principal: Principal, calendar_id: uuid.UUID) -> Calendar:
    try:
        return calendar_reads.calendar_get(tenant=principal.tenant, calendar_id=calendar_id)
    except NotFound:
        raise Http404("calendar not found") from None


@require_http_methods(["GET", "POST"])
@tenant_view(Role.VIEWER, write_role=Role.OPERATOR)
def calendars_page(request: HttpRequest, principal: Principal) -> HttpResponse:
    shown = _form_context({"name": "", "description": ""})
    status = 200
    if request.method == "POST":
        got = _form_data(request.POST)
        if not got.invalid:
            try:
                calendar = calendar_writes.calendar_create(actor=principal, data=got.data)
            except InvalidSchedule as exc:
                got.service_error(exc)
            else:
                url = reverse("console-calendar", args=[calendar.id])
                return done(request, url, f"Calendar {calendar.name} created.")
        shown, status = _form_context(got.form, got), 400
    ctx = base_context(
        request,
        principal,
        calendars=calendar_reads.calendar_list(tenant=principal.tenant),
        **shown,
    )
    return render(request, "console/calendars.html", ctx, status=status)


@require_http_methods(["GET", "POST"])
@tenant_view(Role.VIEWER, write_role=Role.OPERATOR)
def calendar_detail(
    request: HttpRequest, principal: Principal, calendar_id: uuid.UUID
) -> HttpResponse:
    calendar = _get(principal, calendar_id)
    shown = _form_context(_saved_form(calendar))
    status = 200
    if request.method == "POST":
        got = _form_data(request.POST)
        if not got.invalid:
            try:
                calendar = calendar_writes.calendar_update(
                    actor=principal, calendar_id=str(calendar.id), data=got.data
                )
            except InvalidSchedule as exc:
                got.service_error(exc)
            else:
                url = reverse("console-calendar", args=[calendar.id])
                return done(request, url, f"Calendar {calendar.name} saved.")
        shown, status = _form_context(got.form, got), 400
    today = dt.datetime.now(dt.UTC).date()
    grid = _grid(request, principal, calendar)
    if grid["errors"] and status == 200:
        status = 400
    ctx = base_context(
        request,
        principal,
        calendar=calendar,
        dates=calendar_reads.calendar_date_list(
            calendar, start=today, end=today + dt.timedelta(days=365)
        ),
        users=calendar_reads.calendar_users(calendar),
        delete_error="",
        grid=grid,
        **shown,
    )
    return render(request, "console/calendar_detail.html", ctx, status=status)


@require_POST
@tenant_view(Role.OPERATOR)
def calendar_delete(
    request: HttpRequest, principal: Principal, calendar_id: uuid.UUID
) -> HttpResponse:
    calendar = _get(principal, calendar_id)
    try:
        calendar_writes.calendar_delete(actor=principal, calendar_id=str(calendar.id))
    except StateConflict as exc:
        ctx = base_context(
            request,
            principal,
            calendar=calendar,
            dates=[],
            users=calendar_reads.calendar_users(calendar),
            delete_error=exc.message,
            grid=_grid(request, principal, calendar),
            **_form_context(_saved_form(calendar)),
        )
        return render(request, "console/calendar_detail.html", ctx, status=409)
    return done(request, reverse("console-calendars"), f"Calendar {calendar.name} deleted.")
