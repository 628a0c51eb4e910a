"""Health pages: the schedule list sorted by health (least healthy first: most
consecutive failures, then most dead runs in the last 24 h; a bounded triage list like
`GET /v1/schedules?sort=health`, see dispatch/selectors/health.py for why), and the
dashboard's health block (failing now, paused, counts, the status grid), which the
dashboard loads as its own request so the page and its 5 s refresh do not pay for it."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from console import charts
from console.access import base_context, tenant_view, viewer_zone
from console.views.common import is_htmx
from core.replicas import replica_reads
from dispatch import selectors, services
from tenants.roles import Principal, Role

HEALTH_LIST_LIMIT = 100
# The dashboard's grid: a shorter row per schedule than the schedule page's.
DASHBOARD_PAST = 24


@require_GET
@replica_reads
@tenant_view(Role.VIEWER)
def schedules_by_health(request: HttpRequest, principal: Principal) -> HttpResponse:
    now = services.db_now()
    ranked = selectors.schedules_by_health(
        tenant=principal.tenant, now=now, limit=HEALTH_LIST_LIMIT
    )
    health = selectors.schedule_health_many(
        tenant=principal.tenant, schedules=[r.schedule for r in ranked], now=now
    )
    ctx = base_context(
        request,
        principal,
        rows=[(r.schedule, health[r.schedule.id]) for r in ranked],
        limit=HEALTH_LIST_LIMIT,
    )
    return render(request, "console/schedules_health.html", ctx)


@require_GET
@replica_reads
@tenant_view(Role.VIEWER)
def dashboard_health(request: HttpRequest, principal: Principal) -> HttpResponse:
    now = services.db_now()
    zone = viewer_zone(request)
    board = selectors.health_dashboard(tenant=principal.tenant, now=now, grid_past=DASHBOARD_PAST)
    activity = selectors.activity_by_hour(tenant=principal.tenant, now=now)
    ctx = base_context(
        request,
        principal,
        zone=zone,
        activity=activity,
        activity_scan=selectors.ACTIVITY_SCAN,
        chart=charts.activity_chart(activity, zone),
        chart_id="tenant-activity",
        chart_title="Runs per hour, last 24 hours",
        board=board,
        rows=board.grid,
        outcomes=selectors.OUTCOMES,
        show_names=True,
    )
    # The dashboard swaps the block in; opened by itself (no script) it is a page.
    name = "_health_dashboard.html" if is_htmx(request) else "dashboard_health.html"
    return render(request, f"console/{name}", ctx)
