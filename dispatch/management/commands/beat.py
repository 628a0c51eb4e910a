"""`python manage.py beat`: run one scheduler shard in the foreground."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from dispatch.scheduler.loop import Beat, BeatConfig


class Command(BaseCommand):
    help = "Run a beat (scheduler shard). Start as many as you like, on any machines."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", help="stable beat name (default: host-pid-random)")
        parser.add_argument("--lease-ttl", type=float, dest="lease_ttl_s")
        parser.add_argument("--cycle", type=float, dest="cycle_s")
        parser.add_argument("--lookahead", type=float, dest="lookahead_s")
        parser.add_argument("--batch", type=int)

    def handle(self, *args: Any, **opts: Any) -> None:
        config = BeatConfig.from_settings(
            **{k: opts.get(k) for k in ("name", "lease_ttl_s", "cycle_s", "lookahead_s", "batch")}
        )
        from config import telemetry

        telemetry.setup("beat")
        Beat(config).run()
