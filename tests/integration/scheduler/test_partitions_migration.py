"""Migration dispatch.0022 (fixed logical partitions) on a populated database: every
schedule and execution kept with its partition recomputed (crc32 mod 1,024, its
executions following it), the 16 lease rows turned into 16 ranges covering every
logical partition once, every epoch bumped with its lease cleared (a beat of the old
code is fenced out), and a beat of the new code then fires every due schedule."""

from __future__ import annotations

import hashlib
import uuid
import zlib
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.db.models import OuterRef, Subquery

from dispatch.models import Execution, Schedule, SchedulerPartition
from dispatch.partitioning import LOGICAL_PARTITIONS
from tenants.models import Tenant
from tests.support.beat_support import running_beat
from tests.support.migrations import migrate_to_latest, schema_at
from tests.support.worker_support import db_now

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("empty_broker")]

BEFORE = [("dispatch", "0021_beatnode_standby")]
OLD_P = 16
SCHEDULES = 300


@pytest.fixture
def before_ranges() -> Iterator[Any]:
    with schema_at(BEFORE) as apps:
        yield apps


def checksum() -> tuple[int, int, str]:
    """Counts and a digest of every schedule's and execution's identity and content
    (all but the partition column, which the migration rewrites)."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*), md5(string_agg(id::text || name || coalesce(next_run_at::text, '')"
            " || target::text, ',' ORDER BY id)) FROM dispatch_schedule"
        )
        schedules, s_md5 = cur.fetchone()
        cur.execute(
            "SELECT count(*), md5(string_agg(id::text || schedule_id::text || state"
            " || scheduled_for::text, ',' ORDER BY id)) FROM dispatch_execution"
        )
        executions, e_md5 = cur.fetchone()
    return schedules, executions, hashlib.sha256(f"{s_md5}{e_md5}".encode()).hexdigest()


def test_the_migration_keeps_every_row_and_every_schedule_firing(
    before_ranges: Any, tenant: Tenant
) -> None:
    old_schedule = before_ranges.get_model("dispatch", "Schedule")
    old_execution = before_ranges.get_model("dispatch", "Execution")
    old_partition = before_ranges.get_model("dispatch", "SchedulerPartition")
    now = db_now()
    due = now - timedelta(seconds=1)
    ids = [uuid.uuid4() for _ in range(SCHEDULES)]
    old_schedule.objects.bulk_create(
        old_schedule(
            id=sid,
            tenant_id=tenant.pk,
            name=f"s{i}",
            kind="once",
            run_at=due,
            # A third already fired (their execution exists), the rest due now.
            next_run_at=None if i % 3 == 0 else due,
            target={"type": "http", "url": "https://billing.internal/h"},
            retry={},
            partition=zlib.crc32(sid.bytes) % OLD_P,
        )
        for i, sid in enumerate(ids)
    )
    old_execution.objects.bulk_create(
        old_execution(
            schedule_id=sid,
            tenant_id=tenant.pk,
            partition=zlib.crc32(sid.bytes) % OLD_P,
            scheduled_for=due,
            due_at=due,
            state="succeeded",
        )
        for i, sid in enumerate(ids)
        if i % 3 == 0
    )
    # The old code's leases: one row per partition, held by a running beat.
    old_partition.objects.bulk_create(
        old_partition(
            number=n, owner="old-beat", epoch=5, lease_expires_at=now + timedelta(hours=1)
        )
        for n in range(OLD_P)
    )
    before = checksum()

    migrate_to_latest()

    assert checksum() == before, "a row was lost or changed beyond its partition"
    for s in Schedule.objects.filter(id__in=ids):
        assert s.partition == zlib.crc32(s.id.bytes) % LOGICAL_PARTITIONS
    assert not Execution.objects.exclude(partition=models_partition()).exists()
    ranges = list(SchedulerPartition.objects.order_by("number"))
    assert [(r.number, r.owner, r.epoch, r.lease_expires_at) for r in ranges] == [
        (n, "", 6, None) for n in range(OLD_P)
    ]
    assert [p for r in ranges for p in range(r.lo, r.hi)] == list(range(LOGICAL_PARTITIONS))

    # The new code's beat takes the ranges and fires every schedule that was due.
    with running_beat("new-beat", lookahead_s=0) as beat:
        beat.cycle()
        assert len(beat.owned) == OLD_P
    fired = Execution.objects.filter(schedule_id__in=ids).values_list("schedule_id", flat=True)
    assert sorted(map(str, fired)) == sorted(map(str, ids))


def models_partition() -> Subquery:
    """Each execution's partition as its schedule's (an expression for exclude())."""
    return Subquery(Schedule.objects.filter(id=OuterRef("schedule_id")).values("partition")[:1])
