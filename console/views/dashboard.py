"""The dashboard: what runs now, what failed, what is due next, usage against quota."""

from __future__ import annotations

from datetime import UTC, timedelta
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from console.access import base_context, tenant_view
from core.replicas import replica_reads
from dispatch import selectors, services
from dispatch.states import ExecutionState
from tenants.roles import Principal, Role

# The runs page filter behind "Recent failures" (its list also shows retries that failed).
FAILURE_STATES = ",".join([ExecutionState.FAILED, ExecutionState.TIMED_OUT, ExecutionState.DEAD])


# Rows of the running and failures lists; the counts above them say "20+" at this.
DASHBOARD_LIST = 20


def _dashboard_context(principal: Principal) -> dict[str, Any]:
    now = services.db_now()
    day_start = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    usage = selectors.tenant_usage(tenant=principal.tenant, day_start=day_start)
    return {
        "now": now,
        # Where the runs page links start: today's executions, the last day's failures.
        "day_start": day_start,
        "since_24h": now - timedelta(days=1),
        "running": selectors.executions_running(tenant=principal.tenant, limit=DASHBOARD_LIST),
        "troubled": selectors.executions_troubled(
            tenant=principal.tenant, since=now - timedelta(days=1), limit=DASHBOARD_LIST
        ),
        "list_limit": DASHBOARD_LIST,
        "failure_states": FAILURE_STATES,
        "usage": usage,
    }


def _upcoming_context(principal: Principal) -> dict[str, Any]:
    """Upcoming fires one row a schedule: an every-minute schedule is one row of 60."""
    now = services.db_now()
    horizon = timedelta(hours=1)
    groups, schedules = selectors.upcoming_by_schedule(
        tenant=principal.tenant, now=now, horizon=horizon
    )
    total, capped = selectors.upcoming_count(tenant=principal.tenant, now=now, horizon=horizon)
    return {
        "upcoming_groups": groups,
        "upcoming_schedules": schedules,
        "upcoming_total": total,
        "upcoming_capped": capped,
    }


@require_GET
@replica_reads
@tenant_view(Role.VIEWER)
def home(request: HttpRequest, principal: Principal) -> HttpResponse:
    ctx = base_context(
        request, principal, **_dashboard_context(principal), **_upcoming_context(principal)
    )
    return render(request, "console/dashboard.html", ctx)


@require_GET
@replica_reads
@tenant_view(Role.VIEWER)
def dashboard_upcoming(request: HttpRequest, principal: Principal) -> HttpResponse:
    ctx = base_context(request, principal, **_upcoming_context(principal))
    return render(request, "console/dashboard.html#upcoming", ctx)


@require_GET
@replica_reads
@tenant_view(Role.VIEWER)
def dashboard_live(request: HttpRequest, principal: Principal) -> HttpResponse:
    ctx = base_context(request, principal, **_dashboard_context(principal))
    return render(request, "console/dashboard.html#live", ctx)


UPCOMING_PAGE = 200


@require_GET
@replica_reads
@tenant_view(Role.VIEWER)
def upcoming(request: HttpRequest, principal: Principal) -> HttpResponse:
    """Every fire due in the next hour, soonest first, by pages (the dashboard groups them)."""
    try:
        page = max(1, int(request.GET.get("page", "1")))
    except ValueError:
        page = 1
    page = min(page, selectors.UPCOMING_COUNT_CAP // UPCOMING_PAGE)
    now = services.db_now()
    horizon = timedelta(hours=1)
    rows = selectors.upcoming_fires(
        tenant=principal.tenant, now=now, horizon=horizon, limit=page * UPCOMING_PAGE
    )
    total, capped = selectors.upcoming_count(tenant=principal.tenant, now=now, horizon=horizon)
    start = (page - 1) * UPCOMING_PAGE
    shown = rows[start:]
    ctx = base_context(
        request,
        principal,
        now=now,
        rows=shown,
        first=start + 1,
        last=start + len(shown),
        total=total,
        capped=capped,
        page=page,
        prev_page=page - 1 if page > 1 else None,
        next_page=page + 1 if start + len(shown) < total else None,
    )
    return render(request, "console/upcoming.html", ctx)
