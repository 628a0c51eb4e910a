"""The history's maintenance pass, in one place for the beat (hourly, the owner of
logical partition 0) and `python manage.py retention` (now):

1. the day partitions kept a week ahead (partitions.py);
2. the expired days archived, verified, detached and dropped (archive.py);
3. what lies before the first day partition purged row by row
   (dispatch/scheduler/retention.py), with the one-off jobs past their delete_after.

The beat runs the pass in a child process (`spawn`: `manage.py retention`), never in
its own loop: a day of a
million executions takes minutes to archive, and in the beat's process those minutes
would be the firing loop's (inline) or would contend for its interpreter lock (on a
thread). One pass at a time across the platform: a pass holds an advisory
lock, and a second one (a beat that took partition 0 over, or an operator's
`manage.py retention`) finds it taken and leaves the work to the first.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from django.conf import settings
from django.db import connection

from core.pg_urls import url_of
from dispatch.history import archive, partitions
from dispatch.history.objects import store_from_settings
from dispatch.scheduler import retention
from dispatch.sql import sql

# What the child must see as its parent sees it (a test's beat changes them in its
# own process; in a deployment they equal the environment anyway).
CHILD_SETTINGS = (
    "RETENTION_DAYS",
    "RETENTION_MISFIRE_HORIZON_S",
    "RETENTION_ARCHIVE_DIR",
    "HISTORY_ARCHIVE_URL",
    "HISTORY_ARCHIVE_S3_ENDPOINT",
    "HISTORY_ARCHIVE_S3_REGION",
    "HISTORY_ARCHIVE_DUTY",
)


# The lowest CPU priority: the pass is batch work with hours to spare, and on a
# machine the beats share, each slice of CPU it takes from them is a firing delay.
CHILD_NICE = 19


@dataclass
class Pass:
    created: list[str]
    days: list[archive.DayResult]
    purged: retention.PurgeResult


class PassRunning(Exception):
    """Another maintenance pass holds the lock: this one did nothing."""


def run(*, now: datetime, archive_dir: Path | None = None, batch: int = 1000) -> Pass:
    """One pass, unless another is running (PassRunning)."""
    if not sql.scalar("history_maintenance_try_lock"):
        raise PassRunning("another history maintenance pass is running")
    try:
        created = partitions.ensure_ahead(partitions.day_of(now))
        days = archive.archive_expired(now=now, store=store_from_settings())
        purged = retention.purge(now=now, batch=batch, archive_dir=archive_dir)
    finally:
        sql.scalar("history_maintenance_unlock")
    return Pass(created, days, purged)


def spawn() -> subprocess.Popen[bytes]:
    """A pass in a child process, on this process's database and settings; its log
    lines go to this process's standard error."""
    env = dict(os.environ)
    env["DATABASE_URL"] = url_of(connection.settings_dict)
    env.update({name: str(getattr(settings, name)) for name in CHILD_SETTINGS})
    root = str(Path(__file__).resolve().parents[2])
    env.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    # `manage.py retention`, by module, from the project's folder (`-m` puts the working
    # folder first on the path): the beat's own working folder need not be the project's.
    # Niced: the firing loops on this machine come first when the CPUs are short.
    return subprocess.Popen(  # noqa: S603 - this interpreter, a fixed command
        [sys.executable, "-m", "django", "retention", "--nice", str(CHILD_NICE)], env=env, cwd=root
    )
