"""Console views: function views, tenant-scoped through the user's principal."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from dispatch import selectors as dispatch_selectors
from tenants import selectors as tenant_selectors


@login_required
def home(request: HttpRequest) -> HttpResponse:
    slug = request.GET.get("tenant") or request.session.get("tenant")
    principal = tenant_selectors.user_principal(user=request.user, tenant_slug=slug)
    if principal is None:
        raise Http404("no tenant")
    request.session["tenant"] = principal.tenant.slug
    schedules = dispatch_selectors.schedule_list(tenant=principal.tenant, limit=50)
    executions = dispatch_selectors.execution_list(tenant=principal.tenant, limit=20)
    return render(
        request,
        "console/home.html",
        {
            "principal": principal,
            "tenants": tenant_selectors.tenants_for_user(user=request.user),
            "schedules": schedules.items,
            "executions": executions.items,
        },
    )
