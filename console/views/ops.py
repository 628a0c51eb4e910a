"""Platform operators' pages (staff only, across tenants): health, the audit log and the
managed commands' registrations."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import User
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from console import forms as console_forms
from console.access import base_context, principal_for, staff_view, viewer_zone
from dispatch import selectors, services
from dispatch.exceptions import DispatchError
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


def _staff(request: HttpRequest) -> User:
    assert isinstance(request.user, User)  # noqa: S101 - staff_view let it in
    return request.user


@require_http_methods(["GET", "POST"])
@staff_view
def ops_commands(request: HttpRequest) -> HttpResponse:
    """Managed commands: the registrations, and a form to register one."""
    form = console_forms.ManagedCommandForm(request.POST or None)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            try:
                command = services.managed_command_register(
                    values=form.values(),
                    tenants=form.cleaned_data["tenants"],
                    actor=_staff(request),
                )
            except DispatchError as exc:  # the check again, in the transaction (a name race)
                for key, problems in exc.detail.items():
                    for m in problems:
                        form.add_error(key if key in form.fields else None, f"{key}: {m}")
            else:
                return redirect(f"{reverse('console-ops-commands')}#command-{command.pk}")
        status = 400
    ctx = base_context(
        request, principal_for(request), form=form, commands=selectors.ops_commands()
    )
    return render(request, "console/ops_commands.html", ctx, status=status)


@require_http_methods(["GET", "POST"])
@staff_view
def ops_command_disable(request: HttpRequest, command_id: int) -> HttpResponse:
    """GET asks to confirm (saying which schedules it stops); POST disables."""
    command = selectors.ops_command(command_id=command_id)
    if command is None:
        raise Http404("managed command not found")
    if request.method == "GET":
        ctx = base_context(
            request,
            principal_for(request),
            command=command,
            users=selectors.ops_command_users(name=command.name),
        )
        return render(request, "console/ops_command_disable.html", ctx)
    services.managed_command_set_enabled(
        command_id=command.pk, enabled=False, actor=_staff(request)
    )
    return redirect(f"{reverse('console-ops-commands')}#command-{command.pk}")


@require_POST
@staff_view
def ops_command_enable(request: HttpRequest, command_id: int) -> HttpResponse:
    command = selectors.ops_command(command_id=command_id)
    if command is None:
        raise Http404("managed command not found")
    services.managed_command_set_enabled(command_id=command.pk, enabled=True, actor=_staff(request))
    return redirect(f"{reverse('console-ops-commands')}#command-{command.pk}")
