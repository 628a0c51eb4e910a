"""Per-token rate limit (DRF throttle backed by the shared Redis cache)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from tenants.roles import Principal


class TokenRateThrottle(SimpleRateThrottle):
    scope = "token"

    def get_rate(self) -> str | None:
        # Read at request time so operators (and tests) can change it without a code change.
        return str(settings.API_RATE_LIMIT)

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        principal = request.user
        if isinstance(principal, Principal):
            return f"throttle:{principal.actor_kind}:{principal.actor_id}"
        return f"throttle:ip:{self.get_ident(request)}"
