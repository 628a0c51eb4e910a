"""`python manage.py retention`: the history's maintenance pass now — day partitions
kept ahead, expired days archived and dropped, what lies before them deleted (and
optionally archived as JSON lines) row by row (dispatch/history/maintenance.py).

Beats also run it every RETENTION_INTERVAL_S (the beat that owns partition 0, in a
child process); one pass runs at a time, so this one refuses while another runs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from dispatch.history import maintenance
from dispatch.services import db_now


class Command(BaseCommand):
    help = "Archive and drop expired days of execution history; delete what lies before them."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--batch", type=int, default=1000)
        parser.add_argument("--archive-dir", default=settings.RETENTION_ARCHIVE_DIR)
        parser.add_argument(
            "--nice",
            type=int,
            default=0,
            help="lower this process's CPU priority by N first (the beat's child uses 19)",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["nice"]:
            os.nice(opts["nice"])
        archive = Path(opts["archive_dir"]) if opts["archive_dir"] else None
        try:
            done = maintenance.run(now=db_now(), archive_dir=archive, batch=opts["batch"])
        except maintenance.PassRunning as exc:
            raise CommandError(f"{exc}: try again when it has finished") from None
        for name in done.created:
            self.stdout.write(f"created partition {name}")
        for day in done.days:
            if day.dropped:
                self.stdout.write(
                    f"archived and dropped {day.day}: {day.executions} executions,"
                    f" {day.events} events"
                )
            else:
                self.stdout.write(f"kept {day.day}: {day.waiting}")
        result = done.purged
        self.stdout.write(f"deleted {result.executions} executions and {result.events} events")
