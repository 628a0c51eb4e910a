"""Execution ids that carry their occurrence's time (UUID version 7 layout).

History is partitioned by `scheduled_for` (docs/explanation/history.md), so a
lookup by id alone probes every partition's primary-key index, and once a day is
archived the row is gone from the database altogether. An id whose first 48 bits
are `scheduled_for` in Unix milliseconds answers both: the selector adds the
one-millisecond range it names (one partition probed), and an id that is no longer
in the database names the archived day to read (dispatch/history/archive.py).

The layout is RFC 9562's version 7: 48 bits of milliseconds, the version nibble
(7), 12 random bits, the variant, 62 random bits — 74 random bits per millisecond
of one occurrence, and the occurrence key (schedule, scheduled_for) is unique
anyway. The SQL writers use the same layout through the database function
`dispatch_execution_id(timestamptz)` (migration 0023). Ids written before that
migration are random (version 4): `occurrence_ms` answers None for them and
lookups fall back to probing every partition.

A version 7 id is taken at its word where the platform made it: the worker's
claim reads only the millisecond its message's id names. So every writer of
executions makes the id from the row's own scheduled_for (execution_id here,
`dispatch_execution_id` in SQL), and nothing ever changes a row's scheduled_for.
"""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime, timedelta

from django.db import models

_MS = timedelta(milliseconds=1)


def execution_id(scheduled_for: datetime) -> uuid.UUID:
    """A new id for the execution of this occurrence."""
    ms = int(scheduled_for.timestamp() * 1000)
    raw = bytearray(ms.to_bytes(6, "big") + os.urandom(10))
    raw[6] = 0x70 | (raw[6] & 0x0F)  # version 7
    raw[8] = 0x80 | (raw[8] & 0x3F)  # RFC variant
    return uuid.UUID(bytes=bytes(raw))


def occurrence_ms(execution: uuid.UUID | str) -> int | None:
    """`scheduled_for` in Unix milliseconds, as the id carries it; None for an id not
    made by execution_id (a random one from before migration 0023)."""
    try:
        value = execution if isinstance(execution, uuid.UUID) else uuid.UUID(str(execution))
    except ValueError:
        return None
    if value.version != 7:
        return None
    return int.from_bytes(value.bytes[:6], "big")


def occurrence_window(execution: uuid.UUID | str) -> tuple[datetime, datetime] | None:
    """The half-open millisecond [start, end) that holds the execution's
    scheduled_for, or None when the id does not carry it."""
    ms = occurrence_ms(execution)
    if ms is None:
        return None
    start = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return start, start + _MS


def occurrence_bounds(execution: uuid.UUID | str) -> dict[str, datetime | str]:
    """`lo` and `hi` of a statement that names one execution by id: its occurrence's
    millisecond, or unbounded (`-infinity`, `infinity`) for an id that does not carry
    it. PostgreSQL then plans the one day partition instead of every one."""
    window = occurrence_window(execution)
    if window is None:
        return {"lo": "-infinity", "hi": "infinity"}
    return {"lo": window[0], "hi": window[1]}


class ExecutionIdField(models.UUIDField):  # type: ignore[type-arg]
    """The primary key of Execution: made from the row's own scheduled_for when the
    row is saved or bulk-created without one (Django asks get_pk_value_on_save), so
    every ORM writer gets a time-carrying id without passing it."""

    def get_pk_value_on_save(self, instance: models.Model) -> uuid.UUID | None:
        scheduled_for = getattr(instance, "scheduled_for", None)
        if scheduled_for is None:
            return None
        return execution_id(scheduled_for)
