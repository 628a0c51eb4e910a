"""Alert policies (the tenant default, a schedule's override) and a schedule's alert
snooze. One transaction each, with its audit row; the decision that reads them is
dispatch/sql/alerts.sql `alert_decide`."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.db import transaction

from core.db import db_now
from dispatch.exceptions import InvalidSchedule
from dispatch.models import AlertChannel, AlertPolicy, Schedule
from dispatch.selectors.alerts import BUILT_IN, EffectivePolicy, policy_effective
from dispatch.services.common import live_schedule
from dispatch.states import AuditAction
from tenants.audit import audit_record
from tenants.models import Tenant
from tenants.roles import Principal

LIMITS = {
    "failure_threshold": (1, 1000),
    "realert_s": (0, 30 * 86400),
    "auto_pause_after": (0, 1000),
    "late_after_s": (0, 7 * 86400),
    "max_duration_s": (0, 7 * 86400),
}


def _clean(tenant: Tenant, data: dict[str, Any]) -> tuple[dict[str, Any], list[AlertChannel]]:
    unknown = sorted(set(data) - {*BUILT_IN, "channels"})
    if unknown:
        raise InvalidSchedule.field(unknown[0], "unknown field")
    values = dict(BUILT_IN)
    for name, (low, high) in LIMITS.items():
        value = data.get(name, BUILT_IN[name])
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise InvalidSchedule.field(name, f"must be a whole number, {low}..{high}")
        values[name] = value
    recovery = data.get("recovery", True)
    if not isinstance(recovery, bool):
        raise InvalidSchedule.field("recovery", "must be true or false")
    values["recovery"] = recovery
    ids = data.get("channels", [])
    if not isinstance(ids, list) or len(ids) > 50:
        raise InvalidSchedule.field("channels", "must be a list of at most 50 alert channel ids")
    channels: list[AlertChannel] = []
    for raw in ids:
        try:
            pk = uuid.UUID(str(raw))
        except ValueError:
            raise InvalidSchedule.field("channels", f"{raw!r} is not a channel id") from None
        channel = AlertChannel.objects.filter(tenant=tenant, pk=pk).first()
        if channel is None:  # another tenant's channel is just as unknown
            raise InvalidSchedule.field("channels", f"no alert channel {raw}")
        channels.append(channel)
    return values, channels


def record_audit(actor: Principal, action: str, object_id: str, **kwargs: Any) -> None:
    audit_record(
        actor=actor, action=action, object_type="alert_policy", object_id=object_id, **kwargs
    )


def _snapshot(policy: EffectivePolicy) -> dict[str, Any]:
    return policy.values | {"channels": policy.channels, "source": policy.source}


@transaction.atomic
def alert_policy_set(
    *, actor: Principal, data: dict[str, Any], schedule_id: str | None = None
) -> EffectivePolicy:
    """Set the tenant default (no `schedule_id`) or a schedule's override, whole."""
    tenant = actor.tenant
    schedule = live_schedule(actor, schedule_id) if schedule_id is not None else None
    values, channels = _clean(tenant, data)
    before = policy_effective(tenant=tenant, schedule=schedule)
    policy, _ = AlertPolicy.objects.select_for_update().get_or_create(
        tenant=tenant, schedule=schedule, defaults=values
    )
    for name, value in values.items():
        setattr(policy, name, value)
    policy.updated_at = db_now()
    policy.save()
    policy.channels.set(channels)
    after = policy_effective(tenant=tenant, schedule=schedule)
    record_audit(
        actor,
        AuditAction.ALERT_POLICY_SET,
        str(schedule.id) if schedule else "default",
        before=_snapshot(before),
        after=_snapshot(after),
    )
    return after


@transaction.atomic
def alert_policy_delete(*, actor: Principal, schedule_id: str) -> EffectivePolicy:
    """Drop a schedule's override: the tenant default applies again."""
    schedule = live_schedule(actor, schedule_id)
    before = policy_effective(tenant=actor.tenant, schedule=schedule)
    AlertPolicy.objects.filter(tenant=actor.tenant, schedule=schedule).delete()
    after = policy_effective(tenant=actor.tenant, schedule=schedule)
    record_audit(
        actor,
        AuditAction.ALERT_POLICY_DELETE,
        str(schedule.id),
        before=_snapshot(before),
        after=_snapshot(after),
    )
    return after


@transaction.atomic
def schedule_snooze(*, actor: Principal, schedule_id: str, until: datetime | None) -> Schedule:
    """Hold the schedule's alerts until `until` (None ends a snooze). Failures still
    count toward thresholds and the breaker; what was owed meanwhile is not sent later."""
    schedule = live_schedule(actor, schedule_id)
    if until is not None and until <= db_now():
        raise InvalidSchedule.field("until", "must be in the future (null ends the snooze)")
    before = schedule.alert_snoozed_until
    schedule.alert_snoozed_until = until
    schedule.save(update_fields=["alert_snoozed_until"])
    audit_record(
        actor=actor,
        action=AuditAction.SCHEDULE_SNOOZE,
        object_type="schedule",
        object_id=str(schedule.id),
        before={"alert_snoozed_until": before.isoformat() if before else None},
        after={"alert_snoozed_until": until.isoformat() if until else None},
    )
    return schedule
