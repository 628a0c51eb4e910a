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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from time import monotonic

from django.db import OperationalError, transaction

from core.errors import constraint_name
from dispatch.sql import sql

log = logging.getLogger("dispatch.history")

AHEAD_DAYS = 7
EXTEND_BELOW_DAYS = 3
# Reads newest first (the runs page, GET /v1/executions, their capped totals) walk
# history in windows of day partitions whose count doubles going back. A query
# bounded on scheduled_for is planned over the partitions its bounds name, and an
# unbounded one over all of them: planning opens every partition with its indexes
# (~0.2 ms a partition here; a year kept is ~370). A page that fills in the first
# window (today and the days ahead: most pages) costs one query over those; a
# sparse filter costs one query per doubling. The days held are looked up at most
# every HELD_DAYS_CACHE_S per process: a stale list only makes windows wider or
# narrower, never leaves a row out (the windows always cover every instant).
HELD_DAYS_CACHE_S = 60.0
# A page or a capped total of the runs page (and GET /v1/executions) reads at most
# READ_DAYS held days per request: a filter that matches few rows would otherwise
# plan every partition kept (52 ms at 250). The default retention (30 days) and the
# days waiting for their archive fit in one request; past them, a short page comes
# back with a cursor that reads on below (scan_limited), and a total says "at least".
READ_DAYS = 40
_held: tuple[float, list[date]] | None = None
_DAY = re.compile(r"_p(\d{8})$")


@dataclass(frozen=True)
class HistoryTable:
    name: str

    def day_partition(self, day: date) -> str:
        return f"{self.name}_p{day:%Y%m%d}"

    @property
    def before(self) -> str:
        return f"{self.name}_before"

    @property
    def after(self) -> str:
        return f"{self.name}_after"


EXECUTIONS = HistoryTable("dispatch_execution")  # by scheduled_for
EVENTS = HistoryTable("dispatch_executionevent")  # by at
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


def held_days() -> list[date]:
    """The days with a partition of executions, oldest first (cached: HELD_DAYS_CACHE_S)."""
    global _held
    now = monotonic()
    if _held is None or now - _held[0] > HELD_DAYS_CACHE_S:
        _held = (now, [p.day for p in days(EXECUTIONS)])
    return _held[1]


@dataclass(frozen=True)
class Walk:
    """The windows of a newest-first read, and where a budgeted walk stopped."""

    windows: list[tuple[datetime | None, datetime | None]]
    # The lower bound of the last window when the walk stopped at its budget of days
    # with held days left below it (the read goes on below it at the next request);
    # None when the windows cover everything the bounds admit.
    cut: datetime | None = None

    def __iter__(self) -> Iterator[tuple[datetime | None, datetime | None]]:
        return iter(self.windows)


def newest_first_windows(
    now: datetime,
    *,
    held: Sequence[date],
    upper: datetime | None = None,
    lower: datetime | None = None,
    days: int | None = None,
) -> Walk:
    """Contiguous [lo, hi) ranges of scheduled_for (None: unbounded) that together
    cover everything at or below `upper` and at or above `lower`, newest first: from
    the start of the top day (`upper`'s, else today's) upwards without bound (the
    caller's filters bound the top), then 1, 2, 4 ... of the `held` days below it,
    then everything older (the lower catch-all) without bound. The ranges only say
    which partitions a query reads: rows are selected by the caller's filters, so any
    `now` and any `held` give the same rows.

    With `days`, the walk reads at most that many held days (the top day counts as
    one) and stops there when held days are left below: `cut` says where."""
    top = day_of(upper if upper is not None else now)
    below = [day for day in held if day < top]
    lo = day_start(top)
    hi: datetime | None = None
    take = read = 1
    windows: list[tuple[datetime | None, datetime | None]] = []
    while lower is None or lo > lower:
        windows.append((lo, hi))
        hi = lo
        if not below:
            break
        if days is not None and read >= days:
            return Walk(windows, cut=lo)
        step = take if days is None else min(take, days - read)
        lo = day_start(below[-step:][0])
        del below[-step:]
        read += step
        take *= 2
    windows.append((None, hi))
    return Walk(windows)


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
