"""`bench limits`: the raw ceilings every other figure is divided by.

Raw ceilings (no code of the beat's):

* raw claim: PostgreSQL's own ceiling for the operation, claim + insert + advance
  in batches of 5,000 on minimal tables (one key, one due index, one unique key);
* raw publish, Redis: pipelined LPUSH of pre-serialised, byte-identical Celery
  protocol-2 envelopes (`raw.py`);
* raw publish, RabbitMQ (RABBITMQ_URL, or the broker when it is RabbitMQ):
  basic_publish of pre-serialised bodies with confirms per window of 1,000, in
  several layouts (connections x channels, windows awaiting confirms per channel:
  `raw.AMQP_LAYOUTS`); the best is the ceiling, each is reported.

The beat's own figures, labelled as such (their ratio to the raw ones is the
cost of the schema and of the beat's code):

* batched claim + insert + advance of due rows with the beat's code on the real schema;
* pipelined publish with the beat's publisher;
* Celery no-op consume rate of ONE prefork worker process at concurrency 1.

Every dispatch figure is divided by min(raw publish for its broker, raw claim)
(`common.dispatch_ceiling`), and the report names the bound that applies.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from bench import raw
from bench.burst import make_schedules
from bench.common import (
    BENCH_QUEUE,
    BenchError,
    bench_tenant,
    ceiling_bound,
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
from core import redis_urls

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
                sent = beat.publish_items(items)
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
    redis_url = settings.CELERY_BROKER_URL
    if not redis_urls.is_redis(redis_url):
        redis_url = settings.REDIS_URL
    url = amqp_url()
    amqp = raw.amqp_publish_rates(n, url) if url else {}
    return {
        "n": n,
        "pg_raw_claim_rows_per_s": pg_raw_claim_rows_per_s(n),
        "raw_publish_redis_per_s": raw.redis_publish_per_s(n, redis_url),
        # The best layout is the ceiling; every layout's figure is kept beside it.
        "raw_publish_amqp_per_s": amqp.get("per_s"),
        "raw_publish_amqp_layout": amqp.get("best"),
        "raw_publish_amqp_layouts": amqp.get("layouts"),
        "raw_publish_amqp_priority_per_s": amqp.get("priority_per_s"),
        "raw_publish_window": raw.WINDOW,
        "beat_claim_rows_per_s": fired / pg_s,
        "beat_publish_per_s": len(sent) / pub_s,
        "celery_noop_per_s_1proc": noop["per_s"],
        "celery_noop_n": noop_n,
        "broker": settings.CELERY_BROKER_URL.split(":")[0],
    }


def amqp_url() -> str:
    """RabbitMQ for the raw publish ceiling and the RabbitMQ cron burst: RABBITMQ_URL,
    or the broker itself when it is RabbitMQ; empty when there is none."""
    from config.celery_app import is_amqp

    if is_amqp(settings.CELERY_BROKER_URL):
        return str(settings.CELERY_BROKER_URL)
    return os.environ.get("RABBITMQ_URL", "")


def report(result: dict[str, Any], data: dict[str, Any]) -> str:
    rows = [{"figure": f, "kind": k, "per_s": result.get(key)} for f, k, key in FIGURES]
    lines = [table(rows, ["figure", "kind", "per_s"])]
    for layout, per_s in (result.get("raw_publish_amqp_layouts") or {}).items():
        lines.append(f"raw RabbitMQ confirmed publish/s, {layout}: {per_s:.0f}")
    if result.get("raw_publish_amqp_priority_per_s") is not None:
        lines.append(
            f"raw RabbitMQ confirmed publish/s, {result['raw_publish_amqp_layout']},"
            f" priority queue as the beat's: {result['raw_publish_amqp_priority_per_s']:.0f}"
        )
    for broker in ("redis", "amqp"):
        value, bound = ceiling_bound(data, broker)
        if value is not None:
            lines.append(f"dispatch ceiling ({broker}) = {value:.0f}/s, bound by {bound}")
    return "\n".join(lines)


FIGURES = [
    ("claim+insert+advance rows/s, minimal tables", "raw", "pg_raw_claim_rows_per_s"),
    ("publish/s, Redis pipelined LPUSH of prebuilt envelopes", "raw", "raw_publish_redis_per_s"),
    (
        "publish/s, RabbitMQ basic_publish, confirms per 1,000, best layout",
        "raw",
        "raw_publish_amqp_per_s",
    ),
    ("claim+insert+advance rows/s, real schema", "beat's code", "beat_claim_rows_per_s"),
    ("publish/s, the beat's publisher", "beat's code", "beat_publish_per_s"),
    ("Celery no-op consume/s, 1 process", "Celery", "celery_noop_per_s_1proc"),
]


def summary(data: dict[str, Any]) -> list[dict[str, Any]]:
    r = data.get(KEY) or {}
    rows: list[dict[str, Any]] = []
    for figure, kind, key in FIGURES:
        row: dict[str, Any] = {"name": "limits", "figure": f"{kind}: {figure}", "value": r.get(key)}
        raw_twin = {
            "beat_claim_rows_per_s": "pg_raw_claim_rows_per_s",
            "beat_publish_per_s": "raw_publish_redis_per_s"
            if r.get("broker") == "redis"
            else "raw_publish_amqp_per_s",
        }.get(key)
        if raw_twin and r.get(raw_twin) is not None:
            row["ceiling"] = r.get(raw_twin)
            row["ratio"] = ratio(r.get(key), r.get(raw_twin))
        rows.append(row)
    return rows
