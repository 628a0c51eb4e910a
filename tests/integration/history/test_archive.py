"""Retention as archive, detach, drop (dispatch/history/archive.py), against a real
S3-compatible server (moto, a subprocess) and the filesystem store: every row of an
expired day readable back from the store (counts and SHA-256), the day partitions
gone from the database, the lower catch-all grown over them, an archived execution
found for its tenant only, and a day with a run still going kept whole."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings

from dispatch.explain import explain
from dispatch.history import archive, maintenance, partitions
from dispatch.history.objects import FileStore, ObjectStore, S3Store
from dispatch.models import ArchivedDay, Execution, ExecutionEvent, Schedule
from dispatch.scheduler import retention
from dispatch.states import ExplainCode
from tenants.roles import Principal
from tests.conftest import make_principal
from tests.support.beat_support import running_beat
from tests.support.rows import execution_row
from tests.support.s3 import CREDENTIALS
from tests.support.worker_support import db_now, make_schedule

pytestmark = pytest.mark.django_db(transaction=True)

TARGET = {"type": "http", "url": "https://billing.internal/h"}
PER_DAY = 25


@pytest.fixture(params=["file", "s3"])
def store(request: Any, tmp_path: Path) -> Iterator[ObjectStore]:
    if request.param == "file":
        yield FileStore(tmp_path / "archive")
        return
    endpoint = request.getfixturevalue("moto_endpoint")
    s3 = S3Store(f"history-{tmp_path.name.lower()[-20:]}", endpoint_url=endpoint, **CREDENTIALS)
    s3.ensure_bucket()
    yield s3


def fill(schedule: Schedule, start: datetime, *, state: str = "succeeded") -> list[Execution]:
    """PER_DAY executions from `start` a minute apart, each with two events."""
    made = []
    for i in range(PER_DAY):
        at = start + timedelta(minutes=i)
        execution = execution_row(schedule, at, state=state, status_code=200)
        for kind in ("claimed", "attempt_succeeded"):
            ExecutionEvent.objects.create(
                tenant_id=schedule.tenant_id,
                schedule=schedule,
                execution=execution,
                at=at + timedelta(seconds=1),
                kind=kind,
                message=f"{kind} {i}",
                data={"n": i},
            )
        made.append(execution)
    return made


def in_database(day_start: datetime) -> dict[str, str]:
    """The rows of one day still in the database: count and digest per table."""
    found = {}
    with connection.cursor() as cur:
        for table, key in (
            ("dispatch_execution", "scheduled_for"),
            ("dispatch_executionevent", "at"),
        ):
            cur.execute(
                f"SELECT count(*), md5(string_agg(row_to_json(t)::text, E'\\n' ORDER BY t.id))"  # noqa: S608
                f" FROM {table} t WHERE {key} >= %s AND {key} < %s",
                [day_start, day_start + timedelta(days=1)],
            )
            found[table] = cur.fetchone()
    return found


def lines(store: ObjectStore, key: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in gzip.decompress(store.get(key)).splitlines()]


@override_settings(RETENTION_DAYS=1, RETENTION_MISFIRE_HORIZON_S=0)
def test_an_expired_day_is_archived_verified_and_dropped(
    store: ObjectStore, admin_principal: Principal, other_tenant: Any
) -> None:
    mine = make_schedule(admin_principal, TARGET, name="nightly", cron="* * * * *")
    theirs = make_schedule(make_principal(other_tenant), TARGET, name="theirs")
    today = partitions.day_start(partitions.day_of(db_now()))
    tomorrow = today + timedelta(days=1)
    kept_mine = fill(mine, tomorrow + timedelta(hours=1))
    gone_mine = fill(mine, today + timedelta(hours=1))
    gone_theirs = fill(theirs, today + timedelta(hours=2))
    before = in_database(today)
    # Its executions, their events and the two schedules' own "created" events.
    assert before["dispatch_execution"][0] == 2 * PER_DAY
    assert before["dispatch_executionevent"][0] == 4 * PER_DAY + 2

    # Two days later, with one day of retention: today has expired, tomorrow not yet.
    results = archive.archive_expired(now=tomorrow + timedelta(days=1, hours=12), store=store)

    assert [(r.day, r.archived, r.dropped) for r in results] == [(today.date(), True, True)]
    assert (results[0].executions, results[0].events) == (2 * PER_DAY, 4 * PER_DAY + 2)
    assert in_database(today) == {
        "dispatch_execution": (0, None),
        "dispatch_executionevent": (0, None),
    }
    held = [p.day for p in partitions.days(partitions.EXECUTIONS)]
    assert today.date() not in held and tomorrow.date() in held
    assert Execution.objects.filter(id__in=[e.id for e in kept_mine]).count() == PER_DAY

    # Every archived row readable back: the manifest's counts and checksums hold.
    record = ArchivedDay.objects.get(day=today.date())
    assert record.dropped_at is not None and record.manifest == store.url(
        archive.manifest_key(today.date())
    )
    manifest = json.loads(store.get(archive.manifest_key(today.date())))
    assert sorted((f["table"], f["rows"]) for f in manifest["files"]) == sorted(
        [("dispatch_execution", PER_DAY)] * 2 + [("dispatch_executionevent", 2 * PER_DAY + 1)] * 2
    )
    for entry in manifest["files"]:
        content = gzip.decompress(store.get(entry["key"]))
        assert hashlib.sha256(content).hexdigest() == entry["sha256"]
    archived_ids = {
        row["id"]
        for t in (mine.tenant_id, theirs.tenant_id)
        for row in lines(store, archive.file_key(partitions.EXECUTIONS, today.date(), t))
    }
    assert archived_ids == {str(e.id) for e in gone_mine + gone_theirs}

    # Found for its own tenant, with its timeline; never for another tenant.
    found = archive.find_execution(store, tenant_id=mine.tenant_id, execution_id=gone_mine[3].id)
    assert found is not None and found.execution["status_code"] == 200
    assert [e["kind"] for e in found.events] == ["claimed", "attempt_succeeded"]
    assert found.location == store.url(
        archive.file_key(partitions.EXECUTIONS, today.date(), mine.tenant_id)
    )
    assert (
        archive.find_execution(store, tenant_id=theirs.tenant_id, execution_id=gone_mine[3].id)
        is None
    )

    # The explainer says where that day's decisions went, not that nothing happened.
    answer = explain(schedule=mine, at=gone_mine[3].scheduled_for)
    assert answer.code == ExplainCode.ARCHIVED, answer.sentence
    assert record.manifest in answer.sentence

    # The dropped day still has a home: the lower catch-all reaches up to tomorrow,
    # and the row-level purge removes what lands there once it is expired.
    late = execution_row(mine, today + timedelta(hours=5), state="succeeded")
    with connection.cursor() as cur:
        cur.execute(
            "SELECT tableoid::regclass::text FROM dispatch_execution WHERE id = %s", [late.id]
        )
        assert cur.fetchone()[0] == "dispatch_execution_before"
    purged = retention.purge(now=tomorrow + timedelta(days=1, hours=12))
    assert purged.executions == 1 and not Execution.objects.filter(id=late.id).exists()
    assert Execution.objects.filter(id__in=[e.id for e in kept_mine]).count() == PER_DAY

    # A second pass has nothing left to do for that day.
    again = archive.archive_expired(now=tomorrow + timedelta(days=1, hours=12), store=store)
    assert again == []


@override_settings(RETENTION_DAYS=1, RETENTION_MISFIRE_HORIZON_S=0)
def test_a_day_with_a_run_still_going_stays_whole(
    tmp_path: Path, admin_principal: Principal
) -> None:
    store = FileStore(tmp_path / "archive")
    schedule = make_schedule(admin_principal, TARGET)
    today = partitions.day_start(partitions.day_of(db_now()))
    fill(schedule, today + timedelta(hours=1))
    execution_row(schedule, today + timedelta(hours=3), state="running")
    before = in_database(today)

    results = archive.archive_expired(now=today + timedelta(days=2, hours=12), store=store)

    assert [(r.archived, r.dropped) for r in results] == [(False, False)]
    assert results[0].waiting == "1 of its executions are not final yet"
    assert in_database(today) == before
    assert store.keys() == [] and not ArchivedDay.objects.exists()
    assert today.date() in [p.day for p in partitions.days(partitions.EXECUTIONS)]


def test_the_beat_that_owns_partition_zero_retires_expired_days(
    tmp_path: Path, admin_principal: Principal, settings: Any
) -> None:
    """No external cron: the beat's own maintenance step archives and drops the day."""
    # All through the `settings` fixture: mixed with an override_settings decorator,
    # its teardown put the decorator's values back for the rest of the worker's tests.
    settings.RETENTION_DAYS = 1
    settings.RETENTION_MISFIRE_HORIZON_S = 0
    settings.HISTORY_ARCHIVE_URL = str(tmp_path / "archive")
    settings.RETENTION_INTERVAL_S = 0
    schedule = make_schedule(admin_principal, TARGET)
    old_day = partitions.day_of(db_now()) - timedelta(days=3)
    partitions.reopen_days(old_day)
    gone = fill(schedule, partitions.day_start(old_day) + timedelta(hours=6))

    with running_beat("history-beat", lookahead_s=0) as beat:
        # The first cycle's sweep starts the pass: in a child process of the beat, on
        # the beat's settings; one at a time.
        beat.cycle()
        assert 0 in beat.owned and beat.maintenance is not None
        assert beat.maybe_retention() == 0
        # The child ran at the lowest CPU priority: read off the finished process before
        # it is reaped (WNOWAIT leaves it a zombie, whose /proc entry still answers).
        pid = beat.maintenance.pid
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        assert nice_of(pid) == maintenance.CHILD_NICE
        assert beat.maintenance.wait(120) == 0

    assert not Execution.objects.filter(id__in=[e.id for e in gone]).exists()
    record = ArchivedDay.objects.get(day=old_day)
    assert record.executions == PER_DAY and record.dropped_at is not None
    store = FileStore(tmp_path / "archive")
    assert (
        len(lines(store, archive.file_key(partitions.EXECUTIONS, old_day, schedule.tenant_id)))
        == PER_DAY
    )
    # The empty days after it expired too, and went the same way; the kept ones stay.
    held = [p.day for p in partitions.days(partitions.EXECUTIONS)]
    assert held[0] == partitions.day_of(db_now()) - timedelta(days=1)


def nice_of(pid: int) -> int:
    """A process's nice value, from /proc/<pid>/stat (field 19, counted after the
    command's closing parenthesis, which may hold spaces)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])


def test_a_day_is_fetched_in_memory_not_through_temporary_files(
    tmp_path: Path, admin_principal: Principal
) -> None:
    """PostgreSQL gathers a FETCH's whole answer before sending it and spills it to a
    temporary file past work_mem: the archive's fetches must stay under it (5,000 rows
    a fetch wrote every one to disk, on the disk the firing path's commits flush to).
    Here work_mem is 1 MB and temporary files are refused outright, and a day of 3,000
    executions (about 2.5 MB of JSON lines) is archived whole."""
    schedule = make_schedule(admin_principal, TARGET)
    today = partitions.day_start(partitions.day_of(db_now()))
    rows = 3000
    with connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO dispatch_execution (id, schedule_id, tenant_id, scheduled_for, due_at,
                                            trigger, attempt, state, fencing_token)
            SELECT gen_random_uuid(), %(s)s, %(t)s, %(at)s + g * interval '1 second',
                   %(at)s + g * interval '1 second', 'cron', 1, 'succeeded', 0
            FROM generate_series(1, %(n)s) AS g
            """,
            {
                "s": schedule.id,
                "t": schedule.tenant_id,
                "at": today + timedelta(hours=1),
                "n": rows,
            },
        )
        cur.execute("SELECT sum(length(row_to_json(e)::text)) FROM dispatch_execution e")
        assert cur.fetchone()[0] > 2 * 1024 * 1024  # more than work_mem, twice over
        cur.execute("SET work_mem = '1MB'")
        cur.execute("SET temp_file_limit = 0")
    store = FileStore(tmp_path / "archive")
    try:
        record = archive.archive_day(today.date(), store, archive.DayResult(today.date()))
    finally:
        with connection.cursor() as cur:
            cur.execute("RESET work_mem")
            cur.execute("RESET temp_file_limit")

    assert record.executions == rows
    key = archive.file_key(partitions.EXECUTIONS, today.date(), schedule.tenant_id)
    assert len(lines(store, key)) == rows
