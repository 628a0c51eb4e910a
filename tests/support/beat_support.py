"""An in-process beat against the real PostgreSQL and broker, for the firing
tests: one place for its start, its shutdown and the queues it publishes to."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings

from dispatch.scheduler.loop import Beat, BeatConfig
from tests.support.worker_support import purge


@contextmanager
def running_beat(name: str, **config: Any) -> Iterator[Beat]:
    """A beat owning every partition (30 s leases, 5 s lookahead unless given)."""
    config = {"lease_ttl_s": 30, "lookahead_s": 5} | config
    beat = Beat(BeatConfig(name=name, partitions=settings.SCHEDULER_PARTITIONS, **config))
    beat.start()
    try:
        yield beat
    finally:
        beat.shutdown()


@contextmanager
def empty_queues() -> Iterator[None]:
    """The platform's queues empty before and after: what a test counts is its own."""
    purge(settings.CELERY_BROKER_URL)
    yield
    purge(settings.CELERY_BROKER_URL)
