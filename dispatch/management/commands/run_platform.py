"""`make run`: migrate, make sure a demo tenant, admin and demo schedules exist,
then run web, beat, workers and the demo receiver as child processes until
Ctrl-C, which stops them all. How to log in is printed last, in a box, once the
console answers: the children start quietly (warnings and errors only)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.management import call_command, get_commands
from django.core.management.base import BaseCommand, CommandParser

from dispatch import demo as demo_data
from dispatch.queues import queues_of
from tenants.management.commands.bootstrap_demo import DemoAccess, ensure_demo


def box(lines: list[str]) -> str:
    width = max(len(line) for line in lines) + 4
    rule = "+" + "-" * width + "+"
    return "\n".join([rule, *(f"|  {line.ljust(width - 2)}|" for line in lines), rule])


class Command(BaseCommand):
    help = "Run the whole platform (web, beat, workers) in the foreground."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--bind",
            default=os.environ.get("WEB_BIND", "127.0.0.1:8000"),
            help="address:port of the console and API (env WEB_BIND)",
        )
        parser.add_argument(
            "--no-demo",
            action="store_true",
            help="skip the demo tenant, admin user, demo schedules and receiver",
        )
        parser.add_argument(
            "--demo-port",
            type=int,
            default=int(os.environ.get("DEMO_RECEIVER_PORT") or 0),
            help="loopback port of the demo receiver (env DEMO_RECEIVER_PORT; "
            "default: the one used last time if free, else any free port)",
        )
        parser.add_argument("--start-timeout", type=float, default=120)

    def handle(self, *args: Any, **opts: Any) -> None:
        call_command("migrate", interactive=False, verbosity=0)
        py = sys.executable
        celery = os.path.join(os.path.dirname(py), "celery")
        env = dict(os.environ)
        # The children's start-up banners and per-run INFO lines would bury the
        # login box; warnings and errors still show. LOG_LEVEL=INFO brings them back.
        env.setdefault("LOG_LEVEL", "WARNING")
        env["DJANGO_RUNSERVER_HIDE_WARNING"] = "true"
        # The issuer of the runs' identity tokens is where this web answers.
        env.setdefault("PLATFORM_URL", f"http://{opts['bind']}")
        celery_log = "INFO" if env["LOG_LEVEL"].upper() in ("DEBUG", "INFO") else "WARNING"
        if os.geteuid() == 0:
            # Containers and CI run as root; Celery's ten-line warning about it
            # is not news there.
            env.setdefault(
                "PYTHONWARNINGS", "ignore:You're running the worker with superuser privileges"
            )
        procs: dict[str, list[str]] = {}
        access: DemoAccess | None = None
        receiver = ""
        seeded: list[str] = []
        if not opts["no_demo"]:
            access = ensure_demo()
            port = demo_data.choose_port(access.tenant, opts["demo_port"])
            receiver = f"{demo_data.HOST}:{port}"
            # The demo receiver's exact address, and nothing else on loopback, gets
            # past the SSRF guard: here (saving the demo schedules), in the web
            # (editing them) and in the workers (calling them).
            settings.TARGET_TEST_ALLOW = [*settings.TARGET_TEST_ALLOW, receiver]
            env["TARGET_TEST_ALLOW"] = ",".join(settings.TARGET_TEST_ALLOW)
            env["DEMO_RECEIVER_URL"] = f"http://{receiver}"
            seeded = demo_data.seed(access.tenant, f"http://{receiver}")
            procs["demo-receiver"] = [py, "-m", "dispatch.demo", str(port)]
        procs["web"] = [py, "manage.py", "runserver", opts["bind"], "--noreload", "--skip-checks"]
        # The short pool's pool and size: WORKER_POOL=threads WORKER_CONCURRENCY=50 for
        # many I/O-bound HTTP callbacks in one process (docs/explanation/executions.md,
        # "Worker pools: prefork or threads"). The long
        # pool stays prefork: its commands are processes of their own.
        short_pool = env.get("WORKER_POOL", "prefork")
        short_concurrency = env.get("WORKER_CONCURRENCY", "2")
        for name, pool, concurrency in (
            ("short", short_pool, short_concurrency),
            ("long", "prefork", "1"),
        ):
            queues = ",".join(queues_of(name))
            procs[f"worker-{name}"] = [
                celery,
                "-A",
                "config",
                "--quiet",  # no banner
                "worker",
                "-Q",
                queues,
                "-n",
                f"{name}@%h",
                "--pool",
                pool,
                "--concurrency",
                concurrency,
                "--loglevel",
                celery_log,
            ]
        if "beat" in get_commands():
            procs["beat"] = [py, "manage.py", "beat"]
        running: dict[str, subprocess.Popen[bytes]] = {}
        stopping = False

        def stop(*_: Any) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        self.stdout.write(f"database migrated; starting {', '.join(procs)} ...")
        for line in seeded:
            self.stdout.write(f"demo: {line}")
        for name, cmd in procs.items():
            # Own process groups: one Ctrl-C here stops each child in order,
            # instead of every child racing the terminal's SIGINT. runserver's
            # stdout is only its banner; its errors and request log go to stderr.
            running[name] = subprocess.Popen(  # noqa: S603
                cmd,
                env=env,
                start_new_session=True,
                stdout=subprocess.DEVNULL if name == "web" else None,
            )
        try:
            if self._wait_for_web(opts["bind"], running, opts["start_timeout"], lambda: stopping):
                self.stdout.write(self._login_box(opts["bind"], access, receiver))
            else:
                stopping = True
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

    def _wait_for_web(
        self,
        bind: str,
        running: dict[str, subprocess.Popen[bytes]],
        timeout: float,
        stopping: Callable[[], bool],
    ) -> bool:
        host, _, port = bind.rpartition(":")
        if host in ("", "0", "0.0.0.0", "[::]"):  # noqa: S104 - a bind address, not a listen
            host = "127.0.0.1"
        url = f"http://{host}:{port}/healthz"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not stopping():
            for name, proc in running.items():
                if proc.poll() is not None:
                    self.stderr.write(f"{name} exited with {proc.returncode} while starting")
                    return False
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.3)
        if not stopping():
            self.stderr.write(f"the web did not answer {url} within {timeout:g} s")
        return False

    def _login_box(self, bind: str, access: DemoAccess | None, receiver: str) -> str:
        base = f"http://{bind}"
        lines = ["Scheduler is up.", ""]
        lines.append(f"Console  {base}/")
        if access is not None:
            lines.append(f"Log in   {access.username} / {access.password}")
            lines.append(f"         (kept in {access.cred_file})")
        lines.append(f"API      {base}/v1/   docs {base}/v1/docs")
        if access is not None:
            lines.append(f"Token    {access.token}")
            lines.append(f"         (tenant demo, admin; kept in {access.token_file})")
            lines.append("")
            lines.append("Demo     tenant demo: demo-heartbeat and demo-report succeed,")
            lines.append("         demo-failing gets a 503 and shows retries;")
            lines.append(f"         they call a demo receiver on {receiver}")
        lines += ["", "Ctrl-C stops everything."]
        return box(lines)
