"""Rebalancing and re-cutting move lease ranges, never schedules (dispatch/partitioning.py).

Real beat processes and two real workers calling a loopback receiver, under a stream
of one-off jobs: one beat, then three, then two (one stopped with SIGTERM). Judged at
the receiver and in the tables: every job ran (0 lost), each execution reached the
target once (0 duplicated), no fencing epoch was fired under by two beats, the jobs
were fired by more than one beat (the ranges really moved mid-stream), and schedules
that were not due were not rewritten at all — their row versions (xmin) and
partitions are what they were before the first beat started.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connection

from dispatch.models import Execution, SchedulerPartition
from dispatch.partitioning import LOGICAL_PARTITIONS, partition_for
from tenants.models import Tenant
from tenants.roles import Principal
from tests.integration.scheduler.test_beat_admission import all_succeeded, cluster, schedule_to
from tests.integration.scheduler.test_beat_processes import assert_no_epoch_shared_by_two_beats
from tests.support.beat_support import partition_epochs, running_beat
from tests.support.ledger import Ledger
from tests.support.procs import Proc, wait_for
from tests.support.worker_support import db_now

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
__all__ = ["cluster"]  # the fixture, imported to be used here

JOBS = 45
SPREAD_S = 24.0
IDLE = 40


def shares() -> list[int]:
    """Ranges held per live owner, largest first."""
    owners = Counter(SchedulerPartition.objects.exclude(owner="").values_list("owner", flat=True))
    return sorted(owners.values(), reverse=True)


def versions(ids: list[str]) -> dict[str, tuple[int, str]]:
    """(partition, xmin) of each schedule row: xmin changes whenever the row is rewritten."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT id::text, partition, xmin::text FROM dispatch_schedule WHERE id::text = ANY(%s)",
            [ids],
        )
        return {sid: (part, xmin) for sid, part, xmin in cur.fetchall()}


def test_one_three_two_beats_lose_nothing_fire_nothing_twice_and_rewrite_no_schedule(
    cluster: Callable[..., list[Proc]],
    ledger: Ledger,
    admin_principal: Principal,
    tenant: Tenant,
) -> None:
    ranges = settings.SCHEDULER_PARTITIONS
    tenant.quota.max_schedules = JOBS + IDLE + 10
    tenant.quota.max_concurrent = JOBS + 10
    tenant.quota.save()
    # Not due for weeks: nothing may touch these rows, whatever the beats do.
    idle = [
        str(schedule_to(admin_principal, ledger.url, name=f"idle{i}", cron="0 3 1 1 *").pk)
        for i in range(IDLE)
    ]
    before = versions(idle)
    assert {sid: part for sid, (part, _) in before.items()} == {
        sid: partition_for(uuid.UUID(sid)) for sid in idle
    }

    first = cluster(1)
    wait_for(lambda: shares() == [ranges], timeout=30, what="one beat holding every range")
    at = db_now() + timedelta(seconds=3)
    jobs = [
        str(
            schedule_to(
                admin_principal,
                ledger.url,
                name=f"j{i}",
                run_at=at + timedelta(seconds=SPREAD_S * i / JOBS),
            ).pk
        )
        for i in range(JOBS)
    ]
    time.sleep(3 + SPREAD_S / 3)
    more = cluster(2)
    third = [ranges // 3 + (1 if i < ranges % 3 else 0) for i in range(3)]
    wait_for(lambda: shares() == third, timeout=30, what=f"three beats holding {third}")
    time.sleep(SPREAD_S / 4)
    more[-1].stop()  # SIGTERM: it releases its ranges at once
    wait_for(
        lambda: shares() == [ranges - ranges // 2, ranges // 2],
        timeout=30,
        what="two beats sharing the ranges",
    )
    wait_for(lambda: all_succeeded(jobs), timeout=SPREAD_S + 60, what="every job to succeed")

    # 0 lost, 0 duplicated: one execution per job, each reaching the target once.
    executions = list(Execution.objects.filter(schedule_id__in=jobs))
    assert len(executions) == JOBS and len({e.schedule_id for e in executions}) == JOBS
    calls = Counter(
        {k.lower(): v for k, v in r["headers"].items()}.get("x-execution-id")
        for r in ledger.requests
    )
    assert {str(e.id) for e in executions} <= set(calls), ledger.dump()[-3000:]
    twice = {eid: n for eid, n in calls.items() if n > 1}
    assert not twice, f"executions that reached the target more than once: {twice}"
    assert_no_epoch_shared_by_two_beats()
    fired_by = {e.fired_by for e in executions}
    assert len(fired_by) >= 2, f"every job fired by {fired_by}: the ranges never moved"
    # Every logical partition is covered exactly once by the lease ranges.
    covered = sorted(
        p for lo, hi in SchedulerPartition.objects.values_list("lo", "hi") for p in range(lo, hi)
    )
    assert covered == list(range(LOGICAL_PARTITIONS))
    # No schedule that was not due was rewritten by any of it.
    assert versions(idle) == before
    for proc in first + more[:1]:
        assert proc.alive(), proc.output()[-3000:]


@pytest.mark.usefixtures("empty_broker")
def test_recutting_the_ranges_fences_every_lease_and_rewrites_no_schedule(
    admin_principal: Principal, tenant: Tenant
) -> None:
    """`manage.py partition_ranges 4` under a running beat holding 16 ranges: its leases
    are fenced (epochs move past any it was granted), it takes the 4 new ranges at its
    next cycle — covering every logical partition — and fires under them; no schedule
    row changed."""
    idle = [
        str(
            schedule_to(
                admin_principal, "https://billing.internal/h", name=f"r{i}", cron="0 3 1 1 *"
            ).pk
        )
        for i in range(10)
    ]
    before = versions(idle)
    with running_beat("recut-beat", lookahead_s=0) as beat:
        beat.cycle()
        assert len(beat.owned) == settings.SCHEDULER_PARTITIONS
        granted = max(beat.owned.values())
        out = StringIO()
        call_command("partition_ranges", "4", stdout=out)
        assert f"{settings.SCHEDULER_PARTITIONS} ranges -> 4 ranges" in out.getvalue()
        beat.keeper.tick()  # the renewal is refused; the count of ranges is learnt
        assert beat.partitions.ranges == 4
        beat.cycle()
        assert sorted(beat.owned) == [0, 1, 2, 3]
        assert min(beat.owned.values()) > granted
        assert sorted(beat.covered) == list(range(LOGICAL_PARTITIONS))
        assert beat.counters.stale_writes_rejected >= 1
        job = schedule_to(
            admin_principal, "https://billing.internal/h", name="after", run_at=db_now()
        )
        beat.cycle()
        fired = Execution.objects.get(schedule=job)
        assert fired.fired_by == "recut-beat"
        assert fired.fired_epoch == partition_epochs()[job.partition]
    assert versions(idle) == before
    with pytest.raises(CommandError, match="1 to 1024"):
        call_command("partition_ranges", "0")
