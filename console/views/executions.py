"""Execution pages: one execution's row, events and timeline."""

from __future__ import annotations

import uuid

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from console.access import base_context, tenant_view
from console.views.common import is_htmx
from dispatch import selectors
from dispatch.exceptions import NotFound
from tenants.roles import Principal, Role


@require_GET
@tenant_view(Role.VIEWER)
def execution_detail(
    request: HttpRequest, principal: Principal, execution_id: uuid.UUID
) -> HttpResponse:
    try:
        execution = selectors.execution_get(tenant=principal.tenant, execution_id=execution_id)
    except NotFound:
        raise Http404("execution not found") from None
    events = list(selectors.execution_events(execution=execution))
    ctx = base_context(
        request,
        principal,
        execution=execution,
        schedule=execution.schedule,
        timeline=selectors.execution_timeline(execution=execution, events=events),
        zone=execution.schedule.timezone,
    )
    if is_htmx(request) and request.headers.get("HX-Target") == "execution-live":
        return render(request, "console/execution_detail.html#live", ctx)
    return render(request, "console/execution_detail.html", ctx)
