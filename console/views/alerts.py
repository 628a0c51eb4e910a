"""Alerts pages: a tenant's channels (admins), its default alert policy and maintenance
windows (operators), and a schedule's own policy and snooze (operators).

Every write goes through dispatch.services; a 400 from a service (InvalidSchedule,
which names the field) is shown next to that field on the re-rendered page. The
console reads form fields as text and passes what it cannot read as a number on as
given, so the service's own check (and message) applies, not a second copy here.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from console.access import base_context, tenant_view, viewer_zone
from console.forms import parse_local
from console.views.common import done, is_htmx, schedule_or_404
from dispatch import selectors, services
from dispatch.exceptions import InvalidSchedule, NotFound
from dispatch.models import AlertChannel, MaintenanceWindow, Schedule
from dispatch.selectors.alerts import BUILT_IN
from dispatch.states import AUTO_PAUSE_ACTOR, ChannelKind
from tenants.roles import Principal, Role

Errors = dict[str, list[str]]
NUMBERS = tuple(name for name in BUILT_IN if name != "recovery")
LABELS = {
    "failure_threshold": "Alert after this many consecutive failures",
    "realert_s": "Re-alert interval while still failing (s, 0 = never)",
    "auto_pause_after": "Auto-pause after this many consecutive failures (0 = never)",
    "late_after_s": "Late when not started this long after its due time (s, 0 = off)",
    "max_duration_s": "Late when running longer than (s, 0 = off)",
}
POLICY_INPUTS = (*NUMBERS, "recovery", "channels")
CHANNEL_INPUTS = ("name", "kind", "to", "url", "enabled")
WINDOW_INPUTS = ("name", "starts_at", "ends_at", "cron", "timezone", "duration_s")
SNOOZE_INPUTS = ("until",)
# The service names config fields "config.<key>"; the form's inputs are named by key.
CONFIG_FIELDS = {"config.to": "to", "config.url": "url", "config": "url"}


def _errors(
    exc: InvalidSchedule, known: tuple[str, ...], fields: dict[str, str] | None = None
) -> Errors:
    """The service's detail keyed by the form's input names; what names no input of
    the form goes under "form", prefixed with the name the service gave."""
    out: Errors = {}
    detail = exc.detail if isinstance(exc.detail, dict) else {}
    for key, reasons in (detail or {"": [exc.message]}).items():
        name = (fields or {}).get(key, key)
        if name in known:
            out.setdefault(name, []).extend(str(r) for r in reasons)
        else:
            out.setdefault("form", []).extend(f"{key}: {r}" if key else str(r) for r in reasons)
    return out


def _number(value: str) -> int | str:
    # Not a number: the service answers with the field's range.
    try:
        return int(value.strip())
    except ValueError:
        return value


def _lines(value: str) -> list[str]:
    return [part.strip() for part in value.replace(",", "\n").splitlines() if part.strip()]


# --- the Alerts page ---------------------------------------------------------------


def _policy_values(policy: selectors.EffectivePolicy) -> dict[str, Any]:
    return policy.values | {"channels": policy.channels}


def _page(
    request: HttpRequest, principal: Principal, *, status: int = 200, **extra: Any
) -> HttpResponse:
    tenant = principal.tenant
    policy = selectors.policy_effective(tenant=tenant)
    forms: dict[str, Any] = {
        "policy_form": _policy_values(policy),
        "channel_form": {},
        "channel_errors": {},
        "policy_errors": {},
        "window_form": {},
        "window_errors": {},
    }
    channels = selectors.alert_channel_list(tenant=tenant)
    ctx = base_context(
        request,
        principal,
        channels=channels,
        channel_use=selectors.alert_channel_use(tenant=tenant, channels=channels),
        kinds=[k.value for k in ChannelKind],
        policy=policy,
        numbers=[(n, LABELS[n]) for n in NUMBERS],
        windows=list(MaintenanceWindow.objects.filter(tenant=tenant).order_by("name")),
        **(forms | extra),
    )
    return render(request, "console/alerts.html", ctx, status=status)


def _done(request: HttpRequest, message: str) -> HttpResponse:
    return done(request, reverse("console-alerts"), message)


@require_GET
@tenant_view(Role.VIEWER)
def alerts_page(request: HttpRequest, principal: Principal) -> HttpResponse:
    return _page(request, principal)


def _channel_config(kind: str, post: Any) -> dict[str, Any]:
    if kind == ChannelKind.EMAIL:
        return {"to": _lines(post.get("to", ""))}
    secret = post.get("url_secret", "").strip()
    return {"url": {"secret": secret} if secret else post.get("url", "").strip()}


def _channel_form(post: Any) -> dict[str, Any]:
    return {key: post.get(key, "") for key in ("name", "kind", "to", "url", "url_secret")} | {
        "enabled": post.get("enabled") == "on",
        "use_in_default_policy": post.get("use_in_default_policy") == "on",
    }


@require_POST
@tenant_view(Role.ADMIN)
def channel_create(request: HttpRequest, principal: Principal) -> HttpResponse:
    kind = request.POST.get("kind", "")
    data = {
        "name": request.POST.get("name", ""),
        "kind": kind,
        "config": _channel_config(kind, request.POST),
        "enabled": request.POST.get("enabled") == "on",
        "use_in_default_policy": request.POST.get("use_in_default_policy") == "on",
    }
    try:
        channel = services.alert_channel_create(actor=principal, data=data)
    except InvalidSchedule as exc:
        return _page(
            request,
            principal,
            status=400,
            channel_form=_channel_form(request.POST),
            channel_errors=_errors(exc, CHANNEL_INPUTS, CONFIG_FIELDS),
        )
    return _done(request, f"Channel {channel.name} created")


def _channel_or_404(principal: Principal, channel_id: uuid.UUID) -> AlertChannel:
    try:
        return selectors.alert_channel_get(tenant=principal.tenant, channel_id=channel_id)
    except NotFound:
        raise Http404("alert channel not found") from None


def _edit_form(channel: AlertChannel) -> dict[str, Any]:
    url = channel.config.get("url", "")
    return {
        "name": channel.name,
        "to": "\n".join(channel.config.get("to", [])),
        "url": url if isinstance(url, str) else "",
        "url_secret": url.get("secret", "") if isinstance(url, dict) else "",
        "enabled": channel.enabled,
    }


@require_http_methods(["GET", "POST"])
@tenant_view(Role.ADMIN)
def channel_edit(request: HttpRequest, principal: Principal, channel_id: uuid.UUID) -> HttpResponse:
    channel = _channel_or_404(principal, channel_id)
    form, errors, status = _edit_form(channel), {}, 200
    if request.method == "POST":
        data: dict[str, Any] = {
            "name": request.POST.get("name", ""),
            "enabled": request.POST.get("enabled") == "on",
        }
        data["config"] = _channel_config(channel.kind, request.POST)
        if channel.kind == ChannelKind.WEBHOOK:
            # Headers are kept as they are: the console edits the URL only.
            data["config"]["headers"] = channel.config.get("headers", {})
        try:
            services.alert_channel_update(actor=principal, channel_id=str(channel.id), data=data)
        except NotFound:
            raise Http404("alert channel not found") from None
        except InvalidSchedule as exc:
            form, errors, status = (
                _channel_form(request.POST),
                _errors(exc, CHANNEL_INPUTS, CONFIG_FIELDS),
                400,
            )
        else:
            return _done(request, f"Channel {data['name'].strip()} saved")
    ctx = base_context(request, principal, channel=channel, form=form, errors=errors)
    return render(request, "console/alerts_channel_edit.html", ctx, status=status)


@require_POST
@tenant_view(Role.ADMIN)
def channel_toggle(
    request: HttpRequest, principal: Principal, channel_id: uuid.UUID
) -> HttpResponse:
    channel = _channel_or_404(principal, channel_id)
    try:
        channel = services.alert_channel_update(
            actor=principal, channel_id=str(channel.id), data={"enabled": not channel.enabled}
        )
    except NotFound:
        raise Http404("alert channel not found") from None
    return _done(request, f"Channel {channel.name} {'enabled' if channel.enabled else 'disabled'}")


@require_POST
@tenant_view(Role.ADMIN)
def channel_delete(
    request: HttpRequest, principal: Principal, channel_id: uuid.UUID
) -> HttpResponse:
    channel = _channel_or_404(principal, channel_id)
    try:
        services.alert_channel_delete(actor=principal, channel_id=str(channel.id))
    except NotFound:
        raise Http404("alert channel not found") from None
    return _done(request, f"Channel {channel.name} deleted")


@require_POST
@tenant_view(Role.ADMIN)
def channel_test(request: HttpRequest, principal: Principal, channel_id: uuid.UUID) -> HttpResponse:
    """Send a test message; htmx swaps the result in next to the button (a failed
    delivery is still a 200: the request worked, the channel did not)."""
    channel = _channel_or_404(principal, channel_id)
    try:
        result = services.alert_channel_test(actor=principal, channel_id=str(channel.id))
    except NotFound:
        raise Http404("alert channel not found") from None
    if is_htmx(request):
        ctx = {"channel": channel, "result": result}
        return render(request, "console/alerts_test_result.html", ctx)
    return _page(request, principal, test_channel=channel, test_result=result)


def _policy_data(post: Any, channel_ids: list[str]) -> dict[str, Any]:
    data: dict[str, Any] = {name: _number(post.get(name, "")) for name in NUMBERS}
    return data | {"recovery": post.get("recovery") == "on", "channels": channel_ids}


def _policy_form(post: Any) -> dict[str, Any]:
    return {name: post.get(name, "") for name in NUMBERS} | {
        "recovery": post.get("recovery") == "on",
        "channels": post.getlist("channels"),
    }


@require_POST
@tenant_view(Role.OPERATOR)
def policy_set(request: HttpRequest, principal: Principal) -> HttpResponse:
    data = _policy_data(request.POST, request.POST.getlist("channels"))
    try:
        services.alert_policy_set(actor=principal, data=data)
    except InvalidSchedule as exc:
        return _page(
            request,
            principal,
            status=400,
            policy_form=_policy_form(request.POST),
            policy_errors=_errors(exc, POLICY_INPUTS),
        )
    return _done(request, "Default alert policy saved")


@require_POST
@tenant_view(Role.OPERATOR)
def window_create(request: HttpRequest, principal: Principal) -> HttpResponse:
    post = request.POST
    form = {k: post.get(k, "") for k in ("name", "starts_at", "ends_at", "cron", "timezone")}
    form["duration_s"] = post.get("duration_s", "")
    data: dict[str, Any] = {"name": form["name"]}
    errors: Errors = {}
    if form["cron"].strip():
        data |= {
            "cron": form["cron"].strip(),
            "timezone": form["timezone"].strip() or "UTC",
            "duration_s": _number(form["duration_s"]),
        }
    else:
        for key in ("starts_at", "ends_at"):
            raw = form[key].strip()
            if not raw:
                continue
            try:
                data[key] = parse_local(raw, viewer_zone(request))
            except ValueError as exc:
                errors[key] = [f"is not a date and time in range ({exc})"]
    if not errors:
        try:
            window = services.maintenance_window_create(actor=principal, data=data)
        except InvalidSchedule as exc:
            errors = _errors(exc, WINDOW_INPUTS)
        else:
            return _done(request, f"Maintenance window {window.name} created")
    return _page(request, principal, status=400, window_form=form, window_errors=errors)


@require_POST
@tenant_view(Role.OPERATOR)
def window_delete(request: HttpRequest, principal: Principal, window_id: uuid.UUID) -> HttpResponse:
    try:
        services.maintenance_window_delete(actor=principal, window_id=str(window_id))
    except NotFound:
        raise Http404("maintenance window not found") from None
    return _done(request, "Maintenance window deleted")


# --- a schedule's alerts (the partial on the schedule page) ------------------------


def schedule_alerts_context(principal: Principal, schedule: Schedule) -> dict[str, Any]:
    """What templates/console/_schedule_alerts.html shows (the schedule page adds it)."""
    policy = selectors.policy_effective(tenant=principal.tenant, schedule=schedule)
    return {
        "alert_policy": policy,
        "alert_form": _policy_values(policy),
        "alert_errors": {},
        "alert_channels": selectors.alert_channel_list(tenant=principal.tenant),
        "alert_numbers": [(n, LABELS[n]) for n in NUMBERS],
        "snooze_errors": {},
        "snooze_value": "",
        "auto_paused": schedule.paused and schedule.paused_by == AUTO_PAUSE_ACTOR,
    }


# What a re-rendered POST of the schedule's alerts part brings (the template tag
# console/templatetags/alert_tags.py `schedule_alerts` lays these over its own).
SCHEDULE_OVERRIDES = ("alert_form", "alert_errors", "snooze_errors", "snooze_value")


def _schedule_page(
    request: HttpRequest, principal: Principal, schedule: Schedule, **overrides: Any
) -> HttpResponse:
    # A 400 re-renders the alerts part alone, with the errors next to the fields.
    ctx = base_context(request, principal, schedule=schedule, **overrides)
    return render(request, "console/alerts_schedule.html", ctx, status=400)


def _back(request: HttpRequest, schedule: Schedule, message: str) -> HttpResponse:
    url = reverse("console-schedule", kwargs={"schedule_id": schedule.id})
    return done(request, f"{url}#alerts", message)


@require_POST
@tenant_view(Role.OPERATOR)
def schedule_policy_set(
    request: HttpRequest, principal: Principal, schedule_id: uuid.UUID
) -> HttpResponse:
    schedule = schedule_or_404(principal, schedule_id)
    data = _policy_data(request.POST, request.POST.getlist("channels"))
    try:
        services.alert_policy_set(actor=principal, data=data, schedule_id=str(schedule.id))
    except NotFound:
        raise Http404("schedule not found") from None
    except InvalidSchedule as exc:
        return _schedule_page(
            request,
            principal,
            schedule,
            alert_form=_policy_form(request.POST),
            alert_errors=_errors(exc, POLICY_INPUTS),
        )
    return _back(request, schedule, "Alert policy saved")


@require_POST
@tenant_view(Role.OPERATOR)
def schedule_policy_delete(
    request: HttpRequest, principal: Principal, schedule_id: uuid.UUID
) -> HttpResponse:
    schedule = schedule_or_404(principal, schedule_id)
    try:
        services.alert_policy_delete(actor=principal, schedule_id=str(schedule.id))
    except NotFound:
        raise Http404("schedule not found") from None
    return _back(request, schedule, "Alert policy override removed")


@require_POST
@tenant_view(Role.OPERATOR)
def schedule_snooze(
    request: HttpRequest, principal: Principal, schedule_id: uuid.UUID
) -> HttpResponse:
    schedule = schedule_or_404(principal, schedule_id)
    raw = request.POST.get("until", "").strip()
    try:
        until = parse_local(raw, viewer_zone(request)) if raw else None
    except ValueError as exc:
        errors = {"until": [f"is not a date and time in range ({exc})"]}
        return _schedule_page(request, principal, schedule, snooze_errors=errors, snooze_value=raw)
    try:
        services.schedule_snooze(actor=principal, schedule_id=str(schedule.id), until=until)
    except NotFound:
        raise Http404("schedule not found") from None
    except InvalidSchedule as exc:
        return _schedule_page(
            request,
            principal,
            schedule,
            snooze_errors=_errors(exc, SNOOZE_INPUTS),
            snooze_value=raw,
        )
    return _back(request, schedule, "Alerts snoozed" if until else "Snooze ended")
