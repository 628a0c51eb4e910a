"""Keeping an ended attempt's live log with its execution.

While an attempt runs, its log is a Redis stream (dispatch/logs.py). When the attempt
ends, its log is sealed (no writer can add to it after that, a stale one included)
and what it held becomes one `attempt_log` event of the execution. Events are
history: the log is then read from the database, archived with the execution's day
and dropped with it, and the Redis stream is discarded.

- The worker's finish (dispatch/worker/runner.py) seals first and writes the event
  with its finish, in the same statement: no commit of its own on the firing path.
  An attempt that wrote no line (most HTTP calls: see LineWriter's quiet_s) seals
  nothing at all.
- Everything else that ends an attempt — a completion callback, the sweeper, a
  user's cancel, a finish the token refused — calls `keep_attempt_log`, which seals
  and writes the event on its own.

Whoever seals first keeps it; later callers find it sealed and do nothing. If the
database refuses the event, the sealed stream stays readable in Redis until
LIVE_LOG_RETENTION_S and is lost after.
"""

from __future__ import annotations

import json
import logging
import uuid

from django.db import DatabaseError, transaction

from dispatch import logs
from dispatch.history.ids import occurrence_bounds
from dispatch.sql import sql
from dispatch.states import EventKind
from dispatch.worker.leases import Event

log = logging.getLogger("dispatch.logs")


def log_event(attempt: int, sealed: logs.Sealed) -> Event | None:
    """The `attempt_log` event of a sealed log; None when it held nothing."""
    if not sealed.rows and not sealed.dropped:
        return None
    message = f"attempt {attempt}'s log kept: {len(sealed.rows)} lines, {sealed.bytes} bytes"
    if sealed.dropped:
        message += f" (the oldest {sealed.dropped} lines were dropped by the cap)"
    return Event(
        EventKind.ATTEMPT_LOG,
        message,
        {
            "attempt": attempt,
            "lines": sealed.rows,
            "written_lines": sealed.written,
            "dropped_lines": sealed.dropped,
            "bytes": sealed.bytes,
        },
    )


def keep_attempt_log(execution_id: str | uuid.UUID, attempt: int, *, actor: str) -> bool:
    """Seal the attempt's live log and keep it with the execution; whether this call
    kept it (False: sealed before, empty, Redis away, or the database refused)."""
    eid = str(execution_id)
    sealed = logs.seal(eid, attempt)
    return sealed is not None and keep_sealed(eid, attempt, sealed, actor=actor)


def keep_sealed(execution_id: str, attempt: int, sealed: logs.Sealed, *, actor: str) -> bool:
    """Write a log this caller sealed as its execution's event, then discard the stream."""
    event = log_event(attempt, sealed)
    if event is None:
        logs.discard(execution_id, attempt)
        return False
    try:
        with transaction.atomic():
            kept = sql.one(
                "keep_attempt_log",
                {
                    "id": execution_id,
                    "message": event.message,
                    "data": json.dumps(event.data),
                    "actor": actor,
                }
                | occurrence_bounds(execution_id),
            )
    except DatabaseError as exc:
        log.warning("live log of %s attempt %s not kept: %s", execution_id, attempt, exc)
        return False
    if kept is not None:
        logs.discard(execution_id, attempt)
    return kept is not None
