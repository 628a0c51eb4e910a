"""Platform operators' pages (staff only, across tenants): health and the audit log."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from console import forms as console_forms
from console.access import base_context, principal_for, staff_view, viewer_zone
from dispatch import selectors, services
from tenants import selectors as tenant_selectors


@require_GET
@staff_view
def ops_overview(request: HttpRequest) -> HttpResponse:
    now = services.db_now()
    ctx = base_context(
        request,
        principal_for(request),
        now=now,
        all_tenants=selectors.ops_tenants(),
        beats=selectors.ops_beats(),
        workers=selectors.ops_workers(since=now - timedelta(hours=1)),
        partitions=selectors.ops_partitions(),
        queues=selectors.queue_depths(settings.CELERY_BROKER_URL),
        lag=selectors.ops_fire_lag(since=now - timedelta(hours=1)),
        dead=selectors.ops_dead(),
    )
    return render(request, "console/ops.html", ctx)


@require_GET
@staff_view
def ops_audit(request: HttpRequest) -> HttpResponse:
    actor = request.GET.get("actor", "").strip()[:200]
    tenant = request.GET.get("tenant", "").strip()[:63]
    action = request.GET.get("action", "").strip()[:64]
    since_raw = request.GET.get("since", "").strip()
    until_raw = request.GET.get("until", "").strip()
    zone = viewer_zone(request)
    error = ""
    since = until = None
    try:
        since = console_forms.parse_local(since_raw, zone) if since_raw else None
        until = console_forms.parse_local(until_raw, zone) if until_raw else None
    except ValueError as exc:
        error = f"since/until: not a date and time in range ({exc})"
    rows = tenant_selectors.audit_search(
        actor=actor, tenant_slug=tenant, action=action, since=since, until=until, limit=200
    )
    ctx = base_context(
        request,
        principal_for(request),
        rows=rows,
        actor=actor,
        tenant_q=tenant,
        action=action,
        since=since_raw,
        until=until_raw,
        error=error,
    )
    return render(request, "console/audit.html", ctx, status=400 if error else 200)
