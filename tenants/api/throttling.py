"""Per-token rate limit: an exact counter in Redis (tenants/limits.py).

DRF's SimpleRateThrottle reads a request history from the cache and writes it
back, so concurrent requests of one token each saw room and 32 in flight let
about 8 % over the limit; one atomic increment per request cannot.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

from tenants import limits
from tenants.roles import Principal


class TokenRateThrottle(BaseThrottle):
    scope = "token"

    def __init__(self) -> None:
        self._wait: float | None = None

    def allow_request(self, request: Request, view: Any) -> bool:
        # Read at request time so operators (and tests) can change it without a code change.
        rate = limits.parse_rate(str(settings.API_RATE_LIMIT))
        principal = request.user
        if isinstance(principal, Principal):
            ident = f"{principal.actor_kind}:{principal.actor_id}"
        else:
            ident = f"ip:{limits.client_address(request)}"
        result = limits.hit(self.scope, ident, rate)
        if result.over:
            self._wait = float(result.retry_after_s)
            return False
        return True

    def wait(self) -> float | None:
        return self._wait
