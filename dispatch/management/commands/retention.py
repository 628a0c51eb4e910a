"""`python manage.py retention`: delete (optionally archive) expired execution history now.

Beats also run it every RETENTION_INTERVAL_S (the beat that owns partition 0)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from dispatch.scheduler import retention
from dispatch.services import db_now


class Command(BaseCommand):
    help = "Delete execution history older than the retention period (batched)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--batch", type=int, default=1000)
        parser.add_argument("--archive-dir", default=settings.RETENTION_ARCHIVE_DIR)

    def handle(self, *args: Any, **opts: Any) -> None:
        archive = Path(opts["archive_dir"]) if opts["archive_dir"] else None
        result = retention.purge(now=db_now(), batch=opts["batch"], archive_dir=archive)
        self.stdout.write(f"deleted {result.executions} executions and {result.events} events")
