"""Fixed logical partitions leased in ranges (dispatch/partitioning.py).

Until now a schedule's partition was crc32(id) mod SCHEDULER_PARTITIONS (16 by
default), and each lease row was one of those partitions. From here on it is
crc32(id) mod 1,024, written once and never again, and each lease row is a range of
those partitions with its bounds (`lo`, `hi`). This migration:

1. gives every lease row its bounds, keeping the installation's count of rows (its
   ranges), and bumps every epoch with every lease cleared: a beat still running old
   code is fenced out at its next write (stop the beats before migrating: the
   upgrade guide says so);
2. recomputes every schedule's partition (batches of 10,000, by id);
3. copies it onto every execution that differs (the pending, sweep and lease scans
   of the beats filter executions by it).

Step 2 and 3 rewrite each row once; nothing rewrites them again: adding or removing
beats, or re-cutting the ranges, moves leases only. The SQL is inline (not the
named statements): a migration is history and must not change when they do.
"""

from __future__ import annotations

import zlib
from typing import Any

from django.db import migrations, models

LOGICAL = 1024  # dispatch.partitioning.LOGICAL_PARTITIONS, frozen here as history
BATCH = 10_000


def _recompute(cur: Any, modulus: int) -> None:
    """Every schedule's partition = crc32(id) mod `modulus`, then its executions'."""
    after = None
    while True:
        cur.execute(
            "SELECT id FROM dispatch_schedule WHERE %s::uuid IS NULL OR id > %s::uuid"
            " ORDER BY id LIMIT %s",
            [after, after, BATCH],
        )
        ids = [row[0] for row in cur.fetchall()]
        if not ids:
            break
        parts = [zlib.crc32(i.bytes) % modulus for i in ids]
        cur.execute(
            "UPDATE dispatch_schedule s SET partition = v.p"
            " FROM unnest(%s::uuid[], %s::int[]) AS v(id, p)"
            " WHERE s.id = v.id AND s.partition <> v.p",
            [ids, parts],
        )
        after = ids[-1]
    cur.execute(
        "UPDATE dispatch_execution e SET partition = s.partition FROM dispatch_schedule s"
        " WHERE s.id = e.schedule_id AND e.partition <> s.partition"
    )


def _fence_everyone(cur: Any) -> int:
    cur.execute(
        "UPDATE dispatch_schedulerpartition"
        " SET epoch = epoch + 1, owner = '', lease_expires_at = NULL"
    )
    cur.execute("SELECT count(*) FROM dispatch_schedulerpartition")
    ranges: int = cur.fetchone()[0]
    return ranges


def forwards(apps: Any, schema_editor: Any) -> None:
    with schema_editor.connection.cursor() as cur:
        ranges = _fence_everyone(cur)
        if ranges:
            cur.execute(
                "UPDATE dispatch_schedulerpartition"
                " SET lo = number * %s / %s, hi = (number + 1) * %s / %s",
                [LOGICAL, ranges, LOGICAL, ranges],
            )
        _recompute(cur, LOGICAL)


def backwards(apps: Any, schema_editor: Any) -> None:
    # The old code's partition: crc32(id) mod its SCHEDULER_PARTITIONS, one per lease row.
    with schema_editor.connection.cursor() as cur:
        _recompute(cur, _fence_everyone(cur) or 16)


class Migration(migrations.Migration):
    dependencies = [("dispatch", "0021_beatnode_standby")]

    operations = [
        migrations.AddField(
            model_name="schedulerpartition",
            name="lo",
            field=models.PositiveSmallIntegerField(db_default=0),
        ),
        migrations.AddField(
            model_name="schedulerpartition",
            name="hi",
            field=models.PositiveSmallIntegerField(db_default=0),
        ),
        migrations.RunPython(forwards, backwards),
    ]
