"""`bench retention --n 1000000`: one expired day of N executions (and two events
each) leaving the database, as archive + detach + drop (dispatch/history/archive.py)
and, on the same rows, as the row-by-row DELETE retention used to be
(dispatch/scheduler/retention.py), while a firing-path probe measures what the
beats feel.

Both run as a beat runs them: the history's maintenance pass in a child process
(dispatch/history/maintenance.py, `spawn`), the first archiving the day to a
temporary folder, the second deleting the same rows again (refilled into the lower
catch-all) in batches.

The probe is a thread with its own connection that runs, every 20 ms, one firing
step of a beat: the beat's own statement inserting 20 executions due now
(`insert_executions`) and the admission's state change to queued, in one
transaction. Its cycle times while each retention runs are compared with its
cycle times with no retention running, in the same run (p50, p99, max; the
target is a p99 within 1.2x). Each filled day is checkpointed before it is
measured, as a month-old day is on disk. The day is made of its own day partitions,
carved out of the lower catch-all for the bench; the archive is a temporary folder
given to the child (the bench must not write a deployment's bucket), in memory
(/dev/shm) where there is one: like an object store, off the database's disk.
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.test import override_settings

from bench.common import (
    bench_tenant,
    cleanup_tenant,
    db_now,
    execute,
    fetchall,
    insert_schedules,
    percentile,
    table,
    vacuum_analyze,
)
from dispatch.history import archive, maintenance, partitions
from dispatch.history.ids import execution_id
from dispatch.history.objects import FileStore
from dispatch.models import ArchivedDay
from dispatch.sql import sql

KEY = "retention"
SCHEDULES = 1000
CHUNK = 100_000
PROBE_ROWS = 20
PROBE_EVERY_S = 0.02


def run(n: int, baseline_s: float) -> dict[str, Any]:
    tenant = bench_tenant(SCHEDULES)
    day = partitions.day_of(db_now()) - timedelta(days=settings.RETENTION_DAYS + 2)
    # Off the database's disk, as an object store is: a folder on the same disk would
    # measure the archive's fsyncs against the probe's WAL flushes (docs/how-to/retention.md).
    shm = Path("/dev/shm")  # noqa: S108 - mkdtemp makes a private folder inside
    folder = tempfile.TemporaryDirectory(prefix="bench-archive-", dir=shm if shm.is_dir() else None)
    store = FileStore(Path(folder.name))
    try:
        schedules = _schedules(tenant.pk)
        partitions.reopen_days(day)
        built = _fill(tenant.pk, schedules, day, n)
        result: dict[str, Any] = {"n": n, "events": 2 * n, "build_s": built}
        result["baseline"] = _probe_while(tenant.pk, schedules, lambda: time.sleep(baseline_s))
        # Both ways run as the beat runs them: the maintenance pass in a child process
        # (dispatch/history/maintenance.py, spawn), archiving to the bench's folder.
        result["archive"] = _probe_while(tenant.pk, schedules, lambda: _pass(folder.name))
        result["archive"] |= _archived(day, store)
        # The same rows again (they land in the lower catch-all, which now covers the
        # dropped day), removed the old way: the pass's DELETE in batches of 1,000.
        result["rebuild_s"] = _fill(tenant.pk, schedules, day, n)
        before = _rows_of(tenant.pk, day)
        result["delete"] = _probe_while(tenant.pk, schedules, lambda: _pass(folder.name))
        after = _rows_of(tenant.pk, day)
        result["delete"] |= {"executions": before[0] - after[0], "events": before[1] - after[1]}
        for phase in ("archive", "delete"):
            result[phase]["p99_ratio"] = result[phase]["p99_ms"] / result["baseline"]["p99_ms"]
        return result
    finally:
        cleanup_tenant(tenant.pk)
        ArchivedDay.objects.filter(day=day).delete()
        # The empty days carved out for the bench and already expired go as retention
        # would take them (the later ones stay, as days of a fresh installation would).
        archive.archive_expired(now=db_now(), store=store, max_days=10_000)
        folder.cleanup()


def _archived(day: Any, store: FileStore) -> dict[str, Any]:
    """What the pass recorded of the day, and the files its manifest lists."""
    record = ArchivedDay.objects.get(day=day)
    manifest = json.loads(store.get(archive.manifest_key(day)))
    return {
        "dropped": record.dropped_at is not None,
        "waiting": "" if record.dropped_at is not None else "archived, not dropped",
        "executions": record.executions,
        "events": record.events,
        "files": len(manifest["files"]),
        "bytes": sum(f["bytes"] for f in manifest["files"]),
    }


def _rows_of(tenant_id: int, day: Any) -> tuple[int, int]:
    """(executions, events) of the bench's tenant in the expired day (the probe's own
    rows are today's)."""
    [(executions, events)] = fetchall(
        "SELECT (SELECT count(*) FROM dispatch_execution WHERE tenant_id = %(t)s"
        "   AND scheduled_for >= %(lo)s AND scheduled_for < %(hi)s),"
        " (SELECT count(*) FROM dispatch_executionevent WHERE tenant_id = %(t)s"
        "   AND at >= %(lo)s AND at < %(hi)s)",
        {
            "t": tenant_id,
            "lo": partitions.day_start(day),
            "hi": partitions.day_start(day + timedelta(days=1)),
        },
    )
    return int(executions), int(events)


def _pass(archive_url: str) -> float:
    """One maintenance pass in a child process, as a beat starts it; seconds taken."""
    started = time.perf_counter()
    with override_settings(HISTORY_ARCHIVE_URL=archive_url, RETENTION_ARCHIVE_DIR=""):
        child = maintenance.spawn()
    code = child.wait()
    if code != 0:
        raise RuntimeError(f"the maintenance pass exited with {code}")
    return time.perf_counter() - started


def _schedules(tenant_id: int) -> list[tuple[uuid.UUID, int]]:
    """The tenant's schedules (never due: no beat runs in this bench) with their
    logical partitions."""
    insert_schedules(
        tenant_id,
        SCHEDULES,
        name_prefix="retention",
        next_run_at="now() + interval '300 days'",
        kind="cron",
        cron_expr="0 0 1 1 *",
    )
    return [
        (row[0], row[1])
        for row in fetchall(
            "SELECT id, partition FROM dispatch_schedule WHERE tenant_id = %(t)s ORDER BY id",
            {"t": tenant_id},
        )
    ]


def _fill(tenant_id: int, schedules: list[tuple[uuid.UUID, int]], day: Any, n: int) -> float:
    """N final executions spread over the day (a different occurrence per row), each
    with a `claimed` and an `attempt_succeeded` event; seconds taken."""
    started = time.perf_counter()
    ids = [s[0] for s in schedules]
    step_us = max(1, int(86_400_000_000 / max(n, 1)))
    for start in range(0, n, CHUNK):
        stop = min(n, start + CHUNK)
        with transaction.atomic():
            execute(
                "WITH s AS (SELECT %(ids)s::uuid[] AS ids)"
                " INSERT INTO dispatch_execution (id, schedule_id, tenant_id, partition,"
                " scheduled_for, due_at, trigger, attempt, state, fencing_token, created_at,"
                " enqueued_at, started_at, finished_at, status_code)"
                " SELECT dispatch_execution_id(at.v), s.ids[1 + mod(g.i, cardinality(s.ids))],"
                " %(t)s, mod(g.i, 1024), at.v, at.v, 'cron', 1, 'succeeded', 1, at.v, at.v,"
                " at.v, at.v + interval '20 milliseconds', 200"
                " FROM s, generate_series(%(start)s::bigint, %(stop)s::bigint - 1) AS g(i)"
                " CROSS JOIN LATERAL (SELECT %(day)s::timestamptz"
                "   + g.i * %(step)s::bigint * interval '1 microsecond' AS v) AS at",
                {
                    "ids": ids,
                    "t": tenant_id,
                    "start": start,
                    "stop": stop,
                    "day": partitions.day_start(day),
                    "step": step_us,
                },
            )
            execute(
                "INSERT INTO dispatch_executionevent (tenant_id, schedule_id, execution_id, at,"
                " kind, message, data, actor)"
                " SELECT e.tenant_id, e.schedule_id, e.id, e.scheduled_for + k.o, k.kind,"
                " k.kind || ' (attempt 1)', '{}'::jsonb, 'worker'"
                " FROM dispatch_execution e"
                " CROSS JOIN (VALUES ('claimed', interval '1 millisecond'),"
                "   ('attempt_succeeded', interval '20 milliseconds')) AS k(kind, o)"
                " WHERE e.tenant_id = %(t)s AND e.scheduled_for >= %(lo)s AND e.scheduled_for < %(hi)s",
                {
                    "t": tenant_id,
                    "lo": partitions.day_start(day) + start * step_us * timedelta(microseconds=1),
                    "hi": partitions.day_start(day) + stop * step_us * timedelta(microseconds=1),
                },
            )
    vacuum_analyze("dispatch_execution", "dispatch_executionevent")
    # An expired day is a month old: its pages are long written out. Without this,
    # the day just built is still dirty in memory, and whatever runs next (the
    # retention, or the probe with none) pays for writing it out.
    execute("CHECKPOINT")
    return time.perf_counter() - started


def _probe_while(
    tenant_id: int, schedules: list[tuple[uuid.UUID, int]], work: Any
) -> dict[str, Any]:
    """Probe cycle times (ms) while `work()` runs in this thread."""
    stop = threading.Event()
    cycles: list[float] = []
    failure: list[BaseException] = []

    def probe() -> None:
        try:
            k = 0
            while not stop.is_set():
                started = time.perf_counter()
                _probe_cycle(tenant_id, schedules, k)
                cycles.append((time.perf_counter() - started) * 1000)
                k += 1
                time.sleep(PROBE_EVERY_S)
        except BaseException as exc:  # reported by the caller
            failure.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=probe, name="firing-probe")
    thread.start()
    started = time.perf_counter()
    try:
        work()
        seconds = time.perf_counter() - started
    finally:
        stop.set()
        thread.join()
    if failure:
        raise failure[0]
    return {
        "seconds": seconds,
        "cycles": len(cycles),
        "p50_ms": percentile(cycles, 0.5),
        "p99_ms": percentile(cycles, 0.99),
        "max_ms": max(cycles) if cycles else float("nan"),
    }


def _probe_cycle(tenant_id: int, schedules: list[tuple[uuid.UUID, int]], k: int) -> None:
    now = db_now()
    picked = [schedules[(k * PROBE_ROWS + i) % len(schedules)] for i in range(PROBE_ROWS)]
    occurrences = [now + timedelta(microseconds=i) for i in range(PROBE_ROWS)]
    with transaction.atomic():
        inserted = sql.rows(
            "insert_executions",
            {
                "ids": [execution_id(at) for at in occurrences],
                "schedule_ids": [s[0] for s in picked],
                "tenant_ids": [tenant_id] * PROBE_ROWS,
                "partitions": [s[1] for s in picked],
                "scheduled_fors": occurrences,
                "due_ats": occurrences,
                "triggers": ["cron"] * PROBE_ROWS,
                "states": ["scheduled"] * PROBE_ROWS,
                "reason_codes": [""] * PROBE_ROWS,
                "reasons": [""] * PROBE_ROWS,
                "epochs": [1] * PROBE_ROWS,
                "fired_by": "bench-probe",
            },
        )
        execute(
            "UPDATE dispatch_execution SET state = 'queued', enqueued_at = clock_timestamp()"
            " WHERE id = ANY(%(ids)s::uuid[]) AND scheduled_for >= %(lo)s AND scheduled_for <= %(hi)s",
            {"ids": [r.id for r in inserted], "lo": occurrences[0], "hi": occurrences[-1]},
        )


def report(result: dict[str, Any], data: dict[str, Any]) -> str:
    rows = [
        {"phase": "no retention", **result["baseline"]},
        {"phase": "archive + detach + drop", **result["archive"]},
        {"phase": "DELETE in batches", **result["delete"]},
    ]
    return table(rows, ["phase", "seconds", "cycles", "p50_ms", "p99_ms", "max_ms", "p99_ratio"])


def summary(data: dict[str, Any]) -> list[dict[str, Any]]:
    r = data.get(KEY)
    if not r:
        return []
    name = f"retention of one day, {r['n']} executions + {r['events']} events"
    return [
        {"name": name, "figure": "archive + detach + drop s", "value": r["archive"]["seconds"]},
        {"name": name, "figure": "DELETE in batches s", "value": r["delete"]["seconds"]},
        {
            "name": name,
            "figure": "firing probe p99 during archive / without",
            "value": r["archive"]["p99_ratio"],
        },
        {
            "name": name,
            "figure": "firing probe p99 during DELETE / without",
            "value": r["delete"]["p99_ratio"],
        },
    ]
