"""Next fire times computed locally, with the platform's own cron module.

`scheduler_client.timing` is the platform's `dispatch/timing` package itself
(a symlink in the repository, shipped in the wheel), so `schedctl preview` and
the server can never disagree about DST, `H` or macros — and no server is needed.
"""

from __future__ import annotations

from datetime import UTC, datetime

from scheduler_client.timing import cron as _cron

__all__ = ["Occurrence", "describe", "next_runs", "occurrences"]

Occurrence = _cron.Occurrence


def next_runs(
    cron: str,
    timezone: str,
    count: int = 5,
    after: datetime | None = None,
    *,
    seed: str = "",
) -> list[datetime]:
    """The next `count` occurrences strictly after `after` (default now), aware UTC.

    `seed` resolves `H` fields: the server seeds with the schedule's id, so pass it
    to reproduce an existing schedule's hashed times. ValueError with the reason
    for a bad expression or zone.
    """
    return [o.scheduled_for for o in occurrences(cron, timezone, count, after, seed=seed)]


def occurrences(
    cron: str,
    timezone: str,
    count: int = 5,
    after: datetime | None = None,
    *,
    seed: str = "",
) -> list[_cron.Occurrence]:
    """As next_runs(), with each occurrence's local time and DST note (as the server's preview)."""
    start = after if after is not None else datetime.now(UTC)
    if start.tzinfo is None:
        raise ValueError("after must be timezone-aware")
    return _cron.preview(cron, timezone, seed=seed, after=start, count=count)


def describe(cron: str, *, seed: str = "") -> str:
    """A human sentence for the expression (ValueError when it is invalid)."""
    return _cron.describe(cron, seed=seed)
