"""`python manage.py bench burst --n 10000 --beats 2`: fire-lag figures on this machine.

Run it on a database and broker of its own (`make bench` uses a separate embedded
data folder when no URLs are set): it creates a throwaway tenant, and purges the
bench queue when done.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import uuid
import zlib
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.db import connection, transaction

from dispatch.models import Execution, ExecutionEvent, Schedule
from tenants.models import Tenant, TenantQuota

BENCH_QUEUE = "low.long"  # nothing else is routed here while the bench runs on its own environment


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * p
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


class Command(BaseCommand):
    help = "Benchmarks: `burst` (N one-offs due at the same second, real beats and broker)."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="which", required=True)
        burst = sub.add_parser(
            "burst", help="N one-offs due at the same second, real beats and broker"
        )
        burst.add_argument("--n", type=int, default=10_000)
        burst.add_argument("--beats", type=int, default=2)
        burst.add_argument(
            "--lead", type=float, default=0, help="seconds between making them due and due time"
        )
        burst.add_argument("--json", default="bench-results.json")
        limits = sub.add_parser(
            "limits", help="raw ceilings: batched claim+insert+advance, pipelined publish"
        )
        limits.add_argument("--n", type=int, default=20_000)
        limits.add_argument("--json", default="bench-results.json")

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["which"] == "limits":
            result = self.limits(opts["n"])
            key = "limits"
            self.stdout.write(
                " | ".join(
                    f"{k}={v:.0f}" if isinstance(v, float) else f"{k}={v}"
                    for k, v in result.items()
                )
            )
        else:
            result = self.burst(opts["n"], opts["beats"], opts["lead"])
            key = f"burst_{opts['n']}"
        path = Path(opts["json"])
        data = json.loads(path.read_text()) if path.exists() else {}
        data[key] = result
        if opts["which"] == "burst" and "limits" in data:
            ceiling = min(
                data["limits"]["pg_claim_rows_per_s"], data["limits"]["broker_publish_per_s"]
            )
            result["ratio_to_ceiling"] = result["dispatch_per_s"] / ceiling
        if opts["which"] == "burst":
            self.stdout.write(self.table([result]))
        path.write_text(json.dumps(data, indent=2))
        self.stdout.write(f"wrote {path}")

    def limits(self, n: int) -> dict[str, Any]:
        """The two ceilings a beat's dispatch is bounded by, measured with the beat's own code."""
        from dispatch.beat import Beat, BeatConfig, Pending

        tenant = self._tenant(n)
        self._schedules(tenant, n, due_in_s=-1.0)
        beat = Beat(
            BeatConfig(
                name=f"bench-limits-{uuid.uuid4().hex[:6]}",
                partitions=settings.SCHEDULER_PARTITIONS,
                batch=5000,
                lookahead_s=0,
            )
        )
        beat.start()
        try:
            beat.maintain_leases()
            t0 = time.perf_counter()
            fired = 0
            while True:
                claimed = beat.fire_due()
                fired += claimed
                if claimed == 0:
                    break
            pg_s = time.perf_counter() - t0
            items = [Pending(0, str(uuid.uuid4()), 1, BENCH_QUEUE, tenant.pk, 0) for _ in range(n)]
            t0 = time.perf_counter()
            sent = beat._publish(items)
            pub_s = time.perf_counter() - t0
        finally:
            beat.shutdown()
        result = {
            "n": n,
            "pg_claim_rows_per_s": fired / pg_s,
            "broker_publish_per_s": len(sent) / pub_s,
            "broker": settings.CELERY_BROKER_URL.split(":")[0],
        }
        self._cleanup(tenant)
        return result

    def table(self, rows: list[dict[str, Any]]) -> str:
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
        ]
        lines = [" | ".join(keys), " | ".join("---" for _ in keys)]
        for row in rows:
            lines.append(
                " | ".join(
                    f"{row[k]:.3f}" if isinstance(row[k], float) else str(row[k]) for k in keys
                )
            )
        return "\n".join(lines)

    def _tenant(self, n: int) -> Tenant:
        tenant = Tenant.objects.create(slug=f"bench-{uuid.uuid4().hex[:8]}", name="bench")
        TenantQuota.objects.create(
            tenant=tenant, max_concurrent=n * 2, max_schedules=n * 2, max_executions_per_day=n * 10
        )
        return tenant

    def _schedules(self, tenant: Tenant, n: int, *, due_in_s: float | None) -> None:
        """N one-off schedules; due `due_in_s` from now, or kept out of the due index (None)."""
        with connection.cursor() as cur:
            cur.execute("SELECT clock_timestamp()")
            now = cur.fetchone()[0]
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
                    target={"type": "http", "url": "https://bench.internal/", "timeout_s": 30},
                    retry={},
                    priority="low",
                    duration_class="long",
                    partition=zlib.crc32(sid.bytes) % settings.SCHEDULER_PARTITIONS,
                )
            )
        with transaction.atomic():
            Schedule.objects.bulk_create(rows, batch_size=5000)

    def burst(self, n: int, beats: int, lead: float) -> dict[str, Any]:
        tenant = self._tenant(n)
        t0 = time.perf_counter()
        # Kept out of the due index (next_run_at NULL) until the beats are up; then made due all at once.
        self._schedules(tenant, n, due_in_s=None)
        create_s = time.perf_counter() - t0
        env = dict(os.environ)
        env.update(
            {
                "DATABASE_URL": settings.DATABASE_URL,
                "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
                "REDIS_URL": settings.REDIS_URL,
            }
        )
        argv = [sys.executable, "manage.py", "beat", "--batch", "5000", "--name"]
        procs = [
            subprocess.Popen(  # noqa: S603 - our own interpreter and manage.py
                [*argv, f"bench-beat-{i}"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for i in range(beats)
        ]
        self._wait_for_beats(beats)
        with connection.cursor() as cur:
            # Every one due at the same whole second, a little ahead so the beats can pre-load them.
            cur.execute(
                "UPDATE dispatch_schedule SET run_at = date_trunc('second', clock_timestamp()) + %s * interval '1 second',"
                " next_run_at = date_trunc('second', clock_timestamp()) + %s * interval '1 second'"
                " WHERE tenant_id = %s RETURNING run_at",
                [lead or 3, lead or 3, tenant.pk],
            )
            due = cur.fetchone()[0]
        try:
            deadline = time.monotonic() + max(60.0, n / 500)
            qs = Execution.objects.filter(tenant=tenant)
            while time.monotonic() < deadline:
                if qs.filter(state="queued").count() >= n:
                    break
                time.sleep(0.5)
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(30)
        pairs = [(e, d) for e, d in qs.values_list("enqueued_at", "due_at") if e is not None]
        lags = [(e - d).total_seconds() for e, d in pairs]
        executions = qs.count()
        distinct = qs.values("schedule_id").distinct().count()
        first_due = min((d for _, d in pairs), default=due)
        last_pub = max((e for e, _ in pairs), default=due)
        span = max(1e-6, (last_pub - first_due).total_seconds())
        result = {
            "name": f"burst {n}",
            "n": n,
            "beats": beats,
            "create_s": create_s,
            "lag_p50_s": percentile(lags, 0.50),
            "lag_p95_s": percentile(lags, 0.95),
            "lag_p99_s": percentile(lags, 0.99),
            "lag_max_s": max(lags, default=float("nan")),
            "lag_mean_s": statistics.fmean(lags) if lags else float("nan"),
            "dispatch_per_s": len(lags) / span,
            "lost": n - distinct,
            "duplicated": executions - distinct,
            "broker": settings.CELERY_BROKER_URL.split(":")[0],
        }
        self._cleanup(tenant)
        return result

    def _wait_for_beats(self, beats: int) -> None:
        from dispatch.models import SchedulerPartition

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            owners = set(
                SchedulerPartition.objects.exclude(owner="").values_list("owner", flat=True)
            )
            taken = SchedulerPartition.objects.exclude(owner="").count()
            if len(owners) >= beats and taken >= settings.SCHEDULER_PARTITIONS:
                return
            time.sleep(0.2)

    def _cleanup(self, tenant: Tenant) -> None:
        from config.celery_app import app

        with transaction.atomic():
            ExecutionEvent.objects.filter(tenant=tenant).delete()
            Execution.objects.filter(tenant=tenant).delete()
            Schedule.objects.filter(tenant=tenant).delete()
            TenantQuota.objects.filter(tenant=tenant).delete()
            tenant.delete()
        with app.connection_for_write() as conn:
            conn.default_channel.queue_purge(BENCH_QUEUE)  # type: ignore[attr-defined]
