"""Real processes for tests: beats, workers and HTTP receivers started as
subprocesses against the test database and the real broker."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection

from core import pg_urls
from tests.support.net import free_port

ROOT = Path(__file__).resolve().parents[2]


def test_database_url() -> str:
    """DATABASE_URL of the database pytest-django created (test_<name>), on every
    host of a multi-host DATABASE_URL."""
    return pg_urls.url_of(connection.settings_dict)


def db_conninfo() -> str:
    """psycopg conninfo of the test database, for connections of a test's own threads."""
    import psycopg

    s = connection.settings_dict
    return psycopg.conninfo.make_conninfo(
        dbname=s["NAME"],
        user=s["USER"] or None,
        password=s["PASSWORD"] or None,
        host=s["HOST"] or None,
        port=str(s["PORT"]) if s["PORT"] else None,
    )


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["DATABASE_URL"] = test_database_url()
    env["CELERY_BROKER_URL"] = settings.CELERY_BROKER_URL
    env["REDIS_URL"] = settings.REDIS_URL
    env["DJANGO_SETTINGS_MODULE"] = "config.settings"
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def manage(*args: str, url: str, code: str = "") -> str:
    """`manage.py` against the database `url` (`shell -c code` when `code` is given): its
    stdout; an AssertionError with its output when it fails."""
    cmd = [sys.executable, "manage.py", *args] + (["-c", code] if code else [])
    env = child_env(DATABASE_URL=url)
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    if out.returncode:
        raise AssertionError(f"{' '.join(args)} failed:\n{out.stdout[-3000:]}{out.stderr[-3000:]}")
    return out.stdout


class Proc:
    """A child process with its output captured to a file, stoppable and pausable."""

    def __init__(self, name: str, cmd: list[str], env: dict[str, str], log_dir: Path) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.proc.wait(10)

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal(signal.SIGCONT)

    def stop(self, timeout: float = 20) -> int | None:
        if self.alive():
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()
        return self.proc.returncode

    def output(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")


@contextlib.contextmanager
def server_data_dir(prefix: str = "sched-") -> Iterator[Path]:
    """A DATA_DIR for embedded servers of a test's own, outside pytest's basetemp:
    every pytest session resets /tmp/pytest-of-<user> to 0700, and the embedded
    PostgreSQL runs as its own user when started as root, so under pytest's
    folder it may lose access to its data directory mid-test."""
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(prefix=prefix))
    base.chmod(0o755)
    try:
        yield base / "data"
    finally:
        shutil.rmtree(base, ignore_errors=True)


def wait_for(
    predicate: Callable[[], Any], timeout: float = 30, interval: float = 0.1, what: str = ""
) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")


@contextlib.contextmanager
def processes(log_dir: Path) -> Iterator[Callable[..., Proc]]:
    """Start processes with `start(name, cmd, **env)`; all are stopped on exit."""
    started: list[Proc] = []

    def start(name: str, cmd: list[str], **env: str) -> Proc:
        proc = Proc(name, cmd, child_env(**env), log_dir)
        started.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in started:
            proc.stop()


def beat_cmd(*args: str) -> list[str]:
    return [sys.executable, "manage.py", "beat", *args]


def worker_cmd(
    queues: str = "high.short,default.short,low.short", concurrency: int = 2, name: str = "w1"
) -> list[str]:
    from bench.procs import worker_argv

    return worker_argv(queues, concurrency, name)


class WebServer:
    """gunicorn serving the project on a free loopback port (threads, so requests really overlap)."""

    def __init__(
        self, start: Callable[..., Proc], name: str = "web", *, port: int = 0, **env: str
    ) -> None:
        # `port`: one chosen beforehand, when the server's own settings must name its URL.
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = start(
            name,
            [
                sys.executable,
                "-m",
                "gunicorn",
                "config.wsgi:application",
                "--bind",
                f"127.0.0.1:{self.port}",
                "--workers",
                env.pop("WEB_WORKERS", "2"),
                "--worker-class",
                "gthread",
                "--threads",
                env.pop("WEB_THREADS", "16"),
            ],
            **env,
        )
        wait_for(self._up, timeout=60, interval=0.2, what=f"{name} to answer")

    def _up(self) -> bool:
        import urllib.request

        if not self.proc.alive():
            raise AssertionError(f"{self.proc.name} exited:\n{self.proc.output()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as res:
                return bool(res.status == 200)
        except OSError:
            return False

    def request(
        self, method: str, path: str, *, headers: dict[str, str] | None = None, body: bytes = b""
    ) -> tuple[int, dict[str, str], bytes]:
        """One request on its own connection: (status, headers, body)."""
        import http.client

        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(method, path, body=body or None, headers=headers or {})
            res = conn.getresponse()
            return res.status, {k.lower(): v for k, v in res.getheaders()}, res.read()
        finally:
            conn.close()
