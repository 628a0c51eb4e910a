"""The runs page: every execution of the tenant, filtered (state, schedule,
trigger, time range, error text, re-runs), in keyset pages with a capped total.

The filters are the API's (`selectors.execution_filter`, the same validation
and the same indexes as GET /v1/executions); a bad value is shown next to the
form (400), never a 500. Links from elsewhere pre-fill it (`?state=dead`,
`?schedule=<id>`); an operator's link into another tenant's runs carries
`tenant=<slug>` and offers the switch instead of showing the wrong tenant.
"""

from __future__ import annotations

from datetime import datetime
from urllib.parse import urlencode

from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from console import forms as console_forms
from console.access import base_context, tenant_view, viewer_zone
from console.views.common import is_htmx
from core.replicas import replica_reads
from dispatch import selectors
from dispatch.exceptions import InvalidSchedule
from dispatch.history import partitions
from dispatch.models import Schedule
from dispatch.states import ExecutionState, Trigger
from tenants import selectors as tenant_selectors
from tenants.roles import Principal, Role

PAGE = 50
# The form's parameters, in the order the links carry them.
PARAMS = ("state", "schedule", "trigger", "from", "to", "error", "rerun")
# Named groups offered next to the single states (any comma list works in the URL).
STATE_GROUPS = (
    ("failed,timed_out,dead", "failures (failed, timed out, dead)"),
    ("scheduled,queued,running,retry_scheduled", "not finished"),
)


def _raw(query: QueryDict) -> dict[str, str]:
    """The filter values as given: repeated values (`state=a&state=b`) join as a comma list."""
    out = {}
    for name in PARAMS:
        values = [v.strip() for v in query.getlist(name) if v.strip()]
        if values:
            out[name] = ",".join(values)[:400]
    return out


def _instant(raw: str, field: str, request: HttpRequest) -> datetime:
    try:
        return console_forms.parse_local(raw, viewer_zone(request))
    except ValueError as exc:
        raise InvalidSchedule.field(field, f"is not a date and time ({exc})") from None


def _local(value: datetime | None, request: HttpRequest) -> str:
    """An instant as the datetime-local input shows it, in the viewer's zone."""
    if value is None:
        return ""
    return value.astimezone(viewer_zone(request)).replace(tzinfo=None).isoformat("T", "minutes")


def _schedule(principal: Principal, ref: str) -> Schedule:
    schedule = selectors.schedule_resolve(tenant=principal.tenant, ref=ref, include_deleted=True)
    if schedule is None:
        # Another tenant's id reads exactly like an unknown one.
        raise InvalidSchedule.field("schedule", f"no schedule {ref[:80]!r} (a name or an id)")
    return schedule


def _filter(
    request: HttpRequest, principal: Principal, raw: dict[str, str]
) -> tuple[selectors.ExecutionFilter, Schedule | None]:
    schedule = _schedule(principal, raw["schedule"]) if "schedule" in raw else None
    since = _instant(raw["from"], "from", request) if "from" in raw else None
    until = _instant(raw["to"], "to", request) if "to" in raw else None
    flt = selectors.execution_filter(
        state=raw.get("state"),
        schedule_id=schedule.id if schedule else None,
        trigger=raw.get("trigger"),
        since=since,
        until=until,
        error=raw.get("error"),
        rerun=True if raw.get("rerun") else None,
    )
    return flt, schedule


def _total(counted: tuple[int, bool] | None) -> str:
    if counted is None:
        return ""
    n, capped = counted
    return f"{n:,}+" if capped else f"{n:,}"


@require_GET
@replica_reads
@tenant_view(Role.VIEWER)
def runs_page(request: HttpRequest, principal: Principal) -> HttpResponse:
    raw = _raw(request.GET)
    other = request.GET.get("tenant", "").strip()[:63]
    if other and other != principal.tenant.slug:
        return _other_tenant(request, principal, other)
    cursor = request.GET.get("cursor", "").strip() or None
    error = ""
    schedule: Schedule | None = None
    flt: selectors.ExecutionFilter | None = None
    page = selectors.ExecutionPage(items=[], next_cursor=None)
    total = ""
    try:
        flt, schedule = _filter(request, principal, raw)
        page = selectors.execution_list(
            tenant=principal.tenant, cursor=cursor, limit=PAGE, flt=flt, with_schedule=True
        )
        total = _total(selectors.execution_count(tenant=principal.tenant, flt=flt))
    except InvalidSchedule as exc:
        error = exc.message
    base = reverse("console-runs")
    state = raw.get("state", "")
    ctx = base_context(
        request,
        principal,
        rows=page.items,
        total=total,
        scan_limited=page.scan_limited,
        next_url=f"{base}?{urlencode({**raw, 'cursor': page.next_cursor})}"
        if page.next_cursor
        else "",
        first_url=f"{base}?{urlencode(raw)}" if cursor else "",
        error=error,
        f=raw,
        schedule=schedule,
        # The schedule field shows the name it resolved to (an id from a link reads badly).
        schedule_value=schedule.name
        if schedule and not schedule.deleted_at
        else raw.get("schedule", ""),
        from_value=_local(flt.since, request) if flt else raw.get("from", ""),
        to_value=_local(flt.until, request) if flt else raw.get("to", ""),
        states=ExecutionState.values,
        state_groups=STATE_GROUPS,
        state_custom=state if state and "," in state and state not in dict(STATE_GROUPS) else "",
        triggers=Trigger.values,
        error_max=selectors.ERROR_TEXT_MAX,
        error_scan=selectors.ERROR_SCAN_ROWS,
        read_days=partitions.READ_DAYS,
        filtered=bool(raw),
        # The table's filter for the bulk bar's "all matching" (the schedule as its id).
        bulk_filter=[(k, v) for k, v in raw.items() if k != "schedule"]
        + ([("schedule", str(schedule.id))] if schedule else []),
    )
    if is_htmx(request) and request.headers.get("HX-Target") == "runs-table":
        # 200 even with an error: htmx swaps in only 2xx answers, and the error
        # must replace the table it was asked for.
        return render(request, "console/runs.html#table", ctx)
    return render(request, "console/runs.html", ctx, status=400 if error else 200)


def _other_tenant(request: HttpRequest, principal: Principal, slug: str) -> HttpResponse:
    """A link into another tenant's runs (the operators' page): offer the switch."""
    target = tenant_selectors.user_principal(user=request.user, tenant_slug=slug)
    if target is None or target.tenant.slug != slug:
        raise Http404("no such tenant")
    ctx = base_context(
        request,
        principal,
        switch_to=target.tenant,
        next_path=f"{reverse('console-runs')}?{urlencode(_raw(request.GET))}",
    )
    return render(request, "console/runs_switch.html", ctx)
