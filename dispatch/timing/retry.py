"""Backoff math for retries: pure functions, no I/O.

A schedule's policy is `{"max_attempts", "backoff": "exponential"|"fixed",
"initial_s", "max_s"}` (validated by dispatch/schedule_fields.py). `attempt`
is always the 1-based number of the attempt that just failed.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

DEFAULT_POLICY: dict[str, Any] = {
    "max_attempts": 3,
    "backoff": "exponential",
    "initial_s": 10,
    "max_s": 3600,
}
# Jitter takes up to this fraction off a delay: retries of many executions that
# failed together (a target outage) spread out instead of returning in lockstep,
# and no delay ever exceeds the policy's cap.
JITTER_FRACTION = 0.2
# However long a target's Retry-After asks for, a retry is never parked longer.
RETRY_AFTER_CEILING_S = 24 * 3600.0


def policy(raw: Any) -> dict[str, Any]:
    """The schedule's retry policy with defaults for anything missing."""
    out = dict(DEFAULT_POLICY)
    if isinstance(raw, dict):
        out.update({k: v for k, v in raw.items() if k in DEFAULT_POLICY and v is not None})
    return out


def exhausted(pol: dict[str, Any], attempt: int) -> bool:
    """True when `attempt` was the last one the policy allows."""
    return attempt >= int(pol["max_attempts"])


def base_delay_s(pol: dict[str, Any], attempt: int) -> float:
    """The un-jittered delay after attempt `attempt` failed, capped by max_s."""
    initial = float(pol["initial_s"])
    cap = float(pol["max_s"])
    if pol["backoff"] == "fixed":
        return min(initial, cap)
    # Clamp the exponent: 2**attempt for attempt=100 is a float overflow risk
    # long before the cap would matter.
    return min(cap, initial * 2.0 ** min(attempt - 1, 62))


def backoff_s(
    pol: dict[str, Any],
    attempt: int,
    *,
    retry_after_s: float | None = None,
    rng: random.Random | None = None,
) -> float:
    """Seconds to wait before the next attempt.

    Jittered downwards by up to JITTER_FRACTION. A target's Retry-After is a
    floor: the platform never comes back sooner than the target asked, even
    when that is longer than the policy's max_s (bounded by a day).
    """
    base = base_delay_s(pol, attempt)
    rand = (rng or random).random()
    delay = base * (1.0 - JITTER_FRACTION * rand)
    if retry_after_s is not None:
        delay = max(delay, min(retry_after_s, RETRY_AFTER_CEILING_S))
    return max(0.0, delay)


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Retry-After as seconds: delta-seconds or an HTTP-date; None when absent or unparsable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(int(value))
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    current = now or datetime.now(UTC)
    return max(0.0, (when - current).total_seconds())
