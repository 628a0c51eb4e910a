"""The history's maintenance pass, in one place for the beat (hourly, the owner of
logical partition 0) and `python manage.py retention` (now):

1. the day partitions kept a week ahead (partitions.py);
2. the expired days archived, verified, detached and dropped (archive.py);
3. what lies before the first day partition purged row by row
   (dispatch/scheduler/retention.py), with the one-off jobs past their delete_after.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from dispatch.history import archive, partitions
from dispatch.history.objects import store_from_settings
from dispatch.scheduler import retention


@dataclass
class Pass:
    created: list[str]
    days: list[archive.DayResult]
    purged: retention.PurgeResult


def run(*, now: datetime, archive_dir: Path | None = None, batch: int = 1000) -> Pass:
    created = partitions.ensure_ahead(partitions.day_of(now))
    days = archive.archive_expired(now=now, store=store_from_settings())
    purged = retention.purge(now=now, batch=batch, archive_dir=archive_dir)
    return Pass(created, days, purged)
