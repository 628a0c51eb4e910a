"""The lease keeper (issue 16, defect 4): leases are renewed every third of the lease
on the keeper's own thread and connection whatever the cycle is doing, and a lease
it could not renew is dropped by the cycle before its next write."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from django.conf import settings
from django.db import connection, transaction
from django.db.models import F

from dispatch.models import BeatNode, SchedulerPartition
from dispatch.partitioning import LOGICAL_PARTITIONS
from dispatch.scheduler.loop import Beat
from tests.support.beat_support import running_beat
from tests.support.procs import wait_for
from tests.support.worker_support import db_now

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("empty_broker")]
TTL = 3.0


@pytest.fixture
def beat() -> Iterator[Beat]:
    with running_beat("keeper-beat", lease_ttl_s=TTL, cycle_s=0.2) as beat:
        beat.cycle()
        assert len(beat.owned) == settings.SCHEDULER_PARTITIONS
        beat.keeper.start()
        yield beat


def held() -> int:
    return SchedulerPartition.objects.filter(
        owner="keeper-beat", lease_expires_at__gt=db_now()
    ).count()


def test_leases_are_renewed_while_a_fenced_transaction_outlasts_them(beat: Beat) -> None:
    """A firing transaction busy for longer than the lease (as under database latency):
    the keeper renews meanwhile (the fence does not block it) and the transaction's
    partitions are still ours, at the same epochs, when it commits."""
    epochs = dict(beat.owned)
    with transaction.atomic():
        # Every logical partition is covered by the ranges the fence still holds.
        assert beat.partitions.fence() == list(range(LOGICAL_PARTITIONS))
        with connection.cursor() as cur:
            cur.execute("SELECT pg_sleep(%s)", [TTL * 1.5])
        assert beat.partitions.fence() == list(range(LOGICAL_PARTITIONS))
    assert held() == settings.SCHEDULER_PARTITIONS
    assert dict(SchedulerPartition.objects.values_list("number", "epoch")) == epochs
    assert beat.counters.stale_writes_rejected == 0


def test_a_refused_renewal_drops_the_partitions_before_the_next_write(beat: Beat) -> None:
    SchedulerPartition.objects.update(owner="usurper", epoch=F("epoch") + 1)
    # The keeper finds out by itself (no cycle runs meanwhile) ...
    wait_for(lambda: beat.partitions._lost, timeout=TTL, what="the keeper to report the loss")
    # ... and the cycle drops them before any statement of its own.
    assert beat.partitions.apply_lost() == settings.SCHEDULER_PARTITIONS
    assert beat.owned == {} and beat.counters.stale_writes_rejected == 1
    # The heartbeat carries the rejection (the keeper's next round trip).
    wait_for(
        lambda: BeatNode.objects.get(name="keeper-beat").stale_writes_rejected == 1,
        timeout=TTL,
        what="the heartbeat to report the rejection",
    )


def test_a_lease_the_keeper_could_not_renew_in_time_is_dropped_by_the_local_clock(
    beat: Beat,
) -> None:
    """The keeper stuck (a dead link): once the lease has surely lapsed by the local
    clock, the cycle drops the partitions without asking the database."""
    beat.keeper.stop()
    time.sleep(TTL + 0.2)
    assert beat.partitions.apply_lost() == settings.SCHEDULER_PARTITIONS
    assert beat.owned == {} and beat.counters.stale_writes_rejected == 1


def test_a_loss_is_one_warning_and_the_recovery_is_said_as_loudly(
    beat: Beat, caplog: pytest.LogCaptureFixture
) -> None:
    """What `make run` shows (WARNING and up): the ranges lost at once in one line, and
    a line when the beat has them again — not a silence that reads as a broken beat."""
    beat.keeper.stop()
    time.sleep(TTL + 0.2)
    with caplog.at_level("WARNING", logger="dispatch.beat"):
        assert beat.partitions.apply_lost() == settings.SCHEDULER_PARTITIONS
        lost = [r.getMessage() for r in caplog.records if "lost:" in r.getMessage()]
        assert len(lost) == 1, lost
        assert f"partition ranges {list(range(settings.SCHEDULER_PARTITIONS))}" in lost[0]
        beat.cycle()  # the leases lapsed: this beat takes its ranges back
        assert len(beat.owned) == settings.SCHEDULER_PARTITIONS
        recovered = [r.getMessage() for r in caplog.records if "recovered" in r.getMessage()]
    assert len(recovered) == 1 and "acquired partition ranges" in recovered[0], recovered
