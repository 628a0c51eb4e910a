"""Who the console request acts as: tenant from the session, role from the membership.

Every tenant view goes through `tenant_view(role)`; it fails closed: no tenant
(or no membership) is a 404, a role below the view's is a 403 (audited, as the
API audits its denials). Platform-staff views use `staff_view`, a 404 to
everyone else so their existence is not revealed.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, Concatenate, ParamSpec
from urllib.parse import unquote
from zoneinfo import ZoneInfo

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from dispatch.timing import cron
from tenants import selectors as tenant_selectors
from tenants import services as tenant_services
from tenants.roles import Principal, Role

P = ParamSpec("P")
TenantView = Callable[Concatenate[HttpRequest, Principal, P], HttpResponse]
SESSION_TENANT = "tenant"
SESSION_TZ = "tz"
SESSION_THEME = "theme"
TZ_COOKIE = "console_tz"


def known_zone(name: object) -> ZoneInfo | None:
    """The time zone of that name, or None when `name` is not one (empty, unknown, not text)."""
    if isinstance(name, str) and name:
        try:
            return cron.get_zone(name)
        except cron.CronError:
            return None
    return None


def viewer_zone(request: HttpRequest) -> ZoneInfo:
    """The zone times are shown in: the user's setting, else the browser's, else UTC."""
    cookie = unquote(request.COOKIES.get(TZ_COOKIE, ""))  # console.js URI-encodes the "/"
    for name in (request.session.get(SESSION_TZ), cookie):
        zone = known_zone(name)
        if zone is not None:
            return zone
    return ZoneInfo("UTC")


def principal_for(request: HttpRequest) -> Principal | None:
    slug = request.session.get(SESSION_TENANT)
    principal = tenant_selectors.user_principal(
        user=request.user, tenant_slug=slug if isinstance(slug, str) else None
    )
    if principal is None and slug:
        # The remembered tenant is gone (membership removed): fall back to another.
        principal = tenant_selectors.user_principal(user=request.user, tenant_slug=None)
    return principal


def forbidden(request: HttpRequest, principal: Principal, needed: Role) -> HttpResponse:
    tenant_services.audit_denied(
        actor=principal, method=request.method, path=request.path, needed=needed
    )
    response = render(
        request,
        "console/forbidden.html",
        {"principal": principal, "needed": needed.label},
        status=403,
    )
    return response


def tenant_view(
    role: Role = Role.VIEWER, *, write_role: Role | None = None
) -> Callable[[TenantView[P]], Callable[Concatenate[HttpRequest, P], HttpResponse]]:
    """Resolve the principal; require `role` (and `write_role` for POST)."""

    def decorate(
        view: TenantView[P],
    ) -> Callable[Concatenate[HttpRequest, P], HttpResponse]:
        @login_required
        @wraps(view)
        def wrapper(request: HttpRequest, *args: P.args, **kwargs: P.kwargs) -> HttpResponse:
            principal = principal_for(request)
            if principal is None:
                raise Http404("no tenant")
            # Written only when it changes: a write saves the whole session as this
            # request read it, so a dashboard poll running beside a POST that set the
            # theme or time zone would put the old session back (a lost update).
            if request.session.get(SESSION_TENANT) != principal.tenant.slug:
                request.session[SESSION_TENANT] = principal.tenant.slug
            needed = role
            if request.method == "POST" and write_role is not None:
                needed = max(role, write_role)
            if not principal.can(needed):
                return forbidden(request, principal, needed)
            request.principal = principal  # type: ignore[attr-defined]
            return view(request, principal, *args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def staff_view(
    view: Callable[Concatenate[HttpRequest, P], HttpResponse],
) -> Callable[Concatenate[HttpRequest, P], HttpResponse]:
    @login_required
    @wraps(view)
    def wrapper(request: HttpRequest, *args: P.args, **kwargs: P.kwargs) -> HttpResponse:
        if not request.user.is_staff:
            raise Http404("not found")
        return view(request, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


def base_context(request: HttpRequest, principal: Principal | None, **extra: Any) -> dict[str, Any]:
    return {
        "principal": principal,
        "tenants": tenant_selectors.tenants_for_user(user=request.user),
        "viewer_tz": viewer_zone(request),
        "can_operate": principal is not None and principal.can(Role.OPERATOR),
        "can_admin": principal is not None and principal.can(Role.ADMIN),
        **extra,
    }
