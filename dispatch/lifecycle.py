"""Lifecycle bounds of a schedule: `max_runs`, the `completed` state, and `delete_after`
for one-offs. Validation here, shared by the API, the console and apply; the writes
are the worker's finish statement (dispatch/sql/worker.sql, the count), the schedule
services (re-opening) and retention (dispatch/sql/retention.sql, delete_after).

`max_runs` counts SUCCEEDED occurrences, not fires: a failed, dead, skipped or
cancelled occurrence does not count; an occurrence that succeeds after re-runs counts
once; a manual run or a backfilled occurrence that succeeds counts like a timed one.
When the count reaches max_runs the schedule is `completed`: it has no next run, the
occurrences staged but not yet published are withdrawn, published ones not yet
claimed are skipped when claimed, and ones already running finish normally (their
success still counts, so `runs_succeeded` may end above max_runs).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from dispatch.exceptions import InvalidSchedule
from dispatch.timing import cron, durations

MAX_RUNS_LIMIT = 10_000_000
# A one-off kept this long after its run is kept in practice; longer is a typo.
MAX_DELETE_AFTER = timedelta(days=3650)


class CompletedReason:
    MAX_RUNS = "max_runs"
    END_AT = "end_at"


@dataclass(frozen=True)
class Completion:
    """Why a schedule is completed, and since when (None: unknown)."""

    reason: str
    at: datetime | None
    sentence: str


def clean_max_runs(value: Any, *, kind: str) -> int | None:
    if value is None:
        return None
    if kind != "cron":
        raise InvalidSchedule.field("max_runs", "applies to recurring (cron) schedules only")
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_RUNS_LIMIT:
        raise InvalidSchedule.field("max_runs", f"must be a whole number in 1..{MAX_RUNS_LIMIT}")
    return int(value)


def clean_delete_after(value: Any, *, kind: str) -> timedelta | None:
    """A duration string ("90m", "7d"), a timedelta (a stored value), or None (keep)."""
    if value is None:
        return None
    if kind != "once":
        raise InvalidSchedule.field("delete_after", "applies to one-off jobs only")
    if isinstance(value, timedelta):
        delta = value
    elif isinstance(value, str):
        if value.strip().startswith("-"):
            raise InvalidSchedule.field("delete_after", "must not be negative")
        try:
            delta = durations.parse(value)
        except ValueError as exc:
            raise InvalidSchedule.field("delete_after", str(exc)) from None
    else:
        raise InvalidSchedule.field("delete_after", 'must be a duration string such as "7d"')
    if delta < timedelta(0):
        raise InvalidSchedule.field("delete_after", "must not be negative")
    if delta > MAX_DELETE_AFTER:
        raise InvalidSchedule.field("delete_after", "must be at most 3650d (10 years)")
    return delta


def spell_delete_after(delta: timedelta | None) -> str | None:
    """The stored duration in the API's own spelling (apply/export round-trip it)."""
    if delta is None:
        return None
    seconds = int(delta.total_seconds())
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size or (unit == "s" and not parts):
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return "".join(parts)


def reached_max_runs(*, max_runs: int | None, runs_succeeded: int) -> bool:
    return max_runs is not None and runs_succeeded >= max_runs


def end_of(schedule: Any) -> datetime | None:
    """The schedule's end_at: a part of its timing text (dispatch/timing/cron.py)."""
    if schedule.kind != "cron" or not schedule.cron:
        return None
    return cron.bounds(schedule.cron)[1]


def completion(schedule: Any, *, now: datetime) -> Completion | None:
    """Whether `schedule` is completed (reached its max_runs, or its end_at passed), why."""
    if reached_max_runs(max_runs=schedule.max_runs, runs_succeeded=schedule.runs_succeeded):
        at = schedule.completed_at
        when = f" on {at.astimezone(UTC):%Y-%m-%d %H:%M} UTC" if at else ""
        return Completion(
            CompletedReason.MAX_RUNS,
            at,
            f"completed: reached max_runs {schedule.max_runs}{when}",
        )
    end_at = end_of(schedule)
    if end_at is not None and end_at <= now:
        stamp = end_at.astimezone(UTC).isoformat().replace("+00:00", "Z")
        return Completion(CompletedReason.END_AT, end_at, f"completed: end_at {stamp} passed")
    return None
