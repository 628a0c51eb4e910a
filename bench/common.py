"""What every benchmark shares: figures, throwaway tenants, rows made in SQL,
bounded waits, tables and the results file. The child processes (beats, workers)
and the waits on them are `procs.py`."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import platform
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from django.conf import settings
from django.db import connection, transaction

from core.db import db_clock
from dispatch.history import partitions
from dispatch.partitioning import LOGICAL_PARTITIONS
from dispatch.queues import queue_name, queues_of
from tenants.models import AuditEvent, Tenant, TenantQuota

# Nothing else is routed to this queue while a bench runs on an environment of its own.
BENCH_QUEUE = queue_name("low", "long")
SHORT_QUEUES = queues_of("short")
# A placeholder target for rows that are published but never run (no worker consumes them).
IDLE_TARGET = {"type": "http", "url": "https://bench.internal/", "timeout_s": 30}
# Seconds per row assumed for INSERT … SELECT when choosing how far ahead due times must lie.
INSERT_S_PER_ROW = 1 / 20_000

T = TypeVar("T")


class BenchError(RuntimeError):
    """A benchmark could not produce its figures (a wait ran out, a process died)."""


# --- figures ---------------------------------------------------------------------------


def percentile(values: list[float], p: float) -> float:
    """Linear interpolation between closest ranks (the same as PostgreSQL's percentile_cont)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * p
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def ratio(value: Any, ceiling: Any) -> float | None:
    if not isinstance(value, int | float) or not isinstance(ceiling, int | float):
        return None
    if not ceiling or math.isnan(value) or math.isnan(ceiling):
        return None
    return float(value) / float(ceiling)


def fmt(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return "—" if value is None else str(value).lower()
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.3f}"
    return str(value)


def table(rows: list[dict[str, Any]], keys: list[str]) -> str:
    lines = [" | ".join(keys), " | ".join("---" for _ in keys)]
    lines.extend(" | ".join(fmt(row.get(k)) for k in keys) for row in rows)
    return "\n".join(lines)


# --- the results file ------------------------------------------------------------------


def load_results(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def merge_result(path: Path, key: str, result: dict[str, Any]) -> dict[str, Any]:
    """Re-read the file and write it back with `key` replaced, so earlier figures survive."""
    data = load_results(path)
    data[key] = result
    path.write_text(json.dumps(data, indent=2, default=str, allow_nan=True))
    return data


MACHINE_KEY = "machine"


def machine() -> dict[str, Any]:
    """Where and when the figures were measured, stored with them (`MACHINE_KEY`):
    figures mean little without the machine, and the docs' benchmarks page states both."""
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        row = cursor.fetchone()
    postgresql = str(row[0]) if row else "unknown"
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {
        "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "memory_gib": round(memory / 2**30, 1),
        "python": platform.python_version(),
        "postgresql": postgresql,
        "broker": broker_kind(),
    }


def broker_kind(url: str | None = None) -> str:
    """'redis' or 'amqp': which raw publish ceiling applies to a broker URL."""
    url = url if url is not None else settings.CELERY_BROKER_URL
    return "amqp" if url.startswith(("amqp://", "amqps://", "pyamqp://")) else "redis"


def raw_publish(data: dict[str, Any], broker: str | None = None) -> float | None:
    """The broker's raw publish ceiling (`bench limits`: prebuilt messages, no beat code)."""
    value = (data.get("limits") or {}).get(f"raw_publish_{broker or broker_kind()}_per_s")
    return float(value) if isinstance(value, int | float) else None


def ceiling_bound(data: dict[str, Any], broker: str | None = None) -> tuple[float | None, str]:
    """min(raw publish for the broker, raw claim) and which of the two it is.

    Dispatch claims rows and publishes messages: neither can beat PostgreSQL's own
    claim + insert + advance on minimal tables nor the broker taking prebuilt messages.
    """
    broker = broker or broker_kind()
    claim = (data.get("limits") or {}).get("pg_raw_claim_rows_per_s")
    publish = raw_publish(data, broker)
    if not isinstance(claim, int | float) or publish is None:
        return None, "unknown (run bench limits first)"
    if publish <= claim:
        return publish, f"raw publish ({broker})"
    return float(claim), "raw claim (PostgreSQL)"


def dispatch_ceiling(data: dict[str, Any], broker: str | None = None) -> float | None:
    return ceiling_bound(data, broker)[0]


def publish_ceiling(data: dict[str, Any], broker: str | None = None) -> float | None:
    """Bursts are claimed ahead (the beat's lookahead): at due time only publishing is left."""
    return raw_publish(data, broker)


# --- database --------------------------------------------------------------------------


def db_now() -> datetime:
    """The database's clock now (the benches judge lateness against it)."""
    return db_clock()


def execute(sql: str, params: dict[str, Any] | list[Any] | None = None) -> int:
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return int(cur.rowcount)


def fetchall(sql: str, params: dict[str, Any] | list[Any] | None = None) -> list[tuple[Any, ...]]:
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return list(cur.fetchall())


def explain_analyze(sql: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """EXPLAIN (ANALYZE, BUFFERS) of `sql`: the JSON plan and every node of it, flattened."""
    raw = fetchall(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}")[0][0]
    plan: list[dict[str, Any]] = json.loads(raw) if isinstance(raw, str) else raw
    nodes: list[dict[str, Any]] = []

    def walk(node: dict[str, Any]) -> None:
        nodes.append(node)
        for child in node.get("Plans", []):
            walk(child)

    walk(plan[0]["Plan"])
    return plan, nodes


# A sequential scan that read fewer rows than this is no missing index: the history's
# day partitions not reached yet (or nearly empty) are scanned rather than probed,
# which is what their size calls for and costs nothing. The benches write an execution
# every one to three seconds (28,800-86,400 a day), so a missing index reads a whole
# day at the least; a day begun 25 minutes before (1,512 rows, under 2 ms) tripped
# the old bound of 1,000 in a run that crossed midnight.
SEQ_SCAN_ROWS = 10_000


def seq_scan_read(nodes: list[dict[str, Any]]) -> bool:
    """Whether an EXPLAIN ANALYZE plan's nodes hold a sequential scan that read more
    than SEQ_SCAN_ROWS rows (rows returned and filtered out, over every loop)."""
    return any(
        n["Node Type"] == "Seq Scan"
        and (int(n.get("Actual Rows", 0)) + int(n.get("Rows Removed by Filter", 0)))
        * int(n.get("Actual Loops", 1))
        > SEQ_SCAN_ROWS
        for n in nodes
    )


def bench_tenant(n: int, *, slug: str | None = None) -> Tenant:
    """A tenant of the bench's own, with quotas that never hold its rows back."""
    tenant = Tenant.objects.create(slug=slug or f"bench-{uuid.uuid4().hex[:8]}", name="bench")
    n = max(n, 1)
    TenantQuota.objects.create(
        tenant=tenant,
        max_concurrent=n * 2,
        max_schedules=n * 2,
        max_executions_per_day=n * 10,
    )
    return tenant


def cleanup_tenant(tenant_id: int) -> None:
    """Delete everything the bench made for this tenant, and the tenant.

    Audit rows are append-only by design (a trigger refuses DELETE) and keep the
    tenant row alive through their foreign key; such a tenant is deactivated
    instead, so it can never run anything again.
    """
    params = {"t": tenant_id}
    with transaction.atomic():
        # Statistics first: the commit checks each deleted row's deferred foreign keys with
        # cached plans, and a plan made on statistics from before the bench filled the
        # tables scans them whole for every row (a 300,000-row commit ran over 17 minutes).
        for name in BENCH_TABLES:
            execute(f"ANALYZE {connection.ops.quote_name(name)}")
        execute("DELETE FROM dispatch_executionevent WHERE tenant_id = %(t)s", params)
        execute("DELETE FROM dispatch_execution WHERE tenant_id = %(t)s", params)
        execute(
            "DELETE FROM dispatch_schedule_depends_on d USING dispatch_schedule s"
            " WHERE s.tenant_id = %(t)s AND (d.from_schedule_id = s.id OR d.to_schedule_id = s.id)",
            params,
        )
        execute("DELETE FROM dispatch_schedule WHERE tenant_id = %(t)s", params)
        execute("DELETE FROM dispatch_managedcommand_tenants WHERE tenant_id = %(t)s", params)
        tenant = Tenant.objects.filter(pk=tenant_id).first()
        if tenant is not None:
            if AuditEvent.objects.filter(tenant_id=tenant_id).exists():
                tenant.tokens.all().delete()
                tenant.memberships.all().delete()
                Tenant.objects.filter(pk=tenant_id).update(active=False)
            else:
                TenantQuota.objects.filter(tenant_id=tenant_id).delete()
                tenant.delete()
    _forget_redis_keys(f"sched:quota:{tenant_id}:*")
    if not connection.in_atomic_block:
        # The next bench must not pay for this one's deletes: with autovacuum off (as on
        # this machine's PostgreSQL) or behind, 2 M dead rows left by the cron bursts made
        # each later bench slower than the one before (1 -> 2 beats measured 0.79x, 1.64x
        # after this). No ANALYZE: statistics of the emptied tables would tell the
        # planner the next bench's rows are not there. VACUUM needs autocommit.
        for name in BENCH_TABLES:
            execute(f"VACUUM {connection.ops.quote_name(name)}")


def _forget_redis_keys(pattern: str) -> None:
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5)
    try:
        keys = list(client.scan_iter(match=pattern, count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


# The tables a bench fills and empties again (cleanup_tenant reclaims them).
BENCH_TABLES = ("dispatch_executionevent", "dispatch_execution", "dispatch_schedule")


def vacuum_analyze(*tables: str) -> None:
    """What autovacuum would have done by now after a bulk insert: planner statistics,
    the visibility map, and no dead index entries left by earlier runs' deletes."""
    for name in tables:
        execute(f"VACUUM (ANALYZE) {connection.ops.quote_name(name)}")


def history_days_back(seconds: float) -> list[str]:
    """Day partitions of history from `seconds` before now onwards, as a deployment
    that keeps that much history has them (RETENTION_DAYS): rows built in the
    past land in their days, not in the lower catch-all, so the list reads plan over
    the partitions a real table of that age holds. The partitions created."""
    oldest = db_now() - timedelta(seconds=seconds)
    return partitions.reopen_days(partitions.day_of(oldest))


def insert_schedules(
    tenant_id: int,
    n: int,
    *,
    name_prefix: str,
    next_run_at: str,
    run_at: str | None = None,
    kind: str = "once",
    cron_expr: str = "",
    jitter_s: int = 0,
    target: dict[str, Any] | None = None,
    priority: str = "low",
    duration_class: str = "long",
    misfire: str = "skip",
    grace_s: int = 60,
    overlap: str = "allow",
    params: dict[str, Any] | None = None,
) -> int:
    """N schedule rows in one INSERT … SELECT generate_series (the ORM is far too slow for 1M).

    `next_run_at` / `run_at` are SQL expressions over the row's series index
    `g.i` (0..n-1), its id `g.id` and `params`; they come from the benchmarks' code, never from input.
    The partition is a hash of the id modulo LOGICAL_PARTITIONS, like the
    product's (crc32 there; PostgreSQL has hashtext): only its spread matters.
    """
    values = {
        "tenant": tenant_id,
        "n": n,
        "prefix": name_prefix,
        "kind": kind,
        "cron": cron_expr,
        "target": json.dumps(target or IDLE_TARGET),
        "priority": priority,
        "duration": duration_class,
        "overlap": overlap,
        "misfire": misfire,
        "grace": grace_s,
        "jitter": jitter_s,
        "parts": LOGICAL_PARTITIONS,
    } | (params or {})
    sql = f"""
        INSERT INTO dispatch_schedule
            (id, tenant_id, name, kind, cron, timezone, run_at, target, retry, timeout_s,
             priority, duration_class, overlap, misfire, misfire_grace_s, catch_up_limit,
             jitter_s, paused, paused_reason, paused_by, version, idempotency_key,
             request_digest, next_run_at, partition, created_by)
        SELECT g.id, %(tenant)s, %(prefix)s || g.i, %(kind)s, %(cron)s, 'UTC', {run_at or "NULL"},
               %(target)s::jsonb, '{{}}'::jsonb, 30, %(priority)s, %(duration)s, %(overlap)s,
               %(misfire)s, %(grace)s, 10, %(jitter)s, false, '', '', 1, NULL, '',
               {next_run_at}, mod(abs(hashtext(g.id::text)::bigint), %(parts)s), 'bench'
        FROM (SELECT gen_random_uuid() AS id, i FROM generate_series(0, %(n)s - 1) AS i) AS g
    """  # noqa: S608 - the interpolated fragments are the benchmarks' own SQL, not input
    return execute(sql, values)


def fire_stats(tenant_id: int, expected: int) -> dict[str, Any]:
    """Fire lag (enqueued_at - due_at, i.e. due → published) of a tenant's executions, in SQL.

    lost: schedules never published; duplicated: execution rows beyond one per schedule.
    Peak per second counts publishes (and due times) per whole second of the database clock.
    """
    row = fetchall(
        """
        SELECT count(*), count(DISTINCT schedule_id),
               count(DISTINCT schedule_id) FILTER (WHERE enqueued_at IS NOT NULL),
               percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP
                   (ORDER BY extract(epoch FROM enqueued_at - due_at)),
               max(extract(epoch FROM enqueued_at - due_at)),
               avg(extract(epoch FROM enqueued_at - due_at)),
               min(due_at), max(due_at), min(enqueued_at), max(enqueued_at)
        FROM dispatch_execution WHERE tenant_id = %(t)s
        """,
        {"t": tenant_id},
    )[0]
    peaks = fetchall(
        """
        SELECT (SELECT max(c) FROM (SELECT count(*) AS c FROM dispatch_execution
                                    WHERE tenant_id = %(t)s AND enqueued_at IS NOT NULL
                                    GROUP BY date_trunc('second', enqueued_at)) AS p),
               (SELECT max(c) FROM (SELECT count(*) AS c FROM dispatch_execution
                                    WHERE tenant_id = %(t)s
                                    GROUP BY date_trunc('second', due_at)) AS d)
        """,
        {"t": tenant_id},
    )[0]
    executions, distinct, published = int(row[0]), int(row[1]), int(row[2])
    pcts = [float(x) for x in row[3]] if row[3] else [float("nan")] * 3
    first_due, last_due, first_pub, last_pub = row[6], row[7], row[8], row[9]
    span = (last_pub - first_due).total_seconds() if first_due and last_pub else 0.0
    return {
        "executions": executions,
        "published": published,
        "lag_p50_s": pcts[0],
        "lag_p95_s": pcts[1],
        "lag_p99_s": pcts[2],
        "lag_max_s": float(row[4]) if row[4] is not None else float("nan"),
        "lag_mean_s": float(row[5]) if row[5] is not None else float("nan"),
        "due_span_s": (last_due - first_due).total_seconds() if first_due else 0.0,
        "publish_span_s": (last_pub - first_pub).total_seconds() if first_pub else 0.0,
        "dispatch_per_s": published / span if span > 0 else float("nan"),
        "peak_published_per_s": int(peaks[0] or 0),
        "peak_due_per_s": int(peaks[1] or 0),
        "lost": expected - published,
        "duplicated": executions - distinct,
    }


def drain_queued(tenant_id: int) -> int:
    """Stand in for workers: the tenant's queued rows end, as consumed jobs would.

    Without consumers the tenant's in-flight count (which the beat reads for
    every publish batch) would grow without bound, which no real system sees.
    """
    return execute(
        "UPDATE dispatch_execution SET state = 'succeeded', finished_at = clock_timestamp()"
        " WHERE tenant_id = %(t)s AND state = 'queued'",
        {"t": tenant_id},
    )


def purge_queues(*names: str) -> None:
    from kombu import Queue

    from config.celery_app import app

    with app.connection_for_write() as conn:
        channel: Any = conn.default_channel  # kombu's virtual channel: queue_purge
        for name in names:
            Queue(name, durable=True, auto_delete=False)(channel).declare()
            channel.queue_purge(name)


# --- waiting ---------------------------------------------------------------------------


def wait_until(
    predicate: Callable[[], T | None], *, timeout: float, what: str, interval: float = 0.1
) -> T:
    """Poll until `predicate` returns something truthy; BenchError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise BenchError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


@contextlib.contextmanager
def quiet_logs(name: str = "dispatch") -> Iterator[None]:
    """In-process beats and runners log every step at INFO; the bench prints tables instead."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


@contextlib.contextmanager
def timed() -> Iterator[list[float]]:
    """`with timed() as t: ...` then t[0] is the elapsed seconds."""
    box: list[float] = []
    t0 = time.perf_counter()
    try:
        yield box
    finally:
        box.append(time.perf_counter() - t0)
