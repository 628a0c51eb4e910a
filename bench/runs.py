"""`bench runs --rows 10000000`: the runs page's query (GET /v1/executions with
filters) on a big executions table.

Builds `--rows` executions in SQL (INSERT … SELECT generate_series, in chunks)
over four tenants (70 % in the measured one, 10 % in each of the others), in day
partitions as a deployment keeping that much history holds them, and
`--schedules` schedules, one occurrence every few seconds going back in time,
with a realistic mix: ~95 % succeeded, a few percent skipped, dead, failed and
timed out (those with error text), a few cancelled, re-run and in flight;
~98 % fired by cron, the rest manual, api, catch-up and backfill. Then VACUUM
ANALYZE (what autovacuum would have done) and, per filter, `--requests` times
the page the API answers (the selector the view calls + serialization, in this
process) and once EXPLAIN (ANALYZE, BUFFERS) of its query: median and p95 ms,
the index used, whether it sorted or scanned sequentially; and the capped total.
Then the other pages that read the same history (the dashboard, a /metrics scrape,
the operators' dead executions): the first answer on a fresh connection and the
median of the next ones.

Ids are time-ordered (a counter prefix) only to make the build fast: random
UUIDs would make the primary-key index insert at random pages, and no runs
query reads that index. `--keep` leaves the rows for the next run, which reuses
them when they match (`--rows` / `--schedules`); without it the bench deletes
its tenants' rows as every bench does.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC
from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext

from bench.common import (
    BenchError,
    bench_tenant,
    cleanup_tenant,
    execute,
    explain_analyze,
    fetchall,
    history_days_back,
    insert_schedules,
    percentile,
    seq_scan_read,
    table,
    vacuum_analyze,
)
from dispatch import selectors
from dispatch.api.serializers import execution_out
from dispatch.ops.metrics import DatabaseCollector
from dispatch.queues import DEFAULT_QUEUE
from dispatch.services import db_now
from dispatch.states import ExecutionState, Trigger
from tenants.models import Tenant

KEY = "runs"
SLUG = "bench-runs"
OTHERS = ("bench-runs-b", "bench-runs-c", "bench-runs-d")
PAGE = 50
INSERT_CHUNK = 1_000_000
# One occurrence per this many seconds in each tenant: 7 M rows span ~240 days.
STEP_S = 3
# An error text that only one failure in ~100,000 rows carries (the rare search).
RARE_ERROR = "disk quota exceeded"

# The row mix, by hashes of the row number in 0..999 (deterministic, and
# independent of the row's schedule, which is the row number modulo --schedules).
STATE_SQL = f"""
    CASE WHEN g.i >= %(last)s - 20 THEN '{ExecutionState.SCHEDULED}'
         WHEN g.i >= %(last)s - 40 THEN '{ExecutionState.QUEUED}'
         WHEN g.i >= %(last)s - 60 THEN '{ExecutionState.RUNNING}'
         WHEN h.s < 20 THEN '{ExecutionState.DEAD}'
         WHEN h.s < 25 THEN '{ExecutionState.FAILED}'
         WHEN h.s < 30 THEN '{ExecutionState.TIMED_OUT}'
         WHEN h.s < 70 THEN '{ExecutionState.SKIPPED}'
         WHEN h.s < 72 THEN '{ExecutionState.CANCELLED}'
         ELSE '{ExecutionState.SUCCEEDED}' END"""
TRIGGER_SQL = f"""
    CASE WHEN h.t < 5 THEN '{Trigger.MANUAL}'
         WHEN h.t < 15 THEN '{Trigger.API}'
         WHEN h.t < 18 THEN '{Trigger.CATCH_UP}'
         WHEN h.t < 20 THEN '{Trigger.BACKFILL}'
         ELSE '{Trigger.CRON}' END"""
ERROR_SQL = f"""
    CASE WHEN g.i >= %(last)s - 60 OR h.s >= 30 THEN ''
         WHEN mod(g.i, 100000) = 7 THEN '{RARE_ERROR} on /var/lib/batch-' || mod(g.i, 13)
         WHEN mod(g.i, 5) = 0 THEN 'HTTP 503 Service Unavailable from https://svc-'
                                   || mod(g.i, 50) || '.internal/hook'
         WHEN mod(g.i, 5) = 1 THEN 'connection refused (ECONNREFUSED 10.0.' || mod(g.i, 250)
                                   || '.' || mod(g.i, 7) || ':8443)'
         WHEN mod(g.i, 5) = 2 THEN 'timed out after 30 s waiting for the response headers'
         WHEN mod(g.i, 5) = 3 THEN 'HTTP 500: NullPointerException at OrderSync.run line '
                                   || mod(g.i, 997)
         ELSE 'exit code 137 (killed: out of memory, limit 512 MiB)' END"""


def run(rows: int, schedules: int, requests: int, keep: bool) -> dict[str, Any]:
    if rows < 1000 or schedules < 1:
        raise BenchError("runs: --rows at least 1000 and --schedules at least 1")
    tenants = _tenants(rows, schedules)
    main = tenants[0]
    try:
        build_s = None
        if not _reusable(tenants, rows, schedules):
            build_s = _build(tenants, rows, schedules)
        cases = _cases(main)
        measured = [_measure(main, label, kwargs, requests) for label, kwargs in cases]
        count = _count(main, requests)
        reads = _reads(main, requests)
    finally:
        if not keep:
            for tenant in tenants:
                cleanup_tenant(tenant.pk)
    return {
        "rows": rows,
        "tenant_rows": _share(rows)[0],
        "schedules": schedules,
        "requests": requests,
        "page": PAGE,
        "build_and_vacuum_s": build_s,
        "error_scan_rows": selectors.ERROR_SCAN_ROWS,
        "count_cap": selectors.COUNT_CAP,
        "cases": measured,
        "count": count,
        "reads": reads,
        "missing_index": [c["case"] for c in measured if not c["uses_index"]],
    }


def _share(rows: int) -> list[int]:
    """Rows per tenant: 70 % in the measured one, the rest split over the others."""
    main = rows * 7 // 10
    rest = rows - main
    per = [rest // len(OTHERS)] * len(OTHERS)
    per[0] += rest - sum(per)
    return [main, *per]


def _tenants(rows: int, schedules: int) -> list[Tenant]:
    out = []
    for slug, n in zip((SLUG, *OTHERS), _share(rows), strict=True):
        tenant = Tenant.objects.filter(slug=slug).first()
        if tenant is None:
            tenant = bench_tenant(max(n, schedules), slug=slug)
        out.append(tenant)
    return out


def _reusable(tenants: list[Tenant], rows: int, schedules: int) -> bool:
    """A kept table of the same size (`--keep` last time): reuse it, else start afresh."""
    for tenant, n in zip(tenants, _share(rows), strict=True):
        have = fetchall(
            "SELECT (SELECT count(*) FROM dispatch_execution WHERE tenant_id = %(t)s),"
            " (SELECT count(*) FROM dispatch_schedule WHERE tenant_id = %(t)s)",
            {"t": tenant.pk},
        )[0]
        if (int(have[0]), int(have[1])) != (n, schedules):
            for t in tenants:
                _clear(t.pk)
            return False
    return True


def _clear(tenant_id: int) -> None:
    params = {"t": tenant_id}
    execute("DELETE FROM dispatch_execution WHERE tenant_id = %(t)s", params)
    execute("DELETE FROM dispatch_schedule WHERE tenant_id = %(t)s", params)


def _build(tenants: list[Tenant], rows: int, schedules: int) -> float:
    t0 = time.perf_counter()
    base = fetchall("SELECT date_trunc('second', clock_timestamp())")[0][0]
    history_days_back(max(_share(rows)) * STEP_S)
    for number, (tenant, n) in enumerate(zip(tenants, _share(rows), strict=True)):
        insert_schedules(
            tenant.pk,
            schedules,
            name_prefix="runs-",
            next_run_at="NULL",
            kind="cron",
            cron_expr="*/5 * * * *",
            priority="default",
            duration_class="short",
        )
        for start in range(0, n, INSERT_CHUNK):
            _insert(tenant.pk, number, base, n, start, min(n, start + INSERT_CHUNK))
    vacuum_analyze("dispatch_execution", "dispatch_schedule")
    return time.perf_counter() - t0


def _insert(tenant_id: int, number: int, base: Any, n: int, start: int, stop: int) -> None:
    """Rows start..stop-1 of a tenant's n, oldest first: row i is due at base - (n-1-i)*STEP_S."""
    sql = f"""
        WITH s AS (
            SELECT array_agg(id ORDER BY id) AS ids, array_agg(partition ORDER BY id) AS parts
            FROM dispatch_schedule WHERE tenant_id = %(t)s
        )
        INSERT INTO dispatch_execution
            (id, schedule_id, tenant_id, partition, scheduled_for, due_at, trigger, attempt,
             state, queue, lease_owner, fencing_token, error, log_excerpt, reason_code, reason,
             created_at, enqueued_at, started_at, finished_at, status_code, reruns, attempt_base)
        SELECT (lpad(to_hex(%(number)s), 4, '0') || lpad(to_hex(g.i), 12, '0')
                || substr(md5(g.i::text), 1, 16))::uuid,
               s.ids[1 + mod(g.i, cardinality(s.ids))], %(t)s,
               s.parts[1 + mod(g.i, cardinality(s.ids))],
               at.v, at.v, trig.v, 1 + h.r, st.v, %(queue)s,
               CASE WHEN st.v = 'running' THEN 'bench-worker' ELSE '' END, 1 + h.r,
               err.v, '', CASE WHEN st.v = 'skipped' THEN 'paused' ELSE '' END,
               CASE WHEN st.v = 'skipped' THEN 'the schedule was paused' ELSE '' END,
               at.v, at.v, at.v, at.v + interval '20 milliseconds',
               CASE WHEN st.v = 'succeeded' THEN 200 WHEN err.v LIKE 'HTTP 5%%' THEN 503 END,
               h.r, 0
        FROM s, generate_series(%(start)s::bigint, %(stop)s::bigint - 1) AS g(i)
        CROSS JOIN LATERAL (SELECT mod(abs(hashint8extended(g.i, 1)), 1000) AS s,
                                   mod(abs(hashint8extended(g.i, 2)), 1000) AS t,
                                   (mod(abs(hashint8extended(g.i, 3)), 1000) < 2)::int AS r) AS h
        CROSS JOIN LATERAL (SELECT %(base)s - (%(last)s - g.i) * %(step)s * interval '1 second'
                                   AS v) AS at
        CROSS JOIN LATERAL (SELECT {STATE_SQL} AS v) AS st
        CROSS JOIN LATERAL (SELECT {TRIGGER_SQL} AS v) AS trig
        CROSS JOIN LATERAL (SELECT {ERROR_SQL} AS v) AS err
    """  # noqa: S608 - the interpolated fragments are this module's own SQL, not input
    execute(
        sql,
        {
            "t": tenant_id,
            "number": number,
            "base": base,
            "last": n - 1,
            "step": STEP_S,
            "queue": DEFAULT_QUEUE,
            "start": start,
            "stop": stop,
        },
    )


def _cases(tenant: Tenant) -> list[tuple[str, dict[str, Any]]]:
    """(label, execution_filter kwargs, plus a cursor to follow) per measured query."""
    schedule = fetchall(
        "SELECT id FROM dispatch_schedule WHERE tenant_id = %(t)s ORDER BY id LIMIT 1",
        {"t": tenant.pk},
    )[0][0]
    oldest, newest = fetchall(
        "SELECT min(scheduled_for), max(scheduled_for) FROM dispatch_execution"
        " WHERE tenant_id = %(t)s",
        {"t": tenant.pk},
    )[0]
    # A day half-way back (a tenth of the span on a small table), and a month before it.
    span = newest - oldest
    day = min(_days(1), span / 10)
    mid = newest - span / 2
    return [
        ("no filter", {}),
        ("page 2 (cursor)", {"page2": True}),
        ("state=dead", {"state": "dead"}),
        ("state=dead page 2", {"state": "dead", "page2": True}),
        ("state=failed,timed_out,dead", {"state": "failed,timed_out,dead"}),
        ("state=running", {"state": "running"}),
        ("state=cancelled (0.2 %)", {"state": "cancelled"}),
        ("state=retry_scheduled (none)", {"state": "retry_scheduled"}),
        ("schedule_id", {"schedule_id": str(schedule)}),
        ("schedule_id + state=dead", {"schedule_id": str(schedule), "state": "dead"}),
        ("trigger=manual", {"trigger": "manual"}),
        ("trigger=backfill,catch_up", {"trigger": "backfill,catch_up"}),
        ("time range (a day, half-way back)", {"since": mid, "until": mid + day}),
        ("state=dead + time range", {"state": "dead", "since": mid - 30 * day, "until": mid}),
        ("rerun=true", {"rerun": True}),
        ("error=503 (common)", {"error": "503"}),
        (f"error={RARE_ERROR!r} (rare)", {"error": RARE_ERROR}),
        ("error + state=dead", {"error": "out of memory", "state": "dead"}),
    ]


def _days(n: int) -> Any:
    from datetime import timedelta

    return timedelta(days=n)


def _page(tenant: Tenant, kwargs: dict[str, Any]) -> Callable[[], Any]:
    args = dict(kwargs)
    page2 = args.pop("page2", False)
    flt = selectors.execution_filter(**args)
    cursor = None
    if page2:
        cursor = selectors.execution_list(tenant=tenant, limit=PAGE, flt=flt).next_cursor

    def answer() -> Any:
        # What ExecutionListView does for the request, without the HTTP around it.
        page = selectors.execution_list(tenant=tenant, cursor=cursor, limit=PAGE, flt=flt)
        body = {
            "results": [execution_out(e) for e in page.items],
            "next_cursor": page.next_cursor,
            "scan_limited": page.scan_limited,
        }
        json.dumps(body)
        return page

    return answer


def _measure(tenant: Tenant, label: str, kwargs: dict[str, Any], requests: int) -> dict[str, Any]:
    answer = _page(tenant, kwargs)
    page = answer()  # warm: the first run reads the pages into the cache
    latencies = []
    for _ in range(requests):
        t0 = time.perf_counter()
        answer()
        latencies.append((time.perf_counter() - t0) * 1000)
    with CaptureQueriesContext(connection) as queries:
        answer()
    plans = [_explain(q["sql"]) for q in queries.captured_queries]
    return {
        "case": label,
        "rows": len(page.items),
        "has_next": page.next_cursor is not None,
        "scan_limited": page.scan_limited,
        "p50_ms": percentile(latencies, 0.5),
        "p95_ms": percentile(latencies, 0.95),
        "queries": len(plans),
        "db_ms": sum(p["db_ms"] for p in plans),
        "indexes": sorted({i for p in plans for i in p["indexes"]}),
        "seq_scan": any(p["seq_scan"] for p in plans),
        "sort": any(p["sort"] for p in plans),
        "rows_read": sum(p["rows_read"] for p in plans),
        # Index-backed: no plan scanned more than SEQ_SCAN_ROWS sequentially. A window
        # over a small day (or an empty one) may be read whole: it costs less than an index.
        "uses_index": any(p["indexes"] for p in plans) and not any(p["seq_scan"] for p in plans),
    }


def _count(tenant: Tenant, requests: int) -> list[dict[str, Any]]:
    """The capped total (the console shows it on every page) for the filters that have one."""
    out = []
    cases: list[tuple[str, dict[str, Any]]] = [
        ("no filter", {}),
        ("state=dead", {"state": "dead"}),
        ("trigger=manual", {"trigger": "manual"}),
    ]
    for label, kwargs in cases:
        flt = selectors.execution_filter(**kwargs)
        latencies = []
        counted = None
        for _ in range(max(1, requests // 2)):
            t0 = time.perf_counter()
            counted = selectors.execution_count(tenant=tenant, flt=flt)
            latencies.append((time.perf_counter() - t0) * 1000)
        assert counted is not None  # noqa: S101 - no error text: always counted
        out.append(
            {
                "case": label,
                "total": counted[0],
                "capped": counted[1],
                "p50_ms": percentile(latencies, 0.5),
                "p95_ms": percentile(latencies, 0.95),
            }
        )
    return out


def _reads(tenant: Tenant, requests: int) -> list[dict[str, Any]]:
    """The other pages that read the same history (the dashboard's live panel, a /metrics
    scrape, the operators' dead executions), each from a fresh connection: its first
    answer, planned from nothing, and the median of the next ones, once psycopg has
    prepared the named statements and PostgreSQL kept their plans."""
    now = db_now()
    day_start = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)

    def dashboard() -> None:
        # What the dashboard's view reads (console/views/dashboard.py).
        selectors.tenant_usage(tenant=tenant, day_start=day_start)
        selectors.executions_running(tenant=tenant, limit=20)
        selectors.executions_troubled(tenant=tenant, since=now - _days(1), limit=20)

    cases: list[tuple[str, Callable[[], Any]]] = [
        ("dashboard (usage, running, failures)", dashboard),
        ("/metrics (every collector)", lambda: list(DatabaseCollector().collect())),
        ("ops: dead executions", selectors.ops_dead),
    ]
    out = []
    for label, read in cases:
        connection.close()
        t0 = time.perf_counter()
        read()
        first = (time.perf_counter() - t0) * 1000
        latencies = []
        for _ in range(max(12, requests // 2)):  # past psycopg's and PostgreSQL's thresholds
            t0 = time.perf_counter()
            read()
            latencies.append((time.perf_counter() - t0) * 1000)
        out.append(
            {
                "case": label,
                "first_ms": first,
                "p50_ms": percentile(latencies, 0.5),
                "p95_ms": percentile(latencies, 0.95),
            }
        )
    return out


def _explain(sql: str) -> dict[str, Any]:
    plan, nodes = explain_analyze(sql)
    scans = [n for n in nodes if "Scan" in n["Node Type"]]
    return {
        "indexes": sorted({n["Index Name"] for n in nodes if "Index Name" in n}),
        "seq_scan": seq_scan_read(nodes),
        "sort": any(n["Node Type"] in ("Sort", "Incremental Sort") for n in nodes),
        "rows_read": sum(
            int(n.get("Actual Rows", 0)) + int(n.get("Rows Removed by Filter", 0)) for n in scans
        ),
        "db_ms": float(plan[0].get("Execution Time", 0.0)),
    }


def report(result: dict[str, Any], data: dict[str, Any]) -> str:
    head = (
        f"GET /v1/executions?limit={PAGE} (selector + serialization), tenant of"
        f" {result['tenant_rows']} rows in a table of {result['rows']}"
        f" ({result['requests']} runs each):"
    )
    cases = table(
        result["cases"],
        [
            "case",
            "rows",
            "p50_ms",
            "p95_ms",
            "db_ms",
            "rows_read",
            "indexes",
            "sort",
            "seq_scan",
            "scan_limited",
        ],
    )
    count = table(result["count"], ["case", "total", "capped", "p50_ms", "p95_ms"])
    lines = [head, cases, "", f"capped total (up to {result['count_cap']}):", count]
    if "reads" in result:
        reads = table(result["reads"], ["case", "first_ms", "p50_ms", "p95_ms"])
        lines += ["", "other reads of the same history (from a fresh connection):", reads]
    if result["build_and_vacuum_s"] is not None:
        lines.append(f"table built and vacuumed in {result['build_and_vacuum_s']:.0f} s")
    if result["missing_index"]:
        lines.append(f"MISSING INDEX: a sequential scan for {', '.join(result['missing_index'])}")
    return "\n".join(lines)


def summary(data: dict[str, Any]) -> list[dict[str, Any]]:
    r = data.get(KEY)
    if not r or "cases" not in r:
        return []
    first = r["cases"][0]["p95_ms"]
    return [
        {
            "name": f"runs {r['rows']} rows",
            "figure": f"GET /v1/executions p95 ms, {c['case']} (vs no filter)",
            "value": c["p95_ms"],
            "ceiling": first,
            "ratio": c["p95_ms"] / first if first else None,
        }
        for c in r["cases"]
    ]
