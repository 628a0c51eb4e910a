"""Per-target-host rate limits in Redis, shared by every worker on every machine.

The platform must never flood a tenant's service (docs/explanation/executions.md,
"Rate limits per target host"): each host
(HTTP host:port, broker) is limited to `TARGET_RATE_PER_HOST`, with one
second's worth as burst. The limiter hands out *reservations* (GCRA, the
token bucket's virtual-clock form): every attempt that asks gets the next
free slot on the host's timeline, so waiting attempts are served first come,
first served, and each one waits exactly once. A "wait and ask again" bucket
made contenders race for each new token: attempts were held over and over,
re-claimed each time, and a late arrival could overtake one that had waited
for seconds.

A slot within `inline_s` is waited for in place; a later one is kept under
the attempt's ticket (execution id + attempt) so that, handed back and
re-delivered at its slot, the attempt goes at once without asking again.
One Lua script does it all on Redis's own clock (`TIME`), so concurrent
workers cannot take the same slot and workers' clocks never matter.

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

log = logging.getLogger("dispatch.ratelimit")  # its name before the move to dispatch/worker/

RESERVE_SCRIPT = """
local interval = 1000 / tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local inline_ms = tonumber(ARGV[3])
local keep_ms = tonumber(ARGV[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local slot = tonumber(redis.call('GET', KEYS[2]))
local kept = 1
if slot == nil then
  kept = 0
  local tat = tonumber(redis.call('GET', KEYS[1])) or now
  if tat < now then tat = now end
  slot = math.max(now, tat - (burst - 1) * interval)
  tat = tat + interval
  redis.call('SET', KEYS[1], tostring(tat), 'PX', math.ceil(tat - now + burst * interval) + 1000)
end
local wait = slot - now
if wait <= inline_ms then
  if kept == 1 then redis.call('DEL', KEYS[2]) end
  return {0, math.max(0, math.ceil(wait)), kept}
end
redis.call('SET', KEYS[2], tostring(slot), 'PX', math.ceil(wait + keep_ms))
return {1, math.ceil(wait), kept}
"""
# A kept slot outlives its time by this much: enough for the hand-back to be
# re-published and re-delivered; past it the attempt simply asks anew.
KEEP_AFTER_SLOT_MS = 600_000

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
        _script = _client.register_script(RESERVE_SCRIPT)
    return _client


@dataclass(frozen=True)
class Slot:
    """The limiter's answer: go after `wait_s` in place, or (`hold`) hand back until then."""

    wait_s: float
    hold: bool
    reserved_before: bool = False  # this attempt had been handed back with this slot


GO = Slot(0.0, hold=False)


def reserve(host_key: str, *, ticket: str, inline_s: float) -> Slot:
    """The next slot on `host_key`'s timeline for the attempt `ticket`.

    Fails open (GO): when Redis is unreachable the call proceeds (and is
    logged), because a protective limit must not turn a Redis outage into a
    job outage.
    """
    try:
        rate = parse_rate(settings.TARGET_RATE_PER_HOST)
    except ValueError:
        log.exception("TARGET_RATE_PER_HOST is invalid; not rate limiting")
        return GO
    try:
        redis_client()
        hold, wait_ms, kept = _script(
            keys=[f"sched:ratelimit:tat:{host_key}", f"sched:ratelimit:slot:{ticket}"],
            args=[rate.per_s, rate.burst, int(inline_s * 1000), KEEP_AFTER_SLOT_MS],
        )
    except Exception as exc:
        log.warning("rate limiter unavailable (%s); proceeding without it", type(exc).__name__)
        return GO
    return Slot(int(wait_ms) / 1000.0, hold=bool(int(hold)), reserved_before=bool(int(kept)))


def count_delivery(kind: str) -> None:
    """Count a delivery that claimed nothing (duplicate, stale, orphan, malformed, early)."""
    try:
        redis_client().hincrby(STATS_KEY, kind, 1)
    except Exception as exc:
        log.warning("could not count %s delivery (%s)", kind, type(exc).__name__)


def delivery_counts() -> dict[str, int]:
    raw = redis_client().hgetall(STATS_KEY)
    return {k.decode(): int(v) for k, v in raw.items()}
