"""Maintenance windows of a tenant: create (validated) and delete, each audited."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from core.db import db_now
from dispatch.exceptions import InvalidSchedule
from dispatch.models import MaintenanceWindow
from dispatch.selectors.paging import tenant_object
from dispatch.services.common import save_unique
from dispatch.states import AuditAction
from dispatch.timing import cron
from tenants.audit import audit_record
from tenants.roles import Principal

MAX_DURATION_S = 7 * 86400
MAX_WINDOWS = 50


def window_snapshot(window: MaintenanceWindow) -> dict[str, Any]:
    return {
        "name": window.name,
        "starts_at": window.starts_at.isoformat() if window.starts_at else None,
        "ends_at": window.ends_at.isoformat() if window.ends_at else None,
        "cron": window.cron or None,
        "timezone": window.timezone,
        "duration_s": window.duration_s,
    }


def _clean(actor: Principal, data: dict[str, Any]) -> MaintenanceWindow:
    name = data.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > 100 or not name.isprintable():
        raise InvalidSchedule.field("name", "must be 1..100 printable characters")
    window = MaintenanceWindow(tenant=actor.tenant, name=name.strip())
    expr = data.get("cron")
    if expr:
        if data.get("starts_at") or data.get("ends_at"):
            raise InvalidSchedule.field("cron", "give a cron window or a starts_at..ends_at range")
        tz = data.get("timezone") or "UTC"
        try:
            cron.validate(expr, tz, seed=str(window.id))
        except cron.CronError as exc:
            raise InvalidSchedule.field("cron", exc.message) from None
        duration = data.get("duration_s")
        if (
            isinstance(duration, bool)
            or not isinstance(duration, int)
            or not 60 <= duration <= MAX_DURATION_S
        ):
            raise InvalidSchedule.field(
                "duration_s", f"a cron window needs a duration of 60..{MAX_DURATION_S} s"
            )
        window.cron, window.timezone, window.duration_s = expr, tz, duration
        return window
    starts, ends = data.get("starts_at"), data.get("ends_at")
    if starts is None or ends is None:
        raise InvalidSchedule.field("starts_at", "give starts_at and ends_at, or a cron window")
    if ends <= starts:
        raise InvalidSchedule.field("ends_at", "must be after starts_at")
    if ends <= db_now():
        raise InvalidSchedule.field("ends_at", "must be in the future")
    window.starts_at, window.ends_at = starts, ends
    return window


@transaction.atomic
def maintenance_window_create(*, actor: Principal, data: dict[str, Any]) -> MaintenanceWindow:
    window = _clean(actor, data)
    if MaintenanceWindow.objects.filter(tenant=actor.tenant).count() >= MAX_WINDOWS:
        raise InvalidSchedule.field("name", f"a tenant has at most {MAX_WINDOWS} windows")
    save_unique(
        window,
        {"maintenance_window_name": ("name", "a window with this name already exists")},
        force_insert=True,
    )
    audit_record(
        actor=actor,
        action=AuditAction.MAINTENANCE_WINDOW_CREATE,
        object_type="maintenance_window",
        object_id=str(window.id),
        after=window_snapshot(window),
    )
    return window


@transaction.atomic
def maintenance_window_delete(*, actor: Principal, window_id: str) -> None:
    window = tenant_object(
        MaintenanceWindow.objects.select_for_update(),
        tenant=actor.tenant,
        pk=window_id,
        what="maintenance window",
    )
    audit_record(
        actor=actor,
        action=AuditAction.MAINTENANCE_WINDOW_DELETE,
        object_type="maintenance_window",
        object_id=str(window.id),
        before=window_snapshot(window),
    )
    window.delete()
