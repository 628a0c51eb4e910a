"""The benchmarks' child processes: beats and workers started as real processes
(with the bench's own servers in their environment), stopped with their process
group whatever happens, and the bounded waits for them to be ready, share the
partitions or publish. Apart from `common.py` (figures, tenants, rows made in SQL)
so that what starts and stops processes is in one place; tests start workers with
`worker_argv` too."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection

from bench.common import BENCH_QUEUE, BenchError, drain_queued, fetchall, purge_queues, wait_until
from dispatch.models import BeatNode, SchedulerPartition


def child_env(**extra: str) -> dict[str, str]:
    """The bench's own servers for every child, whatever the parent's environment said."""
    env = dict(os.environ)
    env.update(
        {
            "DATABASE_URL": settings.DATABASE_URL,
            "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
            "REDIS_URL": settings.REDIS_URL,
            "DJANGO_SETTINGS_MODULE": os.environ.get("DJANGO_SETTINGS_MODULE", "config.settings"),
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra)
    return env


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM the process group (beats release partitions, workers finish); SIGKILL if it lingers."""
        if self.alive():
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.proc.wait(10)
        # Pool children of a Celery worker may outlive their parent by an instant.
        self.signal(signal.SIGKILL)


class Children:
    """Start child processes with `start(name, argv, **env)`; all are stopped on exit, always."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.started: list[Child] = []
        self.log_dir = Path(tempfile.mkdtemp(prefix=f"bench-{label}-"))
        self._logs: list[Any] = []

    def start(self, name: str, argv: list[str], **env: str) -> Child:
        log_path = self.log_dir / f"{name}.log"
        log = open(log_path, "wb")  # noqa: SIM115 - closed in __exit__
        self._logs.append(log)
        proc = subprocess.Popen(  # noqa: S603 - our own interpreter and entry points
            argv,
            cwd=settings.BASE_DIR,
            env=child_env(**env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        child = Child(name, proc, log_path)
        self.started.append(child)
        return child

    def __enter__(self) -> Children:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        for child in self.started:
            child.stop()
        for log in self._logs:
            log.close()
        if exc_type is None:
            shutil.rmtree(self.log_dir, ignore_errors=True)
        else:
            sys.stderr.write(f"bench {self.label}: child logs kept in {self.log_dir}\n")


def wait_published(tenant_pk: int, n: int, procs: list[Any], deadline: float) -> None:
    """Until `n` executions of the tenant are published (or the deadline): nothing consumes
    them, so queued rows are marked done and the bench queue purged as workers would."""
    last_purge = time.monotonic()
    while True:
        drain_queued(tenant_pk)
        if time.monotonic() - last_purge > 5:
            purge_queues(BENCH_QUEUE)
            last_purge = time.monotonic()
        published = fetchall(
            "SELECT count(*) FROM dispatch_execution WHERE tenant_id = %(t)s AND enqueued_at IS NOT NULL",
            {"t": tenant_pk},
        )[0][0]
        if published >= n or time.monotonic() > deadline:
            return
        for proc in procs:
            if not proc.alive():
                raise BenchError(f"beat {proc.name} exited:\n{proc.output()[-3000:]}")
        time.sleep(0.5)


def beat_argv(name: str, *extra: str) -> list[str]:
    return [sys.executable, "manage.py", "beat", "--name", name, *extra]


def worker_argv(queues: str, concurrency: int, name: str) -> list[str]:
    """The project's short worker pool command line (tests start workers with it too)."""
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "config",
        "worker",
        "-Q",
        queues,
        "-n",
        f"{name}@%h",
        "--pool",
        "prefork",
        "--concurrency",
        str(concurrency),
        "--loglevel",
        "INFO",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
    ]


def wait_worker_ready(child: Child, timeout: float = 60) -> None:
    def ready() -> bool:
        if not child.alive():
            raise BenchError(f"worker {child.name} exited:\n{child.output()[-3000:]}")
        return " ready." in child.output()

    wait_until(ready, timeout=timeout, what=f"worker {child.name} to be ready")


def wait_for_beats(children: list[Child], names: list[str], timeout: float = 60) -> None:
    """Until the named beats (and only they) hold every partition, sharing them."""

    def split() -> bool:
        for child in children:
            if not child.alive():
                raise BenchError(f"beat {child.name} exited:\n{child.output()[-3000:]}")
        owners = list(
            SchedulerPartition.objects.filter(number__lt=settings.SCHEDULER_PARTITIONS)
            .exclude(owner="")
            .values_list("owner", flat=True)
        )
        return len(owners) >= settings.SCHEDULER_PARTITIONS and set(owners) == set(names)

    wait_until(split, timeout=timeout, what=f"beats {', '.join(names)} to share every partition")


def lease_all_partitions(beat: Any, timeout: float = 30) -> None:
    """An in-process beat holding every partition (leases of stopped beats expire within the TTL)."""

    def all_owned() -> bool:
        beat.maintain_leases()
        return len(beat.owned) == settings.SCHEDULER_PARTITIONS

    wait_until(all_owned, timeout=timeout, what=f"beat {beat.cfg.name} to lease every partition")


def end_beat_session() -> None:
    """After an in-process beat: a new connection for the bench.

    The beat set statement_timeout (30 s) and a short idle-in-transaction timeout
    on the connection it shared with the bench; bulk inserts and deletes of
    millions of rows must not inherit them.
    """
    connection.close()


def forget_beats(names: list[str]) -> None:
    """The BeatNode rows of the bench's own (stopped) beats."""
    BeatNode.objects.filter(name__in=names).delete()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def rss_mb(pid: int) -> dict[str, float]:
    """VmRSS (now) and VmHWM (peak) of a process, in MiB."""
    out: dict[str, float] = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            key = line.split(":", 1)[0]
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(line.split()[1]) / 1024
    return out
