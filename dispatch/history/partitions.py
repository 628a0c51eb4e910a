"""The day partitions of execution history, kept a week ahead by the beats.

`dispatch_execution` is partitioned by RANGE (scheduled_for) and
`dispatch_executionevent` by RANGE (at), one partition per UTC day named
`<table>_pYYYYMMDD`, between two catch-alls: `<table>_before` (everything older
than the first day) and `<table>_after` (everything after the last). There is no
DEFAULT partition, because PostgreSQL refuses DETACH ... CONCURRENTLY on a table
that has one, and retention detaches concurrently (dispatch/history/archive.py).

The firing path writes rows due within minutes, so the days ahead only have to
exist before the clock reaches them. The maintenance step (`ensure_ahead`, run by
the beat that runs retention, hourly) extends them to AHEAD_DAYS ahead once fewer
than EXTEND_BELOW_DAYS are left: twice a week. Extending splits the `_after`
catch-all — detach it, create the new days and a new catch-all, move its rows
(normally none: only a test or a clock far in the future writes there) — in one
transaction under the table's ACCESS EXCLUSIVE lock, held for milliseconds and
given up after two seconds of waiting (the next pass tries again, days early).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from django.db import OperationalError, transaction

from core.errors import constraint_name
from dispatch.sql import sql

log = logging.getLogger("dispatch.history")

AHEAD_DAYS = 7
EXTEND_BELOW_DAYS = 3
_DAY = re.compile(r"_p(\d{8})$")


@dataclass(frozen=True)
class HistoryTable:
    name: str
    key: str  # the partition key column

    def day_partition(self, day: date) -> str:
        return f"{self.name}_p{day:%Y%m%d}"

    @property
    def before(self) -> str:
        return f"{self.name}_before"

    @property
    def after(self) -> str:
        return f"{self.name}_after"


EXECUTIONS = HistoryTable("dispatch_execution", "scheduled_for")
EVENTS = HistoryTable("dispatch_executionevent", "at")
TABLES = (EXECUTIONS, EVENTS)


@dataclass(frozen=True)
class DayPartition:
    name: str
    day: date
    detach_pending: bool


def violates_occurrence_key(exc: BaseException) -> bool:
    """Whether an IntegrityError is the occurrence key's (UNIQUE (schedule_id,
    scheduled_for)). PostgreSQL names the partition's copy of the constraint, which
    it called `<partition>_schedule_id_scheduled_for_key`, not the table's
    `execution_one_per_occurrence`."""
    name = constraint_name(exc) or ""
    return name == "execution_one_per_occurrence" or (
        name.startswith(f"{EXECUTIONS.name}_") and name.endswith("_schedule_id_scheduled_for_key")
    )


def day_start(day: date) -> datetime:
    return datetime.combine(day, time(0), tzinfo=UTC)


def day_of(instant: datetime) -> date:
    return instant.astimezone(UTC).date()


def days(table: HistoryTable) -> list[DayPartition]:
    """The table's day partitions, oldest first."""
    found = []
    for row in sql.rows("history_partitions", {"parent": table.name}):
        match = _DAY.search(row.name)
        if match:
            digits = match.group(1)
            day = date(int(digits[:4]), int(digits[4:6]), int(digits[6:]))
            found.append(DayPartition(row.name, day, row.detach_pending))
    return sorted(found, key=lambda p: p.day)


def first_kept_start() -> datetime | None:
    """Where the oldest day partition of executions begins: the lower catch-all ends
    there, and the row-level purge stops there (a day partition leaves whole)."""
    held = days(EXECUTIONS)
    return day_start(held[0].day) if held else None


def ensure_ahead(today: date) -> list[str]:
    """Day partitions up to AHEAD_DAYS after `today` for every history table, when
    fewer than EXTEND_BELOW_DAYS are left: the partitions created. A lock not
    granted within 100 ms leaves it to the next pass (logged): the detach of the
    upper catch-all takes the whole table, and a firing path queued behind a lock
    request that waits would wait with it. The days ahead leave many passes to try."""
    created: list[str] = []
    for table in TABLES:
        existing = days(table)
        last = existing[-1].day if existing else today - timedelta(days=1)
        if last >= today + timedelta(days=EXTEND_BELOW_DAYS):
            continue
        try:
            created += _extend(table, last, today + timedelta(days=AHEAD_DAYS))
        except OperationalError as exc:
            log.warning("history: could not extend %s's days ahead yet: %s", table.name, exc)
    if created:
        log.info("history: created partitions %s", ", ".join(created))
    return created


def reopen_days(first: date) -> list[str]:
    """Day partitions again from `first` up to the oldest day kept, carved out of the
    lower catch-all: to load an archived day back for a look, or to undo a test's
    retention. The partitions created."""
    created: list[str] = []
    for table in TABLES:
        held = days(table)
        if held and first < held[0].day:
            created += _split(table, table.before, first, held[0].day - timedelta(days=1))
    return created


def _extend(table: HistoryTable, last: date, until: date) -> list[str]:
    """The days after `last` through `until` out of the upper catch-all."""
    return _split(table, table.after, last + timedelta(days=1), until)


def _split(table: HistoryTable, catchall: str, first: date, last: date) -> list[str]:
    """Days `first` through `last` become partitions of their own, taken out of a
    catch-all, which is made again around them: detach it, create the days and the
    new catch-all, move its rows (routed to wherever they now belong), drop it."""
    parent = {"parent": table.name}
    old = f"{catchall}_old"
    created = []
    with transaction.atomic():
        sql.execute("history_lock_timeout")
        sql.execute("history_detach", identifiers=parent | {"name": catchall})
        sql.execute("history_rename", identifiers={"name": catchall, "new": old})
        day = first
        while day <= last:
            name = table.day_partition(day)
            sql.execute(
                "history_create_range",
                identifiers=parent | {"name": name},
                literals={"lo": day_start(day), "hi": day_start(day + timedelta(days=1))},
            )
            created.append(name)
            day += timedelta(days=1)
        if catchall == table.after:
            sql.execute(
                "history_create_after",
                identifiers=parent | {"name": catchall},
                literals={"lo": day_start(last + timedelta(days=1))},
            )
        else:
            sql.execute(
                "history_create_before",
                identifiers=parent | {"name": catchall},
                literals={"hi": day_start(first)},
            )
        sql.execute("history_move_rows", identifiers=parent | {"old": old})
        sql.execute("history_drop", identifiers={"name": old})
    return created
