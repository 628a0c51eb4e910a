"""The history's day partitions put back as a fresh test database has them (from
today on, everything older in the lower catch-all), for tests that carve out,
archive or drop days: one test's layout must not decide what the next one's
retention finds expired."""

from __future__ import annotations

import tempfile
from datetime import timedelta
from pathlib import Path

from dispatch.history import archive, partitions
from dispatch.history.objects import FileStore
from dispatch.models import Execution, ExecutionEvent
from tests.support.worker_support import db_now


def restore_days() -> None:
    today = partitions.day_of(db_now())
    with tempfile.TemporaryDirectory(prefix="restore-days-") as folder:
        store = FileStore(Path(folder))
        for held in partitions.days(partitions.EXECUTIONS):
            if held.day >= today:
                break
            start = partitions.day_start(held.day)
            end = start + timedelta(days=1)
            ExecutionEvent.objects.filter(at__gte=start, at__lt=end).delete()
            Execution.objects.filter(scheduled_for__gte=start, scheduled_for__lt=end).delete()
            archive.retire_day(held.day, store)
    partitions.reopen_days(today)
