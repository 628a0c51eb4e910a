"""Message targets: publish to a tenant-owned exchange/queue on a configured broker.

Definition: {"type": "queue", "broker": "default", "exchange": "<tenant>.x", "routing_key", "body"}.
(Named queue_publish.py: a module named `queue` would shadow the standard library.)
"""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings

from dispatch.exceptions import InvalidSchedule
from dispatch.targets.common import clean_str, clean_timeout, require_keys
from tenants.models import Tenant

KEYS = {"type", "broker", "exchange", "routing_key", "body", "timeout_s"}
NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,200}$")


def clean(config: dict[str, Any], *, tenant: Tenant) -> dict[str, Any]:
    require_keys(config, allowed=KEYS)
    broker = clean_str(config, "broker", required=False, max_len=64, default="default")
    known = getattr(settings, "TARGET_BROKERS", {"default": None})
    if broker not in known:
        raise InvalidSchedule.field(
            "target.broker", f"unknown broker; configured: {', '.join(sorted(known))}"
        )
    exchange = clean_str(config, "exchange", required=False, max_len=200, default="")
    routing_key = clean_str(config, "routing_key", required=True, max_len=200)
    owned_prefix = f"{tenant.slug}."
    for key, value in (("exchange", exchange), ("routing_key", routing_key)):
        if value and not NAME.match(value):
            raise InvalidSchedule.field(
                f"target.{key}", "may hold letters, digits and _ . : - only"
            )
    # Tenants publish only into their own namespace: with the default exchange the
    # routing key is the queue name, so it must carry the prefix too.
    if exchange and not exchange.startswith(owned_prefix):
        raise InvalidSchedule.field(
            "target.exchange", f"must start with '{owned_prefix}' (the tenant's namespace)"
        )
    if not exchange and not routing_key.startswith(owned_prefix):
        raise InvalidSchedule.field(
            "target.routing_key",
            f"must start with '{owned_prefix}' when publishing to the default exchange",
        )
    body = config.get("body", {})
    if not isinstance(body, (dict, list, str)):
        raise InvalidSchedule.field("target.body", "must be a string or JSON")
    return {
        "type": "queue",
        "broker": broker,
        "exchange": exchange,
        "routing_key": routing_key,
        "body": body,
        "timeout_s": clean_timeout(config, default=30),
    }
