"""Per-target-host token buckets in Redis, shared by every worker on every machine.

The platform must never flood a tenant's service (DESIGN.md §6): each host
(HTTP host:port, broker) has one bucket refilled at `TARGET_RATE_PER_HOST`.
Refill and take happen in one Lua script, so concurrent workers cannot both
take the last token, and the script reads Redis's own clock (`TIME`), so
workers' clocks never matter.

Also here: small counters of deliveries that claimed nothing (duplicates,
orphans, malformed), shared the same way.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from typing import Any

from django.conf import settings

log = logging.getLogger(__name__)

BUCKET_SCRIPT = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1])
local ts = tonumber(state[2])
if tokens == nil or ts == nil then
  tokens = burst
  ts = now
end
tokens = math.min(burst, tokens + math.max(0, now - ts) * rate / 1000)
local allowed = 0
local wait_ms = 0
if tokens >= 1 then
  tokens = tokens - 1
  allowed = 1
else
  wait_ms = math.ceil((1 - tokens) * 1000 / rate)
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst * 1000 / rate) + 1000)
return {allowed, wait_ms}
"""

_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*(s|sec|second|m|min|minute|h|hour)\s*$")
_PERIOD_S = {
    "s": 1,
    "sec": 1,
    "second": 1,
    "m": 60,
    "min": 60,
    "minute": 60,
    "h": 3600,
    "hour": 3600,
}
STATS_KEY = "sched:worker:deliveries"

_client: Any = None
_client_pid = 0
_script: Any = None


@dataclass(frozen=True)
class Rate:
    per_s: float
    burst: float


def parse_rate(text: str) -> Rate:
    """'50/s', '600/min', '1000/hour' → tokens per second, with one period's worth as burst."""
    match = _RATE.match(text or "")
    if not match:
        raise ValueError(f"rate {text!r} must look like '50/s', '600/min' or '1000/hour'")
    count, period = float(match.group(1)), _PERIOD_S[match.group(2)]
    if count <= 0:
        raise ValueError(f"rate {text!r} must be positive")
    # Burst: at most a second's worth (at least one token), so a slow rate
    # like 600/min does not allow 600 calls in the first instant.
    per_s = count / period
    return Rate(per_s=per_s, burst=max(1.0, min(count, per_s)))


def redis_client() -> Any:
    """A Redis client for this process (rebuilt after a fork: sockets are not shared)."""
    global _client, _client_pid, _script
    if _client is None or _client_pid != os.getpid():
        import redis

        _client = redis.Redis.from_url(
            settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2
        )
        _client_pid = os.getpid()
        _script = _client.register_script(BUCKET_SCRIPT)
    return _client


def take(host_key: str) -> float:
    """Take one token for `host_key`; 0.0 when granted, else seconds until one is due.

    Fails open: when Redis is unreachable the call proceeds (and is logged),
    because a protective limit must not turn a Redis outage into a job outage.
    """
    try:
        rate = parse_rate(settings.TARGET_RATE_PER_HOST)
    except ValueError:
        log.exception("TARGET_RATE_PER_HOST is invalid; not rate limiting")
        return 0.0
    try:
        redis_client()
        allowed, wait_ms = _script(
            keys=[f"sched:ratelimit:{host_key}"], args=[rate.per_s, rate.burst]
        )
    except Exception as exc:
        log.warning("rate limiter unavailable (%s); proceeding without it", type(exc).__name__)
        return 0.0
    return 0.0 if int(allowed) else max(0.001, int(wait_ms) / 1000.0)


def count_delivery(kind: str) -> None:
    """Count a delivery that claimed nothing (duplicate, stale, orphan, malformed, early)."""
    try:
        redis_client().hincrby(STATS_KEY, kind, 1)
    except Exception as exc:
        log.warning("could not count %s delivery (%s)", kind, type(exc).__name__)


def delivery_counts() -> dict[str, int]:
    raw = redis_client().hgetall(STATS_KEY)
    return {k.decode(): int(v) for k, v in raw.items()}
