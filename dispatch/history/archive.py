"""Retention as archive, detach, drop: one UTC day of history at a time.

A day whose end is older than the retention cutoff (RETENTION_DAYS, never inside
the misfire horizon: dispatch/scheduler/retention.py, cutoff_for) and whose
executions are all final leaves the database in four steps, each safe to repeat
after a crash:

1. **Archive.** Both day partitions (executions by scheduled_for, events by at)
   are written to the object store (dispatch/history/objects.py) as gzip-compressed
   JSON lines, one file per table and tenant —
   `executions/day=2026-11-01/tenant=7.jsonl.gz` — each line one row as
   PostgreSQL's row_to_json spells it. A manifest `manifests/day=2026-11-01.json`
   lists every file with its rows and the SHA-256 of its uncompressed lines.
2. **Verify.** Every file is read back from the store, decompressed, counted and
   hashed; the counts must add up to the partition's count(*). Any difference
   stops the day before anything is dropped.
3. **Record.** An ArchivedDay row says where the manifest is: an execution id
   carries its day (dispatch/history/ids.py), so a lookup of a gone execution
   finds its file (`find_execution`).
4. **Detach and drop.** Each partition is detached CONCURRENTLY (no lock that
   blocks the firing path's reads and writes; PostgreSQL allows it because the
   tables have no DEFAULT partition) and dropped; the lower catch-all `_before`
   is then re-attached reaching up to the first day still kept, so an occurrence
   of an expired day written later (a backfill, a long catch-up) still has a home
   (and the row-level purge, dispatch/scheduler/retention.py, removes it).

Days go oldest first and a day with executions still running waits (and the
later ones with it: the catch-all can only grow up to the first day kept).
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import OperationalError, transaction
from django.utils import timezone

from dispatch.history import ids
from dispatch.history.objects import ObjectMissing, ObjectStore, ObjectStoreError
from dispatch.history.partitions import (
    EVENTS,
    EXECUTIONS,
    TABLES,
    HistoryTable,
    day_of,
    day_start,
    days,
)
from dispatch.models import ArchivedDay
from dispatch.scheduler.retention import cutoff_for
from dispatch.sql import sql
from dispatch.states import FINAL_STATES, state_values

log = logging.getLogger("dispatch.history")

# The statement that reads each table's day, tenant by tenant.
_DAY_ROWS = {EXECUTIONS.name: "history_day_executions", EVENTS.name: "history_day_events"}
_TOPIC = {EXECUTIONS.name: "executions", EVENTS.name: "events"}


# Each detach, drop and attach waits at most DDL_LOCK_TIMEOUT_MS for its locks, and is
# tried DDL_TRIES times DDL_PAUSE_S apart. Dropping a detached day takes an ACCESS
# EXCLUSIVE lock on the tables its foreign keys reference (schedules, tenants,
# backfills: PostgreSQL removes the key's triggers there), and while such a request
# waits, every later reader of those tables queues behind it: a short timeout bounds
# what the firing path can feel to that much, now and then.
DDL_LOCK_TIMEOUT_MS = 100
DDL_TRIES = 60
DDL_PAUSE_S = 0.5
LOCK_NOT_AVAILABLE = "55P03"
# The pass works at most HISTORY_ARCHIVE_DUTY of the time: after each PACE_ROWS rows
# read (and lines verified) it rests in proportion to how long they took. Reading a day
# is a full scan the database's CPUs serve beside the firing path's statements; this
# keeps the scan to a share of a CPU (as vacuum's cost delay does for its own work).
PACE_ROWS = 5000
# Rows per FETCH from the day's cursor. PostgreSQL gathers a FETCH's whole answer in
# memory before sending it and writes it to a temporary file past work_mem (4 MB by
# default): 5,000 rows of executions (~850 bytes of JSON each) went to disk on every
# FETCH, half a gigabyte for a day of 600,000, on the disk the firing path's commits
# flush to. 500 rows stay in memory unless rows are unusually large.
FETCH_ROWS = 500
# gzip's fastest level: JSON lines of one day shrink nearly as well as at the default
# (6), for a fraction of the CPU the beats' machine shares with the pass.
ARCHIVE_GZIP_LEVEL = 1


class ArchiveMismatch(Exception):
    """What the store gave back is not what the database holds: nothing is dropped."""


class LockNotGranted(Exception):
    """A detach, drop or attach did not get its locks in DDL_TRIES short tries: the
    day stays (archived and recorded) for the next pass to finish."""


@dataclass
class ArchivedFile:
    key: str
    table: str
    tenant_id: int
    rows: int
    sha256: str
    bytes: int


@dataclass
class DayResult:
    day: date
    archived: bool = False
    dropped: bool = False
    executions: int = 0
    events: int = 0
    waiting: str = ""  # why the day is still in the database
    files: list[ArchivedFile] = field(default_factory=list)


def file_key(table: HistoryTable, day: date, tenant_id: int) -> str:
    return f"{_TOPIC[table.name]}/day={day.isoformat()}/tenant={tenant_id}.jsonl.gz"


def manifest_key(day: date) -> str:
    return f"manifests/day={day.isoformat()}.json"


def expired_days(now: datetime) -> list[date]:
    """The day partitions wholly older than the retention cutoff, oldest first."""
    cutoff = cutoff_for(now=now, retention_days=settings.RETENTION_DAYS)
    kept = {p.day for p in days(EVENTS)}
    return [
        p.day
        for p in days(EXECUTIONS)
        if day_start(p.day + timedelta(days=1)) <= cutoff and p.day in kept
    ]


def archive_expired(*, now: datetime, store: ObjectStore, max_days: int = 3) -> list[DayResult]:
    """Archive, verify, detach and drop the expired days (at most `max_days` per pass,
    so one pass stays short); what happened to each."""
    results: list[DayResult] = []
    for day in expired_days(now)[:max_days]:
        result = retire_day(day, store)
        results.append(result)
        if not result.dropped:
            log.info("history: %s stays in the database: %s", day, result.waiting)
            break
        log.info(
            "history: %s archived (%d executions, %d events) and dropped",
            day,
            result.executions,
            result.events,
        )
    return results


def retire_day(day: date, store: ObjectStore) -> DayResult:
    """Steps 1-4 for one day; repeatable (an archived day is not written again)."""
    result = DayResult(day)
    record = ArchivedDay.objects.filter(day=day).first()
    if record is not None and not _archive_holds(record):
        # Rows came into the day after it was archived (a day carved out again and
        # written to): archived again, whole, before anything is dropped.
        record = None
    if record is None:
        unfinished = sql.scalar(
            "history_day_unfinished",
            {"final": state_values(FINAL_STATES)},
            identifiers={"name": EXECUTIONS.day_partition(day)},
        )
        if unfinished:
            result.waiting = f"{unfinished} of its executions are not final yet"
            return result
        try:
            record = archive_day(day, store, result)
        except (ObjectStoreError, ArchiveMismatch) as exc:
            result.waiting = f"archive failed: {exc}"
            log.warning("history: archiving %s failed, nothing dropped: %s", day, exc)
            return result
    result.archived = True
    result.executions, result.events = record.executions, record.events
    try:
        for table in TABLES:
            _with_short_lock_waits(functools.partial(_detach_and_drop, table, day))
    except LockNotGranted as exc:
        result.waiting = str(exc)
        log.warning("history: %s archived but not dropped yet: %s", day, exc)
        return result
    ArchivedDay.objects.filter(day=day, dropped_at__isnull=True).update(dropped_at=timezone.now())
    result.dropped = True
    return result


def _archive_holds(record: ArchivedDay) -> bool:
    """Whether the day's partitions, where still held, have the rows its archive counted."""
    held = {p.name for t in TABLES for p in days(t)}
    for table, archived in ((EXECUTIONS, record.executions), (EVENTS, record.events)):
        name = table.day_partition(record.day)
        if name in held and sql.scalar("history_day_count", identifiers={"name": name}) != archived:
            return False
    return True


def archive_day(day: date, store: ObjectStore, result: DayResult) -> ArchivedDay:
    """Steps 1-3: every row of the day in the store, read back and checked, and the
    record that says where."""
    totals: dict[str, int] = {}
    for table in TABLES:
        partition = table.day_partition(day)
        with transaction.atomic():  # one snapshot: the count and the lines agree
            expected = int(sql.scalar("history_day_count", identifiers={"name": partition}))
            written = list(_write_tenants(table, day, partition, store))
        for archived in written:
            _verify(store, archived)
        got = sum(f.rows for f in written)
        if got != expected:
            raise ArchiveMismatch(f"{partition}: {got} rows archived, {expected} in the table")
        totals[table.name] = got
        result.files += written
    manifest = {
        "day": day.isoformat(),
        "format": "jsonl.gz: one row_to_json line per row; sha256 of the uncompressed lines",
        "files": [asdict(f) for f in result.files],
    }
    store.put(manifest_key(day), json.dumps(manifest, indent=1).encode())
    record, _ = ArchivedDay.objects.update_or_create(
        day=day,
        defaults={
            "manifest": store.url(manifest_key(day)),
            "executions": totals[EXECUTIONS.name],
            "events": totals[EVENTS.name],
        },
    )
    return record


def _write_tenants(
    table: HistoryTable, day: date, partition: str, store: ObjectStore
) -> Iterator[ArchivedFile]:
    """One file per tenant, streamed from a server-side cursor and compressed as it
    comes (a day of one tenant can be millions of rows)."""
    current: _TenantFile | None = None
    pace = _Pace()
    rows = sql.stream(_DAY_ROWS[table.name], identifiers={"name": partition}, itersize=FETCH_ROWS)
    for row in rows:
        pace.tick()
        if current is None or row.tenant_id != current.tenant_id:
            if current is not None:
                yield current.put(store)
            current = _TenantFile(table, day, row.tenant_id)
        current.add(row.line)
    if current is not None:
        yield current.put(store)


class _TenantFile:
    def __init__(self, table: HistoryTable, day: date, tenant_id: int) -> None:
        self.table, self.tenant_id = table, tenant_id
        self.key = file_key(table, day, tenant_id)
        self.rows = 0
        self.digest = hashlib.sha256()
        self.buffer = io.BytesIO()
        self.gz = gzip.GzipFile(
            fileobj=self.buffer, mode="wb", compresslevel=ARCHIVE_GZIP_LEVEL, mtime=0
        )

    def add(self, line: str) -> None:
        data = (line + "\n").encode()
        self.digest.update(data)
        self.gz.write(data)
        self.rows += 1

    def put(self, store: ObjectStore) -> ArchivedFile:
        self.gz.close()
        packed = self.buffer.getvalue()
        store.put(self.key, packed)
        return ArchivedFile(
            key=self.key,
            table=self.table.name,
            tenant_id=self.tenant_id,
            rows=self.rows,
            sha256=self.digest.hexdigest(),
            bytes=len(packed),
        )


def _verify(store: ObjectStore, archived: ArchivedFile) -> None:
    """Read the file back: as many lines, the same SHA-256, every line JSON."""
    content = gzip.decompress(store.get(archived.key))
    lines = content.splitlines()
    if len(lines) != archived.rows or hashlib.sha256(content).hexdigest() != archived.sha256:
        raise ArchiveMismatch(
            f"{store.url(archived.key)}: read back {len(lines)} rows that do not match"
            f" the {archived.rows} written"
        )
    pace = _Pace()
    for line in lines:
        pace.tick()
        json.loads(line)


class _Pace:
    """Rests after every PACE_ROWS steps as long as they took, times (1 - duty) / duty."""

    def __init__(self) -> None:
        self.steps = 0
        self.since = time.monotonic()

    def tick(self) -> None:
        self.steps += 1
        if self.steps % PACE_ROWS:
            return
        busy = time.monotonic() - self.since
        duty = settings.HISTORY_ARCHIVE_DUTY
        time.sleep(busy * (1 - duty) / duty)
        self.since = time.monotonic()


def _with_short_lock_waits(step: Callable[[], None]) -> None:
    """`step` (repeatable: it checks where an interrupted try left off) under a short
    lock timeout, tried again while the timeout is what stops it."""
    for _ in range(DDL_TRIES):
        sql.execute("history_ddl_lock_timeout", literals={"ms": DDL_LOCK_TIMEOUT_MS})
        try:
            step()
            return
        except OperationalError as exc:
            if getattr(exc.__cause__, "sqlstate", None) != LOCK_NOT_AVAILABLE:
                raise
        finally:
            sql.execute("history_ddl_lock_timeout_reset")
        time.sleep(DDL_PAUSE_S)
    raise LockNotGranted(
        f"its locks were not granted within {DDL_LOCK_TIMEOUT_MS} ms in {DDL_TRIES} tries"
    )


def _detach_and_drop(table: HistoryTable, day: date) -> None:
    """The day's partition out (concurrently) and gone, then the lower catch-all
    re-attached up to the first day kept. Each step checks where a crashed pass
    left off."""
    name = table.day_partition(day)
    parent = {"parent": table.name}
    held = {p.name: p for p in days(table)}
    if name in held:
        if held[name].detach_pending:
            sql.execute("history_detach_finalize", identifiers=parent | {"name": name})
        else:
            sql.execute("history_detach_concurrently", identifiers=parent | {"name": name})
    if sql.scalar("history_table_exists", {"name": name}):
        sql.execute("history_drop", identifiers={"name": name})
    _regrow_before(table)


def _regrow_before(table: HistoryTable) -> None:
    remaining = days(table)
    if not remaining:
        return
    parent = {"parent": table.name, "name": table.before}
    attached = {r.name: r for r in sql.rows("history_partitions", {"parent": table.name})}
    before = attached.get(table.before)
    if before is not None:
        if before.detach_pending:
            sql.execute("history_detach_finalize", identifiers=parent)
        else:
            sql.execute("history_detach_concurrently", identifiers=parent)
    # DETACH ... CONCURRENTLY left the old bound behind as a CHECK constraint.
    for check in sql.rows("history_detached_checks", {"name": table.before, "parent": table.name}):
        sql.execute(
            "history_drop_check", identifiers={"name": table.before, "constraint": check.conname}
        )
    sql.execute(
        "history_attach_before",
        identifiers=parent,
        literals={"hi": day_start(remaining[0].day)},
    )


# --- reading an archived execution ------------------------------------------------


@dataclass
class ArchivedExecution:
    execution: dict[str, Any]
    events: list[dict[str, Any]]
    day: date
    location: str  # the execution's file in the store
    manifest: str
    archived_at: datetime


def archived_day_of(execution_id: Any) -> ArchivedDay | None:
    """The ArchivedDay holding this id's occurrence, if its id carries one and that
    day was archived."""
    window = ids.occurrence_window(execution_id)
    return None if window is None else archived_day_of_instant(window[0])


def archived_day_of_instant(instant: datetime) -> ArchivedDay | None:
    """The ArchivedDay holding executions scheduled for `instant`, if archived."""
    return ArchivedDay.objects.filter(day=day_of(instant)).first()


def find_execution(
    store: ObjectStore, *, tenant_id: int, execution_id: Any
) -> ArchivedExecution | None:
    """The archived execution of this tenant with this id, with the events of it the
    archive holds; None when it is not in the tenant's archived files (another
    tenant's id reads only this tenant's file, so it is never found)."""
    record = archived_day_of(execution_id)
    if record is None:
        return None
    wanted = str(execution_id)
    key = file_key(EXECUTIONS, record.day, tenant_id)
    row = next((r for r in _rows(store, key) if r.get("id") == wanted), None)
    if row is None:
        return None
    return ArchivedExecution(
        execution=row,
        events=_events_of(store, tenant_id, wanted, row),
        day=record.day,
        location=store.url(key),
        manifest=record.manifest,
        archived_at=record.archived_at,
    )


def _rows(store: ObjectStore, key: str) -> Iterator[dict[str, Any]]:
    try:
        packed = store.get(key)
    except ObjectMissing:
        return
    with gzip.open(io.BytesIO(packed), "rt") as fh:
        for line in fh:
            yield json.loads(line)


def _events_of(
    store: ObjectStore, tenant_id: int, execution_id: str, row: dict[str, Any]
) -> list[dict[str, Any]]:
    """Its events from the archived days between its creation and its end (events
    are partitioned by their own time, which can fall on other days)."""
    scheduled = _date(row["scheduled_for"])
    first = _date(row["created_at"]) if row.get("created_at") else scheduled
    last = _date(row["finished_at"]) if row.get("finished_at") else scheduled
    archived = ArchivedDay.objects.filter(day__gte=min(first, last), day__lte=max(first, last))
    found = [
        event
        for record in archived
        for event in _rows(store, file_key(EVENTS, record.day, tenant_id))
        if event.get("execution_id") == execution_id
    ]
    return sorted(found, key=lambda e: (e["at"], e["id"]))


def _date(value: str) -> date:
    return day_of(datetime.fromisoformat(value))
