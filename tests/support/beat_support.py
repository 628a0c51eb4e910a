"""An in-process beat against the real PostgreSQL and broker, for the firing
tests: one place for its start, its shutdown and the queues it publishes to."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings

from dispatch.models import SchedulerPartition
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


def covered_by(numbers: Iterable[int]) -> set[int]:
    """The logical partitions the lease ranges `numbers` cover (their bounds in the table)."""
    rows = SchedulerPartition.objects.filter(number__in=list(numbers)).values_list("lo", "hi")
    return {p for lo, hi in rows for p in range(lo, hi)}


def partition_owners() -> dict[int, str]:
    """logical partition -> the beat leasing the range that covers it (leased ones only)."""
    rows = SchedulerPartition.objects.exclude(owner="").values_list("lo", "hi", "owner")
    return {p: owner for lo, hi, owner in rows for p in range(lo, hi)}


def partition_epochs() -> dict[int, int]:
    """logical partition -> the epoch of the range that covers it."""
    rows = SchedulerPartition.objects.values_list("lo", "hi", "epoch")
    return {p: epoch for lo, hi, epoch in rows for p in range(lo, hi)}


# (range, epoch) pairs that two beats fired under (executions mapped to their range by
# its bounds), among the schedules `ids` or all when NULL: an epoch names one lease, so
# a second firer is a stale beat that wrote after losing it. Run with {"ids": ...}.
SHARED_EPOCHS = """
SELECT r.number, e.fired_epoch FROM dispatch_execution e
JOIN dispatch_schedulerpartition r ON e.partition >= r.lo AND e.partition < r.hi
WHERE e.fired_epoch IS NOT NULL
  AND (%(ids)s::text[] IS NULL OR e.schedule_id::text = ANY(%(ids)s::text[]))
GROUP BY 1, 2 HAVING count(DISTINCT e.fired_by) > 1
"""
