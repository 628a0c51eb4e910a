"""The no-op Celery task the benchmarks measure raw consume rates with.

Registered only in the bench's own workers (`--include bench.tasks`, bench/consume.py),
never autodiscovered: a production worker neither registers nor consumes it.
"""

from __future__ import annotations

import os
from typing import Any

from celery import shared_task
from django.conf import settings

NOOP_TASK = "dispatch.bench_noop"
NOOP_QUEUE = "bench.noop"

_client: Any = None
_client_pid = 0


def _redis() -> Any:
    # One client per pool process: a socket inherited through fork is not shared safely.
    global _client, _client_pid
    if _client is None or _client_pid != os.getpid():
        import redis

        _client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5)
        _client_pid = os.getpid()
    return _client


@shared_task(name=NOOP_TASK, ignore_result=True)
def bench_noop(counter_key: str) -> None:
    """Count one consumed message (the bench polls the counter); nothing else."""
    _redis().incr(counter_key)
