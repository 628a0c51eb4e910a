"""Raw Celery ceiling: how fast real worker processes consume no-op messages.

The messages are queued first and the workers started afterwards; the clock
runs from the moment every worker reported ready to the moment the last
message was counted, so neither publishing nor worker start-up is measured.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from django.conf import settings

from bench.common import (
    BenchError,
    purge_queues,
)
from bench.procs import (
    Children,
    worker_argv,
)
from bench.tasks import NOOP_QUEUE, NOOP_TASK

PUBLISH_CHUNK = 1000
POOLS = ("prefork", "threads")


def pool_argv(argv: list[str], pool: str) -> list[str]:
    """`worker_argv`'s command line with `--pool` set to `pool` (prefork or threads)."""
    if pool not in POOLS:
        raise BenchError(f"pool {pool!r}: one of {', '.join(POOLS)}")
    at = argv.index("--pool") + 1
    return [*argv[:at], pool, *argv[at + 1 :]]


def publish_noops(n: int, counter_key: str) -> float:
    """Queue n no-op tasks in pipelined chunks; returns publishes per second."""
    from config.celery_app import app

    t0 = time.perf_counter()
    with app.producer_or_acquire() as producer:
        app.amqp.queues[NOOP_QUEUE](producer.channel).declare()
        for start in range(0, n, PUBLISH_CHUNK):
            with producer.batch(max_size=PUBLISH_CHUNK):
                for _ in range(min(PUBLISH_CHUNK, n - start)):
                    app.send_task(
                        NOOP_TASK, args=[counter_key], queue=NOOP_QUEUE, producer=producer
                    )
    return n / max(1e-9, time.perf_counter() - t0)


def noop_consume_rate(
    n: int, *, workers: int = 1, concurrency: int = 1, pool: str = "prefork"
) -> dict[str, Any]:
    """Messages per second `workers` workers of `pool` at `concurrency` consume, doing nothing."""
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5)
    key = f"sched:bench:noop:{uuid.uuid4().hex}"
    purge_queues(NOOP_QUEUE)
    publish_per_s = publish_noops(n, key)
    try:
        with Children("noop") as children:
            started = [
                children.start(
                    f"noop-{i}",
                    # The no-op task is registered in these workers only (config/celery_app.py).
                    [
                        *pool_argv(worker_argv(NOOP_QUEUE, concurrency, f"bench-noop-{i}"), pool),
                        "--include",
                        "bench.tasks",
                    ],
                )
                for i in range(workers)
            ]
            deadline = time.monotonic() + 60 + n / 20
            t_ready: float | None = None
            counted_at_ready = 0
            while True:
                count = int(client.get(key) or 0)
                now = time.perf_counter()
                if t_ready is None and all(" ready." in c.output() for c in started):
                    t_ready, counted_at_ready = now, count
                if count >= n and t_ready is not None:
                    t_done = now
                    break
                for child in started:
                    if not child.alive():
                        raise BenchError(f"worker {child.name} exited:\n{child.output()[-3000:]}")
                if time.monotonic() > deadline:
                    raise BenchError(f"no-op consume: {count} of {n} consumed before the deadline")
                # Fine polling while waiting for "ready" (the start of the clock), coarser after.
                time.sleep(0.005 if t_ready is None else 0.01)
    finally:
        client.delete(key)
        client.close()
        purge_queues(NOOP_QUEUE)
    measured = n - counted_at_ready
    return {
        "n": n,
        "workers": workers,
        "pool": pool,
        "concurrency": concurrency,
        "consumed_before_all_ready": counted_at_ready,
        "per_s": measured / max(1e-9, t_done - t_ready),
        "publish_per_s": publish_per_s,
    }
