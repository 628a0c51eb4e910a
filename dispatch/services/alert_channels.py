"""Alert channels: create, update, delete, and send a test message (admins only).

Each write is one transaction with its audit row; the config is validated by
dispatch.alerting.channel_config, so only addresses and secret references are
ever stored. The test send happens outside any transaction (a slow webhook must
not hold a connection in one) and is audited with what happened.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models.functions import Now

from dispatch.alerting import channel_config, delivery
from dispatch.exceptions import InvalidSchedule
from dispatch.models import AlertChannel, AlertPolicy
from dispatch.selectors.alerts import alert_channel_get
from dispatch.selectors.paging import tenant_object
from dispatch.services.common import save_unique
from dispatch.states import AuditAction
from tenants.audit import audit_record
from tenants.roles import Principal

MAX_CHANNELS = 50
MAX_NAME = 100


def channel_snapshot(channel: AlertChannel) -> dict[str, Any]:
    # The config holds secret references only, so the audit trail may keep it whole.
    return {
        "name": channel.name,
        "kind": channel.kind,
        "config": channel.config,
        "enabled": channel.enabled,
    }


def record_audit(
    actor: Principal,
    action: str,
    channel: AlertChannel,
    *,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    outcome: str = "ok",
) -> None:
    audit_record(
        actor=actor,
        action=action,
        object_type="alert_channel",
        object_id=str(channel.id),
        before=before,
        after=after,
        outcome=outcome,
    )


def _name(value: Any) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME:
        raise InvalidSchedule.field("name", f"must be 1..{MAX_NAME} characters")
    if not value.isprintable():
        raise InvalidSchedule.field("name", "must be printable characters (no control characters)")
    return value.strip()


def _enabled(value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidSchedule.field("enabled", "must be true or false")
    return value


_NAME_TAKEN = {
    "alert_channel_name_unique": ("name", "an alert channel with this name already exists")
}


def _locked(actor: Principal, channel_id: str) -> AlertChannel:
    locked = AlertChannel.objects.select_for_update()
    return tenant_object(locked, tenant=actor.tenant, pk=channel_id, what="alert channel")


@transaction.atomic
def alert_channel_create(*, actor: Principal, data: dict[str, Any]) -> AlertChannel:
    """A new channel. `use_in_default_policy` (default true): when the tenant's default
    policy names its channels, this one joins them — else a new channel would receive
    nothing but its test message. A default policy that names none already sends to
    every enabled channel."""
    kind = data.get("kind")
    if not isinstance(kind, str):
        raise InvalidSchedule.field("kind", "is required: email, slack or webhook")
    channel = AlertChannel(
        tenant=actor.tenant,
        name=_name(data.get("name")),
        kind=kind,
        config=channel_config.clean(kind, data.get("config", {}), tenant=actor.tenant),
        enabled=_enabled(data.get("enabled", True)),
    )
    if AlertChannel.objects.filter(tenant=actor.tenant).count() >= MAX_CHANNELS:
        raise InvalidSchedule.field("name", f"a tenant has at most {MAX_CHANNELS} alert channels")
    attach = data.get("use_in_default_policy", True)
    if not isinstance(attach, bool):
        raise InvalidSchedule.field("use_in_default_policy", "must be true or false")
    save_unique(channel, _NAME_TAKEN, force_insert=True)
    default = (
        AlertPolicy.objects.select_for_update()
        .filter(tenant=actor.tenant, schedule__isnull=True)
        .first()
    )
    added = False
    if attach and default is not None and default.channels.exists():
        default.channels.add(channel)
        added = True
    record_audit(
        actor,
        AuditAction.ALERT_CHANNEL_CREATE,
        channel,
        after=channel_snapshot(channel) | {"added_to_default_policy": added},
    )
    return channel


@transaction.atomic
def alert_channel_update(
    *, actor: Principal, channel_id: str, data: dict[str, Any]
) -> AlertChannel:
    channel = _locked(actor, channel_id)
    before = channel_snapshot(channel)
    if "kind" in data and data["kind"] != channel.kind:
        raise InvalidSchedule.field(
            "kind", f"cannot change ({channel.kind}): create another channel of the new kind"
        )
    if "name" in data:
        channel.name = _name(data["name"])
    if "config" in data:
        channel.config = channel_config.clean(channel.kind, data["config"], tenant=actor.tenant)
    if "enabled" in data:
        channel.enabled = _enabled(data["enabled"])
    channel.updated_at = Now()
    save_unique(channel, _NAME_TAKEN)
    channel.refresh_from_db(fields=["updated_at"])
    record_audit(
        actor,
        AuditAction.ALERT_CHANNEL_UPDATE,
        channel,
        before=before,
        after=channel_snapshot(channel),
    )
    return channel


@transaction.atomic
def alert_channel_delete(*, actor: Principal, channel_id: str) -> None:
    channel = _locked(actor, channel_id)
    record_audit(actor, AuditAction.ALERT_CHANNEL_DELETE, channel, before=channel_snapshot(channel))
    channel.delete()


def alert_channel_test(*, actor: Principal, channel_id: str) -> delivery.Delivery:
    """Send a test message over the channel now (enabled or not) and say what happened."""
    channel = alert_channel_get(tenant=actor.tenant, channel_id=channel_id)
    message = delivery.Message(
        event="alert.test",
        title=f"test message for channel {channel.name}",
        text=(
            f"{actor.label} sent this test from the scheduler to check that the "
            f"{channel.kind} channel {channel.name!r} of tenant {actor.tenant.slug} is delivered."
        ),
        data={"channel_id": str(channel.id), "channel": channel.name},
    )
    result = delivery.send(channel, message, tenant=actor.tenant)
    record_audit(
        actor,
        AuditAction.ALERT_CHANNEL_TEST,
        channel,
        after={"ok": result.ok, "detail": result.detail, "alert_id": message.alert_id},
        outcome="ok" if result.ok else "failed",
    )
    return result
