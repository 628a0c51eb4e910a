"""Calendar pages: the tenant's calendars with a create form (sources as JSON, as in
the API), one calendar's dates for the coming year, its edit and its delete. Each
change lands on a page that says what was done, once (console.views.common.done).

Writes go through dispatch.services.calendars; a 400 names the field (shown with
the form), a delete of a calendar in use shows the 409's message (which names the
schedules using it).
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from console.access import base_context, tenant_view
from console.views.common import done
from core.api import inputs
from dispatch.exceptions import InvalidSchedule, NotFound, StateConflict
from dispatch.models import Calendar
from dispatch.selectors import calendars as calendar_reads
from dispatch.services import calendars as calendar_writes
from tenants.roles import Principal, Role

# Shown as help beside an empty field, never as its value: a value there was a real
# calendar (NL holidays and weekends) that one click on Create saved by accident.
EXAMPLE = '[{"type": "holidays", "country": "NL"}, {"type": "preset", "preset": "weekends"}]'


def _form_data(post: Any) -> tuple[dict[str, str], dict[str, Any], list[str]]:
    form = {k: post.get(k, "") for k in ("name", "description", "sources")}
    data: dict[str, Any] = {"name": form["name"], "description": form["description"]}
    try:
        # The API's JSON rules: depth, finite numbers, storable text.
        data["sources"] = inputs.loads_json(form["sources"] or "null", "sources")
    except inputs.InvalidInput as exc:
        return form, data, [exc.message]
    return form, data, []


def _errors(exc: InvalidSchedule) -> list[str]:
    detail = exc.detail if isinstance(exc.detail, dict) else {}
    return [f"{k}: {r}" for k, rs in detail.items() for r in rs] or [exc.message]


def _get(principal: Principal, calendar_id: uuid.UUID) -> Calendar:
    try:
        return calendar_reads.calendar_get(tenant=principal.tenant, calendar_id=calendar_id)
    except NotFound:
        raise Http404("calendar not found") from None


@require_http_methods(["GET", "POST"])
@tenant_view(Role.VIEWER, write_role=Role.OPERATOR)
def calendars_page(request: HttpRequest, principal: Principal) -> HttpResponse:
    form = {"name": "", "description": "", "sources": ""}
    errors: list[str] = []
    status = 200
    if request.method == "POST":
        form, data, errors = _form_data(request.POST)
        if not errors:
            try:
                calendar = calendar_writes.calendar_create(actor=principal, data=data)
            except InvalidSchedule as exc:
                errors = _errors(exc)
            else:
                url = reverse("console-calendar", args=[calendar.id])
                return done(request, url, f"Calendar {calendar.name} created.")
        status = 400
    ctx = base_context(
        request,
        principal,
        calendars=calendar_reads.calendar_list(tenant=principal.tenant),
        form=form,
        errors=errors,
        example=EXAMPLE,
    )
    return render(request, "console/calendars.html", ctx, status=status)


@require_http_methods(["GET", "POST"])
@tenant_view(Role.VIEWER, write_role=Role.OPERATOR)
def calendar_detail(
    request: HttpRequest, principal: Principal, calendar_id: uuid.UUID
) -> HttpResponse:
    calendar = _get(principal, calendar_id)
    errors: list[str] = []
    status = 200
    form = {
        "name": calendar.name,
        "description": calendar.description,
        "sources": json.dumps(calendar.sources, indent=1),
    }
    if request.method == "POST":
        form, data, errors = _form_data(request.POST)
        if not errors:
            try:
                calendar = calendar_writes.calendar_update(
                    actor=principal, calendar_id=str(calendar.id), data=data
                )
            except InvalidSchedule as exc:
                errors = _errors(exc)
            else:
                url = reverse("console-calendar", args=[calendar.id])
                return done(request, url, f"Calendar {calendar.name} saved.")
        status = 400
    today = dt.datetime.now(dt.UTC).date()
    ctx = base_context(
        request,
        principal,
        calendar=calendar,
        form=form,
        errors=errors,
        dates=calendar_reads.calendar_date_list(
            calendar, start=today, end=today + dt.timedelta(days=365)
        ),
        users=calendar_reads.calendar_users(calendar),
        delete_error="",
        example=EXAMPLE,
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
            form={"name": calendar.name, "description": calendar.description,
                  "sources": json.dumps(calendar.sources, indent=1)},
            errors=[],
            dates=[],
            users=calendar_reads.calendar_users(calendar),
            delete_error=exc.message,
            example=EXAMPLE,
        )  # fmt: skip
        return render(request, "console/calendar_detail.html", ctx, status=409)
    return done(request, reverse("console-calendars"), f"Calendar {calendar.name} deleted.")
