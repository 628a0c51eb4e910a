"""An attempt's log: read from the execution's history once the attempt ended and its
log was kept (dispatch/services/logs.py), else live from Redis (dispatch/logs.py);
from the archive once the execution's day was archived. All give the same lines
under the same cursors, so a follower crosses the attempt's end without a gap or a
repeat."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from dispatch import logs
from dispatch.models import Execution, ExecutionEvent
from dispatch.selectors.executions import ExecutionRecord
from dispatch.states import EventKind

# Events of an execution are written after its row: a bound on `at` (with room for
# clocks that disagree) lets PostgreSQL plan only the event partitions that can hold them.
_CLOCK_SLACK = timedelta(hours=1)


@dataclass(frozen=True)
class LogPage:
    lines: list[logs.Line]
    dropped: int  # lines the cap dropped (the oldest)
    kept: bool  # read from the execution's history: the attempt ended


def kept_log(*, execution: Execution, attempt: int) -> dict[str, Any] | None:
    """The `attempt_log` event's data of an ended attempt, None while it has none."""
    data: dict[str, Any] | None = (
        ExecutionEvent.objects.filter(
            tenant_id=execution.tenant_id,
            execution_id=execution.id,
            at__gte=execution.created_at - _CLOCK_SLACK,
            kind=EventKind.ATTEMPT_LOG,
            data__attempt=attempt,
        )
        .order_by("id")
        .values_list("data", flat=True)
        .first()
    )
    return data


def _kept_lines(data: dict[str, Any]) -> list[logs.Line]:
    return [
        logs.Line(cursor=c, at=datetime.fromtimestamp(at, tz=UTC), stream=s, text=t)
        for c, at, s, t in data.get("lines", [])
    ]


def _kept_page(data: dict[str, Any], after: str | None, limit: int | None) -> LogPage:
    lines = _kept_lines(data)
    if after is not None:
        floor = logs.cursor_key(after)
        lines = [x for x in lines if logs.cursor_key(x.cursor) > floor]
    return LogPage(lines[:limit], int(data.get("dropped_lines", 0)), kept=True)


def archived_attempt_log(
    *, record: ExecutionRecord, attempt: int, after: str | None, limit: int | None
) -> LogPage:
    """An archived execution's attempt log, as its archive kept it (none: no lines;
    `limit` None: every line)."""
    data = record.kept_logs.get(attempt)
    return _kept_page(data, after, limit) if data else LogPage([], 0, kept=True)


def attempt_log(
    *, execution: Execution, attempt: int, after: str | None, limit: int, wait_s: float = 0.0
) -> LogPage:
    """The attempt's lines after the cursor `after`, at most `limit`; a live attempt's
    read waits up to `wait_s` for a first new line. LiveLogUnavailable when the live
    log's Redis does not answer."""
    data = kept_log(execution=execution, attempt=attempt)
    if data is not None:
        return _kept_page(data, after, limit)
    eid = str(execution.id)
    lines = logs.read(eid, attempt, after=after, limit=limit, wait_s=wait_s)
    return LogPage(lines, logs.dropped(eid, attempt), kept=False)


def attempt_log_tail(*, execution: Execution, attempt: int, n: int) -> list[logs.Line]:
    """The attempt's last `n` lines, oldest first ([] when the live log's Redis is away)."""
    data = kept_log(execution=execution, attempt=attempt)
    if data is not None:
        return _kept_lines(data)[-n:]
    return logs.tail(str(execution.id), attempt, n)
