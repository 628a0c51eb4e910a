"""Writing audit rows. Call inside the transaction of the change being recorded."""

from __future__ import annotations

from typing import Any

from config.middleware import request_id_var
from tenants.models import AuditEvent, Tenant
from tenants.roles import Principal


def audit_record(
    *,
    actor: Principal | None,
    action: str,
    tenant: Tenant | None = None,
    object_type: str = "",
    object_id: str = "",
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    outcome: str = "ok",
    actor_label: str = "",
    actor_kind: str = "",
    actor_id: str = "",
) -> AuditEvent:
    return AuditEvent.objects.create(
        tenant=tenant if tenant is not None else (actor.tenant if actor else None),
        actor_kind=actor.actor_kind if actor else (actor_kind or "system"),
        actor_id=actor.actor_id if actor else actor_id,
        actor_label=actor.label if actor else (actor_label or "system"),
        action=action,
        object_type=object_type,
        object_id=str(object_id),
        before=before,
        after=after,
        request_id=request_id_var.get(),
        outcome=outcome,
    )
