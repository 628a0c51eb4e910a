"""Alerting reads: a tenant's alert channels (the list, one: another tenant's is a
404) and the alert policy that applies to a schedule."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from dispatch.models import AlertChannel, AlertPolicy, Schedule
from dispatch.selectors.paging import tenant_object
from tenants.models import Tenant


def alert_channel_list(*, tenant: Tenant) -> list[AlertChannel]:
    # Bounded by services.alert_channels.MAX_CHANNELS: no paging needed.
    return list(AlertChannel.objects.filter(tenant=tenant).order_by("name"))


def alert_channel_get(*, tenant: Tenant, channel_id: uuid.UUID | str) -> AlertChannel:
    return tenant_object(
        AlertChannel.objects.all(), tenant=tenant, pk=channel_id, what="alert channel"
    )


# What applies when neither the schedule nor the tenant has a policy (the model's defaults).
BUILT_IN = {
    "failure_threshold": 1,
    "recovery": True,
    "realert_s": 0,
    "auto_pause_after": 0,
    "late_after_s": 0,
    "max_duration_s": 0,
}


@dataclass(frozen=True)
class EffectivePolicy:
    values: dict[str, Any]
    channels: list[str]
    source: str  # "schedule" | "tenant" | "built-in"


def _as_dict(policy: AlertPolicy | None) -> dict[str, Any]:
    if policy is None:
        return dict(BUILT_IN)
    return {name: getattr(policy, name) for name in BUILT_IN}


def policy_effective(*, tenant: Tenant, schedule: Schedule | None = None) -> EffectivePolicy:
    """The policy that applies (the schedule's, else the tenant's, else the built-in one)."""
    own = (
        AlertPolicy.objects.filter(tenant=tenant, schedule=schedule).first()
        if schedule is not None
        else None
    )
    default = AlertPolicy.objects.filter(tenant=tenant, schedule__isnull=True).first()
    policy = own or default
    source = "schedule" if own else ("tenant" if default else "built-in")
    channels = [str(c) for c in policy.channels.values_list("id", flat=True)] if policy else []
    return EffectivePolicy(_as_dict(policy), sorted(channels), source)
