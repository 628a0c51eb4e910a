"""`bench api --schedules 2000 --rows 10000000`: the REST API under a real web server.

gunicorn serves the project on a free 127.0.0.1 port; a service token is
issued with the tenants services. Measured with `--clients` concurrent clients:
* schedule creation through POST /v1/schedules (the raw ceiling is the same
  server answering GET /healthz, which does no work, to the same clients);
* one-off jobs created one per POST /v1/jobs (`--schedules` of them) against jobs
  created 1,000 per POST /v1/jobs:batch (`--schedules` / 200 batches, at least one),
  by the same clients in the same run: jobs per second each, and their ratio;
* GET /v1/executions latency with `--rows` execution rows in the tenant's
  history (inserted in SQL): the first page, the second (the cursor the first
  returned) and pages half-way and near the end (keyset cursors of those rows);
  and each page query's EXPLAIN, to check it is served by an index.

The tenant is one stable `bench-api`: creating schedules writes audit rows,
which are append-only by design, so its rows are deleted after each run but
the tenant stays, deactivated, and is reused by the next run.
"""

from __future__ import annotations

import http.client
import json
import sys
import threading
import time
import uuid
from collections import Counter
from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext

from bench.common import (
    BenchError,
    cleanup_tenant,
    execute,
    explain_analyze,
    fetchall,
    history_days_back,
    percentile,
    ratio,
    seq_scan_read,
    table,
    vacuum_analyze,
    wait_until,
)
from bench.procs import (
    Children,
    free_port,
)
from dispatch import selectors
from dispatch.queues import DEFAULT_QUEUE
from tenants import services as tenant_services
from tenants.models import Tenant, TenantQuota
from tenants.roles import Role

KEY = "api"
SLUG = "bench-api"
PAGE = 50
# A page that filters out more rows than this after its index scan pays for its depth.
DEPTH_FILTER_LIMIT = 10 * PAGE
INSERT_CHUNK = 1_000_000
# Schedules point at the discard port on loopback, allowed for the web server only.
TARGET_ALLOW = "127.0.0.1:9"
TARGET_URL = "http://127.0.0.1:9/bench"
BATCH = 1000
# Jobs due long after the run (no beat runs here): what is measured is their creation.
JOB_RUN_AT = "2031-01-01T00:00:00Z"


def run(schedules: int, rows: int, clients: int, requests: int, web_workers: int) -> dict[str, Any]:
    tenant = _tenant(schedules)
    try:
        _, token = tenant_services.token_issue(
            tenant=tenant, name=f"bench-{uuid.uuid4().hex[:6]}", role=Role.ADMIN
        )
        port = free_port()
        with Children("api") as children:
            web = children.start(
                "gunicorn",
                [
                    sys.executable,
                    "-m",
                    "gunicorn",
                    "config.wsgi:application",
                    "--bind",
                    f"127.0.0.1:{port}",
                    "--workers",
                    str(web_workers),
                ],
                # The per-token rate limit would otherwise be what is measured.
                API_RATE_LIMIT="100000000/min",
                TARGET_TEST_ALLOW=TARGET_ALLOW,
            )
            client = _Client(port, token)

            def up() -> bool:
                if not web.alive():
                    raise BenchError(f"gunicorn exited:\n{web.output()[-3000:]}")
                try:
                    return client.request("GET", "/healthz")[0] == 200
                except OSError:
                    return False

            wait_until(up, timeout=60, what="gunicorn to answer", interval=0.2)
            noop = _load(
                port, token, clients, [("GET", "/healthz", None)] * max(requests, schedules)
            )
            bodies = [
                (
                    "POST",
                    "/v1/schedules",
                    {
                        "name": f"api-{i}",
                        "cron": "0 0 1 1 *",
                        "timezone": "UTC",
                        "target": {"type": "http", "url": TARGET_URL},
                    },
                )
                for i in range(schedules)
            ]
            create = _load(port, token, clients, bodies)
            if create["statuses"].get("201", 0) != schedules:
                raise BenchError(
                    f"schedule creation answered {create['statuses']}: {create['sample_error']}"
                )
            jobs = _jobs(port, token, clients, schedules)
            insert_s = _history(tenant.pk, rows)
            pages = _pages(client, tenant, rows, requests)
    finally:
        cleanup_tenant(tenant.pk)
    return {
        "schedules": schedules,
        "rows": rows,
        "clients": clients,
        "web_workers": web_workers,
        "http_noop_per_s": noop["per_s"],
        "create_per_s": create["per_s"],
        "create_p50_ms": create["p50_ms"],
        "create_p99_ms": create["p99_ms"],
        # Creation gets slower as the tenant grows if it reads all of the tenant's schedules.
        "create_first_quarter_p50_ms": create["first_quarter_p50_ms"],
        "create_last_quarter_p50_ms": create["last_quarter_p50_ms"],
        "ratio_create_to_noop": ratio(create["per_s"], noop["per_s"]),
        **jobs,
        "history_insert_and_vacuum_s": insert_s,
        "pages": pages,
        "missing_index": [p["depth"] for p in pages if not p["uses_index"]],
        "cost_grows_with_depth": [
            p["depth"] for p in pages if p["rows_removed_by_filter"] > DEPTH_FILTER_LIMIT
        ],
    }


def _batches(schedules: int) -> int:
    return max(1, schedules // 200)


def _job(key: str) -> dict[str, Any]:
    return {
        "run_at": JOB_RUN_AT,
        "target": {"type": "http", "url": TARGET_URL, "body": {"remind": key}},
        "idempotency_key": key,
    }


def _jobs(port: int, token: str, clients: int, schedules: int) -> dict[str, Any]:
    """Jobs per second one per POST /v1/jobs and 1,000 per POST /v1/jobs:batch."""
    run = uuid.uuid4().hex[:6]
    single = _load(
        port, token, clients, [("POST", "/v1/jobs", _job(f"s-{run}-{i}")) for i in range(schedules)]
    )
    if single["statuses"].get("201", 0) != schedules:
        raise BenchError(f"POST /v1/jobs answered {single['statuses']}: {single['sample_error']}")
    batches = _batches(schedules)
    work = [
        ("POST", "/v1/jobs:batch", {"jobs": [_job(f"b-{run}-{b}-{i}") for i in range(BATCH)]})
        for b in range(batches)
    ]
    batch = _load(port, token, clients, work)
    if batch["statuses"].get("200", 0) != batches:
        raise BenchError(
            f"POST /v1/jobs:batch answered {batch['statuses']}: {batch['sample_error']}"
        )
    batch_jobs_per_s = batch["per_s"] * BATCH
    return {
        "job_single_per_s": single["per_s"],
        "job_single_p50_ms": single["p50_ms"],
        "job_batches": batches,
        "job_batch_size": BATCH,
        "job_batch_per_s": batch_jobs_per_s,
        "job_batch_request_p50_ms": batch["p50_ms"],
        "ratio_batch_to_single": ratio(batch_jobs_per_s, single["per_s"]),
    }


def _tenant(schedules: int) -> Tenant:
    existing = Tenant.objects.filter(slug=SLUG).first()
    if existing is not None:
        # Leftovers of an interrupted run are the bench's own rows.
        cleanup_tenant(existing.pk)
    tenant = Tenant.objects.filter(slug=SLUG).first()
    if tenant is None:
        tenant = Tenant.objects.create(slug=SLUG, name="bench api")
    Tenant.objects.filter(pk=tenant.pk).update(active=True)
    TenantQuota.objects.update_or_create(
        tenant=tenant,
        defaults={
            "max_concurrent": 10,
            # The schedules, the single jobs and the batches' jobs, and room.
            "max_schedules": schedules * 3 + _batches(schedules) * BATCH + 10,
            "max_executions_per_day": 10,
        },
    )
    tenant.refresh_from_db()
    return tenant


class _Client:
    def __init__(self, port: int, token: str) -> None:
        self.port = port
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        payload = json.dumps(body) if body is not None else None
        try:
            self.conn.request(method, path, body=payload, headers=self.headers)
            response = self.conn.getresponse()
        except (http.client.HTTPException, OSError):
            # gunicorn's sync workers close the connection after each response.
            self.conn.close()
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            self.conn.request(method, path, body=payload, headers=self.headers)
            response = self.conn.getresponse()
        data = response.read()
        if response.getheader("Connection", "").lower() == "close":
            self.conn.close()
        return response.status, data


def _load(port: int, token: str, clients: int, work: list[tuple[str, str, Any]]) -> dict[str, Any]:
    """Run the requests over `clients` threads, each with its own connection; rate and latency."""
    latencies: list[float] = []
    statuses: Counter[str] = Counter()
    errors: list[str] = []
    lock = threading.Lock()
    index = iter(range(len(work)))

    def worker() -> None:
        client = _Client(port, token)
        while True:
            with lock:
                i = next(index, None)
            if i is None:
                return
            method, path, body = work[i]
            t0 = time.perf_counter()
            status, data = client.request(method, path, body)
            elapsed = (time.perf_counter() - t0) * 1000
            with lock:
                latencies.append(elapsed)
                statuses[str(status)] += 1
                if status >= 400 and len(errors) < 3:
                    errors.append(data[:500].decode(errors="replace"))

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    wall = time.perf_counter() - t0
    if any(t.is_alive() for t in threads):
        raise BenchError("API load: a client thread did not finish within 600 s")
    quarter = max(1, len(latencies) // 4)
    return {
        "per_s": len(latencies) / wall,
        "first_quarter_p50_ms": percentile(latencies[:quarter], 0.5),
        "last_quarter_p50_ms": percentile(latencies[-quarter:], 0.5),
        "p50_ms": percentile(latencies, 0.5),
        "p99_ms": percentile(latencies, 0.99),
        "statuses": dict(statuses),
        "sample_error": errors[:1],
    }


def _history(tenant_id: int, rows: int) -> float:
    """`rows` finished executions of the tenant's schedules, one a second going back in
    time, in day partitions (as a deployment keeping that much history holds them)."""
    t0 = time.perf_counter()
    base = fetchall("SELECT date_trunc('second', clock_timestamp())")[0][0]
    history_days_back(rows)
    for start in range(0, rows, INSERT_CHUNK):
        execute(
            """
            WITH s AS (
                SELECT array_agg(id ORDER BY id) AS ids, array_agg(partition ORDER BY id) AS parts
                FROM dispatch_schedule WHERE tenant_id = %(t)s
            )
            INSERT INTO dispatch_execution
                (id, schedule_id, tenant_id, partition, scheduled_for, due_at, trigger, attempt,
                 state, queue, lease_owner, fencing_token, error, log_excerpt, reason_code, reason,
                 enqueued_at, started_at, finished_at, status_code)
            SELECT gen_random_uuid(), s.ids[1 + mod(g.i, cardinality(s.ids))], %(t)s,
                   s.parts[1 + mod(g.i, cardinality(s.ids))],
                   %(base)s - g.i * interval '1 second', %(base)s - g.i * interval '1 second',
                   'cron', 1, 'succeeded', %(queue)s, '', 1, '', 'ok', '', '',
                   %(base)s - g.i * interval '1 second', %(base)s - g.i * interval '1 second',
                   %(base)s - g.i * interval '1 second' + interval '20 milliseconds', 200
            FROM s, generate_series(%(start)s, %(stop)s - 1) AS g(i)
            """,
            {
                "t": tenant_id,
                "base": base,
                "queue": DEFAULT_QUEUE,
                "start": start,
                "stop": min(rows, start + INSERT_CHUNK),
            },
        )
    vacuum_analyze("dispatch_execution")
    return time.perf_counter() - t0


def _cursor_at(tenant_id: int, depth: int) -> str | None:
    """The cursor the API returns after `depth` rows (the keyset of the depth-th row)."""
    if depth <= 0:
        return None
    found = fetchall(
        "SELECT scheduled_for, id FROM dispatch_execution WHERE tenant_id = %(t)s"
        " ORDER BY scheduled_for DESC, id DESC OFFSET %(o)s LIMIT 1",
        {"t": tenant_id, "o": depth - 1},
    )
    if not found:
        return None
    # The selectors' own encoding, so the cursor is exactly what a client would hold.
    return selectors.encode_cursor(found[0][0], found[0][1])


def _pages(client: _Client, tenant: Tenant, rows: int, requests: int) -> list[dict[str, Any]]:
    status, body = client.request("GET", f"/v1/executions?limit={PAGE}")
    if status != 200:
        raise BenchError(f"GET /v1/executions answered {status}: {body[:300]!r}")
    second = json.loads(body)["next_cursor"]
    depths: list[tuple[str, str | None]] = [("first page", None), ("page 2", second)]
    for label, depth in (("half-way", rows // 2), ("near the end", max(0, rows - 2 * PAGE))):
        if depth > PAGE:
            depths.append((f"{label} (row {depth})", _cursor_at(tenant.pk, depth)))
    out = []
    for label, cursor in depths:
        path = f"/v1/executions?limit={PAGE}" + (f"&cursor={cursor}" if cursor else "")
        latencies = []
        for _ in range(requests):
            t0 = time.perf_counter()
            status, body = client.request("GET", path)
            latencies.append((time.perf_counter() - t0) * 1000)
            if status != 200:
                raise BenchError(f"GET {path} answered {status}: {body[:300]!r}")
        out.append(
            {
                "depth": label,
                "p50_ms": percentile(latencies, 0.5),
                "p99_ms": percentile(latencies, 0.99),
            }
            | _explain(tenant, cursor)
        )
    return out


def _explain(tenant: Tenant, cursor: str | None) -> dict[str, Any]:
    """EXPLAIN ANALYZE of the very query the selector runs for this page."""
    with CaptureQueriesContext(connection) as queries:
        selectors.execution_list(tenant=tenant, cursor=cursor, limit=PAGE)
    sql = next(q["sql"] for q in queries.captured_queries if '"dispatch_execution"' in q["sql"])
    plan, nodes = explain_analyze(sql)
    indexes = sorted({n["Index Name"] for n in nodes if "Index Name" in n})
    seq = seq_scan_read(nodes)
    sort = any(n["Node Type"] in ("Sort", "Incremental Sort") for n in nodes)
    filtered = sum(int(n.get("Rows Removed by Filter", 0)) for n in nodes)
    top = plan[0]["Plan"]
    return {
        "indexes": indexes,
        "index_cond": next((n.get("Index Cond", "") for n in nodes if "Index Name" in n), ""),
        "seq_scan": seq,
        "sort": sort,
        "rows_removed_by_filter": filtered,
        "buffers": int(top.get("Shared Hit Blocks", 0)) + int(top.get("Shared Read Blocks", 0)),
        "db_ms": float(plan[0].get("Execution Time", 0.0)),
        "uses_index": bool(indexes) and not seq,
    }


def report(result: dict[str, Any], data: dict[str, Any]) -> str:
    head = table(
        [result],
        [
            "schedules",
            "clients",
            "create_per_s",
            "create_p50_ms",
            "create_p99_ms",
            "create_first_quarter_p50_ms",
            "create_last_quarter_p50_ms",
            "http_noop_per_s",
            "ratio_create_to_noop",
        ],
    )
    pages = table(
        result["pages"],
        [
            "depth",
            "p50_ms",
            "p99_ms",
            "db_ms",
            "buffers",
            "rows_removed_by_filter",
            "indexes",
            "seq_scan",
            "sort",
        ],
    )
    jobs = table(
        [result],
        [
            "job_single_per_s",
            "job_single_p50_ms",
            "job_batches",
            "job_batch_size",
            "job_batch_per_s",
            "job_batch_request_p50_ms",
            "ratio_batch_to_single",
        ],
    )
    lines = [
        head,
        "",
        "one-off jobs: POST /v1/jobs vs POST /v1/jobs:batch (jobs per s):",
        jobs,
        "",
        f"GET /v1/executions?limit={PAGE} with {result['rows']} rows:",
        pages,
    ]
    for page in result["pages"]:
        if page["rows_removed_by_filter"] > DEPTH_FILTER_LIMIT:
            lines.append(
                f"note: {page['depth']}: {page['rows_removed_by_filter']} rows filtered out after"
                f" the index scan ({page['index_cond']}): the keyset predicate is not an index"
                " condition, so a page costs in proportion to its depth"
            )
    if result["missing_index"]:
        lines.append(f"MISSING INDEX: a sequential scan for {', '.join(result['missing_index'])}")
    return "\n".join(lines)


def summary(data: dict[str, Any]) -> list[dict[str, Any]]:
    r = data.get(KEY)
    if not r or "pages" not in r:
        return []
    rows: list[dict[str, Any]] = [
        {
            "name": f"api {r['schedules']} schedules",
            "figure": f"POST /v1/schedules per s vs GET /healthz per s ({r['clients']} clients)",
            "value": r["create_per_s"],
            "ceiling": r["http_noop_per_s"],
            "ratio": r["ratio_create_to_noop"],
        }
    ]
    if "job_batch_per_s" in r:
        rows.append(
            {
                "name": f"api {r['job_batch_size']}-job batches",
                "figure": "jobs per s via POST /v1/jobs:batch vs POST /v1/jobs (target >= 20x, "
                ">= 5,000/s)",
                "value": r["job_batch_per_s"],
                "ceiling": r["job_single_per_s"],
                "ratio": r["ratio_batch_to_single"],
            }
        )
    first = r["pages"][0]["p99_ms"] if r["pages"] else None
    for page in r["pages"]:
        rows.append(
            {
                "name": f"api {r['rows']} rows",
                "figure": f"GET /v1/executions p99 ms, {page['depth']} (vs first page)",
                "value": page["p99_ms"],
                "ceiling": first,
                "ratio": ratio(page["p99_ms"], first),
            }
        )
    return rows
