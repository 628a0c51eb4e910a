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


def policy_channels(policy: AlertPolicy | None, enabled: list[AlertChannel]) -> list[AlertChannel]:
    """Where a policy's alerts go, of the tenant's enabled channels: the ones it names,
    or every one when it names none (or there is no policy: the built-in one). The
    outbox sends by this rule (dispatch/alerting/outbox.py); the console and the API
    say by it which channels a policy reaches."""
    if policy is None:
        return list(enabled)
    named = {c.id for c in policy.channels.all()}
    return [c for c in enabled if c.id in named] if named else list(enabled)


@dataclass(frozen=True)
class ChannelUse:
    """Which policies send to a channel: the tenant's default (every schedule without
    a policy of its own), and how many schedules' own policies."""

    default_policy: bool
    schedule_policies: int

    @property
    def unused(self) -> bool:
        return not self.default_policy and not self.schedule_policies


def alert_channel_use(
    *, tenant: Tenant, channels: list[AlertChannel]
) -> dict[uuid.UUID, ChannelUse]:
    """For each of `channels` (the tenant's), the policies that send to it. A disabled
    channel receives nothing, whatever a policy names."""
    enabled = [c for c in channels if c.enabled]
    policies = list(AlertPolicy.objects.filter(tenant=tenant).prefetch_related("channels"))
    default = next((p for p in policies if p.schedule_id is None), None)
    reached_by_default = {c.id for c in policy_channels(default, enabled)}
    per_schedule = [
        {c.id for c in policy_channels(p, enabled)} for p in policies if p.schedule_id is not None
    ]
    return {
        c.id: ChannelUse(
            default_policy=c.id in reached_by_default,
            schedule_policies=sum(1 for reached in per_schedule if c.id in reached),
        )
        for c in channels
    }
