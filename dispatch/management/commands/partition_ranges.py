"""`python manage.py partition_ranges N`: lease the 1,024 fixed logical partitions in N
ranges from now on (dispatch/partitioning.py).

Running beats lose their leases at their next fence or renewal (every epoch moves past
any granted before) and take the new ranges within a cycle or two; what they had
staged is loaded again by the new owners. No schedule or execution row is rewritten.
Set SCHEDULER_PARTITIONS=N on the beats too, so that a new installation's table (and
the log) agree; the table's count is what beats use."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from dispatch.models import SchedulerPartition
from dispatch.partitioning import LOGICAL_PARTITIONS
from dispatch.scheduler import store


class Command(BaseCommand):
    help = "Re-cut the logical partitions into N lease ranges (no schedule is rewritten)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("ranges", type=int, help=f"how many ranges, 1 to {LOGICAL_PARTITIONS}")

    def handle(self, *args: Any, **opts: Any) -> None:
        count = opts["ranges"]
        if not 1 <= count <= LOGICAL_PARTITIONS:
            raise CommandError(f"ranges must be 1 to {LOGICAL_PARTITIONS} (got {count})")
        before = SchedulerPartition.objects.count()
        epoch = store.recut_partitions(count=count)
        self.stdout.write(
            f"{before} ranges -> {count} ranges of the {LOGICAL_PARTITIONS} logical partitions"
            f" (every lease fenced, epoch {epoch}); beats take them within a lease"
        )
