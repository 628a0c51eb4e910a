"""`schedctl import django-celery-beat`: django-celery-beat's REAL schema (migrated into
a scratch database by a child process with its own models creating the rows), imported
from the database URL and from `dumpdata` of the same rows — the same definitions and
problems both ways, the listed runs equal to the platform's preview."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support import procs  # (not its test_database_url by name: pytest would collect it)
from tests.support.importing import ROOT, platform_runs, run_import, run_text

AFTER = datetime(2026, 3, 27, tzinfo=UTC)
AFTER_ARG = ["--after", "2026-03-27T00:00:00Z"]
TEMPLATE = (
    '{"type": "queue", "exchange": "billing.celery", "routing_key": "billing.{queue}",'
    ' "body": {"task": "{task}", "args": "{args}", "kwargs": "{kwargs}"}}'
)

# Runs in the child (DJANGO_SETTINGS_MODULE=tests.support.celery_beat_settings).
ROWS = r"""
import sys
from datetime import datetime, timezone
import django
django.setup()
from django.core.management import call_command
from django_celery_beat.models import (
    ClockedSchedule, CrontabSchedule, IntervalSchedule, PeriodicTask, SolarSchedule,
)
call_command("migrate", "django_celery_beat", verbosity=0)
london = CrontabSchedule.objects.create(
    minute="*/15", hour="9-17", day_of_week="mon-fri", day_of_month="*", month_of_year="*",
    timezone="Europe/London")
nightly = CrontabSchedule.objects.create(
    minute="0", hour="3", day_of_week="*", day_of_month="*", month_of_year="*",
    timezone="America/New_York")
both_days = CrontabSchedule.objects.create(
    minute="0", hour="9", day_of_week="1", day_of_month="1", month_of_year="*", timezone="UTC")
every = lambda n, p: IntervalSchedule.objects.create(every=n, period=p)
PeriodicTask.objects.create(name="sync reports", task="reports.sync", crontab=london,
                            args="[1, 2]", kwargs='{"full": true}', queue="reports")
PeriodicTask.objects.create(name="heartbeat", task="ops.ping", interval=every(5, "minutes"))
PeriodicTask.objects.create(name="rollup", task="stats.rollup", interval=every(2, "hours"))
PeriodicTask.objects.create(name="odd interval", task="stats.odd", interval=every(90, "minutes"))
PeriodicTask.objects.create(
    name="launch", task="ops.launch", one_off=True,
    clocked=ClockedSchedule.objects.create(clocked_time=datetime(2026, 5, 1, tzinfo=timezone.utc)))
PeriodicTask.objects.create(
    name="lights", task="ops.lights",
    solar=SolarSchedule.objects.create(event="sunset", latitude=52.37, longitude=4.89))
PeriodicTask.objects.create(name="nightly cleanup", task="ops.cleanup", crontab=nightly,
                            enabled=False)
PeriodicTask.objects.create(name="first monday", task="ops.monday", crontab=both_days)
PeriodicTask.objects.create(name="migrate once", task="ops.migrate", interval=every(1, "days"),
                            one_off=True, start_time=datetime(2026, 6, 1, 9, tzinfo=timezone.utc))
PeriodicTask.objects.create(name="expiring", task="ops.expiring", interval=every(10, "minutes"),
                            expires=datetime(2027, 1, 1, tzinfo=timezone.utc))
call_command("dumpdata", "django_celery_beat", output=sys.argv[1])
"""


@pytest.fixture(scope="module")
def beat_db(
    django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: Any
) -> Iterator[tuple[str, Path]]:
    """(URL of a scratch database with django-celery-beat's schema and rows, its dump)."""
    with django_db_blocker.unblock():
        base = procs.test_database_url()
        conninfo = procs.db_conninfo()
    name = base.rsplit("/", 1)[1] + "_celery_beat"
    url = base.rsplit("/", 1)[0] + "/" + name
    dump = tmp_path_factory.mktemp("beat") / "dump.json"
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        env = {
            "PATH": "/usr/bin:/bin",
            "DJANGO_SETTINGS_MODULE": "tests.support.celery_beat_settings",
            "CELERY_BEAT_DATABASE_URL": url,
            "PYTHONPATH": str(ROOT),
        }
        subprocess.run(
            [sys.executable, "-c", ROWS, str(dump)], env=env, cwd=ROOT, check=True, timeout=300
        )
        yield url, dump
    finally:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def imported(*source: str) -> tuple[int, dict[str, Any]]:
    code, doc, _ = run_import(
        ["django-celery-beat", *source, "--tz", "Europe/Amsterdam", "--target-template", TEMPLATE,
         *AFTER_ARG]
    )  # fmt: skip
    return code, doc


def test_database_and_dump_give_the_same_import(beat_db: tuple[str, Path]) -> None:
    url, dump = beat_db
    code, from_db = imported("--database-url", url)
    assert code == 4
    code2, from_dump = imported("--dump", str(dump))
    assert code2 == 4
    assert from_db["definitions"] == from_dump["definitions"]
    strip = [{k: v for k, v in p.items() if k != "source"} for p in from_db["problems"]]
    assert strip == [{k: v for k, v in p.items() if k != "source"} for p in from_dump["problems"]]

    defs = {d["name"]: d for d in from_db["definitions"]}
    assert list(defs) == [
        "sync reports", "heartbeat", "rollup", "nightly cleanup", "migrate once", "expiring",
    ]  # fmt: skip
    sync = defs["sync reports"]
    assert (sync["cron"], sync["timezone"]) == ("*/15 9-17 * * mon-fri", "Europe/London")
    assert sync["target"] == {
        "type": "queue",
        "exchange": "billing.celery",
        "routing_key": "billing.reports",
        "body": {"task": "reports.sync", "args": [1, 2], "kwargs": {"full": True}},
    }
    assert (defs["heartbeat"]["cron"], defs["heartbeat"]["timezone"]) == (
        "*/5 * * * *",
        "Europe/Amsterdam",  # interval tasks: the --tz (the app's CELERY_TIMEZONE)
    )
    assert defs["rollup"]["cron"] == "0 */2 * * *"
    # No queue on the task: Celery's default queue.
    assert defs["rollup"]["target"]["routing_key"] == "billing.celery"
    assert defs["nightly cleanup"]["paused"] is True
    assert defs["nightly cleanup"]["timezone"] == "America/New_York"
    assert defs["migrate once"]["run_at"] == "2026-06-01T09:00:00Z"
    assert "paused" not in sync

    reasons = {p["text"].split(" (")[0]: p["reason"] for p in from_db["problems"]}
    assert reasons["odd interval"] == (
        "interval 90 minutes has no cron equivalent (exact divisors of an hour or of a day only)"
    )
    assert reasons["launch"].startswith("clocked schedules are not imported")
    assert reasons["lights"].startswith("solar schedules")
    assert "celery runs on days matching both" in reasons["first monday"]
    assert reasons["expiring"].startswith("expires / expire_seconds is not imported")

    for d in from_db["definitions"]:
        if "cron" in d:
            assert d["next_runs"] == platform_runs(d["cron"], d["timezone"], AFTER), d["name"]
        else:
            assert d["next_runs"] == [d["run_at"]]


def test_unreachable_database_and_bad_dump_are_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "dump.json"
    bad.write_text('{"not": "a list"}')
    code, text = run_text(["django-celery-beat", "--dump", str(bad), "--target-template", TEMPLATE])
    assert code == 2 and "not a dumpdata file" in text
    code, text = run_text(
        ["django-celery-beat", "--database-url", "postgresql://u:hunter2@127.0.0.1:1/x",
         "--target-template", TEMPLATE]
    )  # fmt: skip
    assert code == 2 and "error: postgresql://u:***@127.0.0.1:1/x" in text
    assert "hunter2" not in text
