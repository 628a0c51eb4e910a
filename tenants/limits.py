"""Exact counters for throttles and brute-force limits, in Redis (the REDIS_URL cache).

One Lua script increments the counter and, on the window's first hit, sets its
expiry, so any number of web processes and threads count every request exactly
once: a limit of N lets exactly N through per window, however many requests
are in flight (a read-then-write counter let about 8 % more through at 32 in
flight). The window is fixed and starts at the first counted hit; `Retry-After`
is the time left on it.

A counter that Redis cannot reach fails open (logged): a protective limit must
not turn a cache outage into a login or API outage.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.checks import Error
from django.http import HttpRequest

from dispatch.worker.ratelimit import redis_client

log = logging.getLogger(__name__)

HIT_SCRIPT = """
if tonumber(ARGV[2]) < 0 and redis.call('EXISTS', KEYS[1]) == 0 then
  return {0, 0}
end
local n = redis.call('INCRBY', KEYS[1], ARGV[2])
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  ttl = tonumber(ARGV[1])
end
return {n, ttl}
"""

_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*([a-z]+)\s*$")
_UNIT_S = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60}
_UNIT_S |= {"h": 3600, "hour": 3600, "d": 86400, "day": 86400}
_UNIT_S |= {f"{unit}s": n for unit, n in list(_UNIT_S.items()) if len(unit) > 1}
SETTINGS = (
    "API_RATE_LIMIT",
    "API_AUTH_FAILURES_PER_ADDRESS",
    "LOGIN_FAILURES_PER_USER",
    "LOGIN_FAILURES_PER_ADDRESS",
    "INVITE_ATTEMPTS_PER_ADDRESS",
)

_script: Any = None
_script_client: Any = None


@dataclass(frozen=True)
class Rate:
    limit: int
    window_s: int


def parse_rate(text: str) -> Rate:
    """'1200/min', '10/15min', '100/hour', '5/day' → count per window."""
    match = _RATE.match(text or "")
    if not match or match.group(3) not in _UNIT_S:
        raise ValueError(f"rate {text!r} must look like '1200/min', '10/15min' or '100/hour'")
    count, multiple, unit = int(match.group(1)), int(match.group(2) or 1), match.group(3)
    if count <= 0 or multiple <= 0:
        raise ValueError(f"rate {text!r} must be positive")
    return Rate(limit=count, window_s=multiple * _UNIT_S[unit])


@dataclass(frozen=True)
class Hit:
    count: int  # this window's count, this hit included
    limit: int
    retry_after_s: int  # until the window ends

    @property
    def over(self) -> bool:
        return self.count > self.limit


def _key(scope: str, ident: str) -> str:
    # Hashed: usernames and addresses are user input; keys stay short and inert.
    return f"sched:limit:{scope}:{hashlib.sha256(ident.encode()).hexdigest()[:32]}"


def hit(scope: str, ident: str, rate: Rate, *, amount: int = 1) -> Hit:
    """Count `amount` (1, or -1 to give one back) against `ident` in `scope`."""
    global _script, _script_client
    try:
        client = redis_client()
        if _script is None or _script_client is not client:
            _script, _script_client = client.register_script(HIT_SCRIPT), client
        count, ttl_ms = _script(keys=[_key(scope, ident)], args=[rate.window_s * 1000, amount])
    except Exception as exc:
        log.warning("limit counter %s unavailable (%s); not limiting", scope, type(exc).__name__)
        return Hit(count=0, limit=rate.limit, retry_after_s=0)
    return Hit(count=int(count), limit=rate.limit, retry_after_s=max(1, -(-int(ttl_ms) // 1000)))


def check_settings(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """System check: a mistyped limit is an error at start-up, not a 500 per request."""
    errors = []
    for name in SETTINGS:
        try:
            parse_rate(str(getattr(settings, name)))
        except ValueError as exc:
            errors.append(Error(f"{name}: {exc}", id="tenants.E001"))
    if not 1 <= int(settings.INVITATION_TTL_DAYS) <= 365:
        # 0 would make links that never work; years, a credential nobody remembers.
        errors.append(Error("INVITATION_TTL_DAYS: must be 1 to 365", id="tenants.E002"))
    return errors


def client_address(request: HttpRequest) -> str:
    """The client's address: REMOTE_ADDR, or the X-Forwarded-For entry appended by the
    TRUSTED_PROXY_COUNT-th proxy from the right (entries further left are client-made)."""
    remote = str(request.META.get("REMOTE_ADDR") or "")
    proxies = int(getattr(settings, "TRUSTED_PROXY_COUNT", 0))
    if proxies > 0:
        forwarded = [
            a.strip() for a in str(request.META.get("HTTP_X_FORWARDED_FOR", "")).split(",")
        ]
        forwarded = [a for a in forwarded if a]
        if len(forwarded) >= proxies:
            return forwarded[-proxies]
    return remote or "unknown"
