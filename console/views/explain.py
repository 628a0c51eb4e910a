"""The explainer page: why did (or didn't) a schedule run at a given time."""

from __future__ import annotations

from zoneinfo import ZoneInfo

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from console import forms as console_forms
from console.access import base_context, tenant_view
from dispatch import explain, selectors, services
from dispatch.models import Schedule
from dispatch.timing import cron
from tenants.roles import Principal, Role


@require_GET
@tenant_view(Role.VIEWER)
def explain_page(request: HttpRequest, principal: Principal) -> HttpResponse:
    sid = request.GET.get("schedule", "").strip()[:200]
    at_raw = request.GET.get("at", "").strip()
    at_utc = request.GET.get("at_utc", "").strip()
    answer: explain.Explanation | None = None
    error = ""
    schedule: Schedule | None = None
    if sid:
        # A name or an id (the picker is a text field): any of the tenant's
        # schedules, not only the first few hundred a dropdown could list.
        schedule = selectors.schedule_resolve(
            tenant=principal.tenant, ref=sid, include_deleted=True
        )
        if schedule is None:
            if selectors.as_uuid(sid) is not None:
                # Another tenant's id is indistinguishable from a missing one.
                raise Http404("schedule not found")
            error = f"schedule: no schedule with the name {sid!r}"
        elif schedule.deleted_at is None:
            sid = schedule.name
    if schedule is not None and (at_raw or at_utc):
        zone = cron.get_zone(schedule.timezone)
        try:
            if at_utc:
                at = console_forms.parse_local(at_utc, ZoneInfo("UTC"))
            else:
                at = console_forms.parse_local(at_raw, zone)
            answer = explain.explain(schedule=schedule, at=at, now=services.db_now())
            if not at_raw:
                at_raw = at.astimezone(zone).replace(tzinfo=None).isoformat(timespec="minutes")
        except (ValueError, OverflowError, cron.CronError) as exc:
            error = f"at: is not a date and time ({exc})"
    evidence = []
    if answer is not None:
        for e in answer.evidence:
            url = None
            if e.kind == "execution":
                url = reverse("console-execution", kwargs={"execution_id": e.id})
            elif e.kind == "schedule" and schedule is not None and schedule.deleted_at is None:
                url = reverse("console-schedule", kwargs={"schedule_id": e.id})
            evidence.append({"kind": e.kind, "id": e.id, "label": e.label, "url": url})
    ctx = base_context(
        request,
        principal,
        schedule=schedule,
        sid=sid,
        at_value=at_raw,
        answer=answer,
        evidence=evidence,
        error=error,
        zone=schedule.timezone if schedule else "UTC",
    )
    return render(request, "console/explain.html", ctx, status=400 if error else 200)
