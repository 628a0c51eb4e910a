"""Logical partitions: fixed for an installation's life, leased by beats in ranges.

Every schedule (and each of its executions) belongs to one of LOGICAL_PARTITIONS
partitions, a hash of its id, written once when it is created and never again. Beats
do not lease partitions one by one: they lease SCHEDULER_PARTITIONS *ranges*, each a
contiguous run of logical partitions (range k of R covers [k·L/R, (k+1)·L/R)). A
range's row in dispatch_schedulerpartition carries the lease and the fencing epoch,
so a fence locks one row per range, however many partitions it covers.

Adding or removing beats moves ranges between them (under the epochs, as before);
changing the number of ranges re-cuts the same logical partitions: neither rewrites a
schedule. Only the logical count is fixed, as a cluster's shard count is in systems
that partition this way: 1,024 leaves room for that many beats, or cells
(docs/explanation/cells.md), while a beat's scans ask for its partitions by value
(an index descent each, about 2 µs), which keeps it small.
"""

from __future__ import annotations

import zlib
from uuid import UUID

LOGICAL_PARTITIONS = 1024


def partition_for(schedule_id: UUID) -> int:
    # By a hash of the id, not by time, so a top-of-hour burst is spread across every
    # beat rather than landing on one.
    return zlib.crc32(schedule_id.bytes) % LOGICAL_PARTITIONS
