"""`bench burst --n 10000 --beats 2`: N one-offs due at the same second, real beats and broker."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from bench.common import (
    BENCH_QUEUE,
    IDLE_TARGET,
    bench_tenant,
    broker_kind,
    ceiling_bound,
    cleanup_tenant,
    db_now,
    fire_stats,
    purge_queues,
    ratio,
    table,
)
from bench.procs import (
    Children,
    beat_argv,
    forget_beats,
    wait_for_beats,
)
from dispatch.models import Execution, Schedule
from dispatch.partitioning import partition_for
from tenants.models import Tenant


def key(n: int) -> str:
    return f"burst_{n}"


def make_schedules(tenant: Tenant, n: int, *, due_in_s: float | None) -> None:
    """N one-off schedules; due `due_in_s` from now, or kept out of the due index (None)."""
    now = db_now()
    run_at = now + timedelta(seconds=due_in_s if due_in_s is not None else 10 * 365 * 86400)
    rows = []
    for i in range(n):
        sid = uuid.uuid4()
        rows.append(
            Schedule(
                id=sid,
                tenant=tenant,
                name=f"b{i}",
                kind="once",
                run_at=run_at,
                next_run_at=run_at if due_in_s is not None else None,
                target=IDLE_TARGET,
                retry={},
                priority="low",
                duration_class="long",
                partition=partition_for(sid),
            )
        )
    with transaction.atomic():
        Schedule.objects.bulk_create(rows, batch_size=5000)


def run(n: int, beats: int, lead: float) -> dict[str, Any]:
    tenant = bench_tenant(n)
    names = [f"bench-beat-{i}" for i in range(beats)]
    try:
        t0 = time.perf_counter()
        # Kept out of the due index (next_run_at NULL) until the beats are up; then made due all at once.
        make_schedules(tenant, n, due_in_s=None)
        create_s = time.perf_counter() - t0
        with Children("burst") as children:
            procs = [children.start(name, beat_argv(name, "--batch", "5000")) for name in names]
            wait_for_beats(procs, names)
            # Every one due at exactly one instant: ONE timestamp, computed once and
            # passed as a parameter (clock_timestamp() per row spreads a 100,000-row
            # UPDATE's due times over seconds and flatters the figure), a little
            # ahead so the beats can pre-load them.
            due = db_now().replace(microsecond=0) + timedelta(seconds=lead or 3)
            with connection.cursor() as cur:
                cur.execute(
                    "UPDATE dispatch_schedule SET run_at = %(due)s, next_run_at = %(due)s"
                    " WHERE tenant_id = %(t)s",
                    {"due": due, "t": tenant.pk},
                )
            deadline = time.monotonic() + max(60.0, n / 500)
            qs = Execution.objects.filter(tenant=tenant)
            while time.monotonic() < deadline:
                if qs.filter(state="queued").count() >= n:
                    break
                time.sleep(0.5)
        forget_beats(names)
        stats = fire_stats(tenant.pk, n)
    finally:
        cleanup_tenant(tenant.pk)
        purge_queues(BENCH_QUEUE)
    executions = stats["executions"]
    distinct = executions - stats["duplicated"]
    return {
        "name": f"burst {n}",
        "n": n,
        "beats": beats,
        "create_s": create_s,
        "lag_p50_s": stats["lag_p50_s"],
        "lag_p95_s": stats["lag_p95_s"],
        "lag_p99_s": stats["lag_p99_s"],
        "lag_max_s": stats["lag_max_s"],
        "lag_mean_s": stats["lag_mean_s"],
        "dispatch_per_s": stats["dispatch_per_s"],
        "lost": n - distinct,
        "duplicated": stats["duplicated"],
        "broker": settings.CELERY_BROKER_URL.split(":")[0],
        "broker_kind": broker_kind(),
        "due_at": due.isoformat(),
    }


def add_ratio(result: dict[str, Any], data: dict[str, Any]) -> None:
    ceiling, bound = ceiling_bound(data, result.get("broker_kind"))
    if ceiling is not None:
        result["ceiling_per_s"] = ceiling
        result["bound"] = bound
        result["ratio_to_ceiling"] = ratio(result["dispatch_per_s"], ceiling)


def report(result: dict[str, Any], data: dict[str, Any]) -> str:
    keys = [
        "name",
        "n",
        "create_s",
        "lag_p50_s",
        "lag_p95_s",
        "lag_p99_s",
        "lag_max_s",
        "dispatch_per_s",
        "lost",
        "duplicated",
        "ratio_to_ceiling",
        "bound",
    ]
    return table([result], keys)


def summary(data: dict[str, Any], only: str | None = None) -> list[dict[str, Any]]:
    rows = []
    for k, r in sorted(data.items()):
        if only is not None and k != only:
            continue
        if k.startswith("burst_") and isinstance(r, dict) and "dispatch_per_s" in r:
            ceiling, bound = ceiling_bound(data, r.get("broker_kind"))
            rows.append(
                {
                    "name": r.get("name", k),
                    "figure": f"dispatch/s (due → published) vs {bound}",
                    "value": r["dispatch_per_s"],
                    "ceiling": ceiling,
                    "ratio": ratio(r["dispatch_per_s"], ceiling),
                }
            )
            rows.append(
                {"name": r.get("name", k), "figure": "fire lag p99 s", "value": r["lag_p99_s"]}
            )
            rows.append(
                {
                    "name": r.get("name", k),
                    "figure": "lost / duplicated",
                    "value": f"{r['lost']} / {r['duplicated']}",
                }
            )
    return rows
