"""`make run`: migrate, make sure a demo tenant and admin exist, then run web,
beat and workers as child processes until Ctrl-C, which stops them all."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

from django.core.management import call_command, get_commands
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = "Run the whole platform (web, beat, workers) in the foreground."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--bind", default=os.environ.get("WEB_BIND", "127.0.0.1:8000"))
        parser.add_argument(
            "--no-demo", action="store_true", help="skip the demo tenant and admin user"
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        call_command("migrate", interactive=False, verbosity=0)
        self.stdout.write("database migrated")
        if not opts["no_demo"]:
            call_command("bootstrap_demo", stdout=self.stdout)
        py = sys.executable
        celery = os.path.join(os.path.dirname(py), "celery")
        procs: dict[str, list[str]] = {
            "web": [py, "manage.py", "runserver", opts["bind"], "--noreload"],
            "worker-short": [
                celery,
                "-A",
                "config",
                "worker",
                "-Q",
                "high.short,default.short,low.short",
                "-n",
                "short@%h",
                "--concurrency",
                "2",
                "--loglevel",
                "INFO",
            ],
            "worker-long": [
                celery,
                "-A",
                "config",
                "worker",
                "-Q",
                "high.long,default.long,low.long",
                "-n",
                "long@%h",
                "--concurrency",
                "1",
                "--loglevel",
                "INFO",
            ],
        }
        if "beat" in get_commands():
            procs["beat"] = [py, "manage.py", "beat"]
        running: dict[str, subprocess.Popen[bytes]] = {}
        stopping = False

        def stop(*_: Any) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        for name, cmd in procs.items():
            # Own process groups: one Ctrl-C here stops each child in order,
            # instead of every child racing the terminal's SIGINT.
            running[name] = subprocess.Popen(cmd, start_new_session=True)  # noqa: S603
            self.stdout.write(f"started {name} (pid {running[name].pid})")
        host = opts["bind"]
        self.stdout.write(
            self.style.SUCCESS(
                f"platform up: console http://{host}/  API http://{host}/v1/  docs http://{host}/v1/docs  — Ctrl-C stops all"
            )
        )
        try:
            while not stopping:
                for name, proc in running.items():
                    if proc.poll() is not None:
                        self.stderr.write(
                            f"{name} exited with {proc.returncode}; stopping the platform"
                        )
                        stopping = True
                time.sleep(0.5)
        finally:
            for proc in running.values():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 30
            for proc in running.values():
                remaining = max(0.1, deadline - time.monotonic())
                try:
                    proc.wait(remaining)
                except subprocess.TimeoutExpired:
                    proc.kill()
            self.stdout.write("platform stopped")
