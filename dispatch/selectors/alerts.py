"""Alert channels of a tenant: the list, one (another tenant's is a 404)."""

from __future__ import annotations

import uuid

from dispatch.exceptions import NotFound
from dispatch.models import AlertChannel
from dispatch.selectors.paging import as_uuid
from tenants.models import Tenant


def alert_channel_list(*, tenant: Tenant) -> list[AlertChannel]:
    # Bounded by services.alert_channels.MAX_CHANNELS: no paging needed.
    return list(AlertChannel.objects.filter(tenant=tenant).order_by("name"))


def alert_channel_get(*, tenant: Tenant, channel_id: uuid.UUID | str) -> AlertChannel:
    pk = as_uuid(channel_id)
    channel = AlertChannel.objects.filter(tenant=tenant, pk=pk).first() if pk else None
    if channel is None:
        raise NotFound("alert channel not found")
    return channel
