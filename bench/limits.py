"""`bench limits`: the raw ceilings every other figure is divided by.

* PostgreSQL's own ceiling for the operation: claim + insert + advance in batches
  of 5,000 on minimal temporary tables (one key, one due index, one unique key);
* batched claim + insert + advance of due rows, with the beat's own code on the
  real schema (its ratio to the raw ceiling is the cost of the schema and the beat);
* pipelined publish to the broker, with the beat's own code;
* Celery no-op consume rate of ONE prefork worker process at concurrency 1.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from bench.burst import make_schedules
from bench.common import (
    BENCH_QUEUE,
    BenchError,
    bench_tenant,
    cleanup_tenant,
    purge_queues,
    quiet_logs,
    ratio,
    table,
)
from bench.consume import noop_consume_rate
from bench.procs import (
    end_beat_session,
    forget_beats,
    lease_all_partitions,
)

KEY = "limits"


def pg_raw_claim_rows_per_s(n: int, batch: int = 5000) -> float:
    """The operation's hardware ceiling: claim + insert + advance in batches on
    minimal tables (one key, one due index, one unique key; logged like the real ones), no beat."""
    with connection.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS bench_raw_sched, bench_raw_exec")  # a killed run's
        cur.execute(
            "CREATE TABLE bench_raw_sched (id bigint PRIMARY KEY, partition int NOT NULL,"
            " next_run_at timestamptz)"
        )
        cur.execute("CREATE INDEX ON bench_raw_sched (partition, next_run_at)")
        cur.execute(
            "CREATE TABLE bench_raw_exec (id bigserial PRIMARY KEY, sched_id bigint NOT NULL,"
            " scheduled_for timestamptz NOT NULL, UNIQUE (sched_id, scheduled_for))"
        )
        cur.execute(
            "INSERT INTO bench_raw_sched SELECT g, g %% 16, now() - interval '1 second'"
            " FROM generate_series(1, %s) g",
            [n],
        )
        cur.execute("ANALYZE bench_raw_sched")
    t0 = time.perf_counter()
    claimed = 0
    try:
        claimed = _raw_claim_batches(batch)
    finally:
        elapsed = time.perf_counter() - t0
        with connection.cursor() as cur:
            cur.execute("DROP TABLE bench_raw_sched, bench_raw_exec")
    return float(claimed / elapsed)


def _raw_claim_batches(batch: int) -> int:
    claimed = 0
    while True:
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute(
                "WITH due AS (SELECT id, next_run_at FROM bench_raw_sched"
                " WHERE partition = ANY(%s) AND next_run_at <= now()"
                " ORDER BY next_run_at LIMIT %s FOR UPDATE SKIP LOCKED),"
                " ins AS (INSERT INTO bench_raw_exec (sched_id, scheduled_for)"
                " SELECT id, next_run_at FROM due ON CONFLICT DO NOTHING),"
                " adv AS (UPDATE bench_raw_sched s SET next_run_at = NULL FROM due WHERE s.id = due.id RETURNING 1)"
                " SELECT count(*) FROM adv",
                [list(range(16)), batch],
            )
            k = int(cur.fetchone()[0])
        claimed += k
        if k == 0:
            return claimed


def run(n: int, noop_n: int) -> dict[str, Any]:
    from dispatch.scheduler.firing import Pending
    from dispatch.scheduler.loop import Beat, BeatConfig

    tenant = bench_tenant(n)
    name = f"bench-limits-{uuid.uuid4().hex[:6]}"
    try:
        make_schedules(tenant, n, due_in_s=-1.0)
        beat = Beat(
            BeatConfig(
                name=name, partitions=settings.SCHEDULER_PARTITIONS, batch=5000, lookahead_s=0
            )
        )
        with quiet_logs():
            beat.start()
            try:
                lease_all_partitions(beat)
                t0 = time.perf_counter()
                fired = 0
                while True:
                    claimed = beat.fire_due()
                    fired += claimed
                    if claimed == 0:
                        break
                pg_s = time.perf_counter() - t0
                items = [
                    Pending(0, str(uuid.uuid4()), 1, BENCH_QUEUE, tenant.pk, 0) for _ in range(n)
                ]
                t0 = time.perf_counter()
                sent = beat._publish(items)
                pub_s = time.perf_counter() - t0
            finally:
                beat.shutdown()
                end_beat_session()
                forget_beats([name])
    finally:
        cleanup_tenant(tenant.pk)
        purge_queues(BENCH_QUEUE)
    if fired != n:
        raise BenchError(f"limits: the beat claimed {fired} of {n} due schedules")
    noop = noop_consume_rate(noop_n, workers=1, concurrency=1)
    return {
        "n": n,
        "pg_raw_claim_rows_per_s": pg_raw_claim_rows_per_s(n),
        "pg_claim_rows_per_s": fired / pg_s,
        "broker_publish_per_s": len(sent) / pub_s,
        "celery_noop_per_s_1proc": noop["per_s"],
        "celery_noop_n": noop_n,
        "broker": settings.CELERY_BROKER_URL.split(":")[0],
    }


def report(result: dict[str, Any], data: dict[str, Any]) -> str:
    keys = [
        "n",
        "pg_raw_claim_rows_per_s",
        "pg_claim_rows_per_s",
        "broker_publish_per_s",
        "celery_noop_per_s_1proc",
        "broker",
    ]
    return table([result], keys)


def summary(data: dict[str, Any]) -> list[dict[str, Any]]:
    r = data.get(KEY) or {}
    return [
        {
            "name": "limits",
            "figure": "pg raw claim+insert+advance rows/s (minimal tables)",
            "value": r.get("pg_raw_claim_rows_per_s"),
        },
        {
            "name": "limits",
            "figure": "beat claim+insert+advance rows/s (real schema)",
            "value": r.get("pg_claim_rows_per_s"),
            "ceiling": r.get("pg_raw_claim_rows_per_s"),
            "ratio": ratio(r.get("pg_claim_rows_per_s"), r.get("pg_raw_claim_rows_per_s")),
        },
        {"name": "limits", "figure": "broker publish/s", "value": r.get("broker_publish_per_s")},
        {
            "name": "limits",
            "figure": "celery no-op consume/s (1 proc)",
            "value": r.get("celery_noop_per_s_1proc"),
        },
    ]
