"""Migration dispatch.0023 (history partitioned by day) on a populated database:
every execution and event kept, column for column (counts and a digest of every
row's JSON before and after), each in the partition of its day or in a catch-all,
the constraints that make firing idempotent still enforced, and the way back to
plain tables keeping every row too."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction

from dispatch.history import ids
from dispatch.history.partitions import violates_occurrence_key
from dispatch.models import Execution, ExecutionEvent
from tenants.models import Tenant
from tenants.roles import Principal
from tests.support.migrations import migrate_to_latest, schema_at
from tests.support.rows import execution_row
from tests.support.worker_support import db_now, make_schedule

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("dispatch", "0022_logical_partitions")]
# Days relative to today: the first beyond the migration's 40 days back (the
# `_before` catch-all), the last beyond its week ahead (the `_after` catch-all).
DAYS = [-60, -39, -3, -1, 0, 2, 30]
PER_DAY = 40


@pytest.fixture
def old_apps() -> Iterator[Any]:
    with schema_at(BEFORE) as apps:
        yield apps


def columns(table: str) -> list[str]:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s"
            " ORDER BY ordinal_position",
            [table],
        )
        return [name for (name,) in cur.fetchall()]


def digest(table: str, names: list[str]) -> tuple[int, str]:
    """Rows and a digest of the named columns of every row, in id order: the columns
    the table had before the migration (a later migration may add one)."""
    values = ", ".join(f't."{name}"' for name in names)
    rows = f"count(*), md5(string_agg(json_build_array({values})::text, E'\\n' ORDER BY t.id))"
    with connection.cursor() as cur:
        cur.execute(f"SELECT {rows} FROM {table} t")  # noqa: S608 (table: this module's constants)
        count, md5 = cur.fetchone()
    return count, md5


def where(table: str) -> dict[str, int]:
    """How many rows each partition holds."""
    with connection.cursor() as cur:
        cur.execute(f"SELECT tableoid::regclass::text, count(*) FROM {table} GROUP BY 1")  # noqa: S608
        return dict(cur.fetchall())


def test_every_execution_and_event_is_kept_in_its_day(old_apps: Any, tenant: Tenant) -> None:
    schedule_model = old_apps.get_model("dispatch", "Schedule")
    execution_model = old_apps.get_model("dispatch", "Execution")
    event_model = old_apps.get_model("dispatch", "ExecutionEvent")
    now = db_now().replace(hour=12, minute=0, second=0, microsecond=0)
    schedule = schedule_model.objects.create(
        id=uuid.uuid4(),
        tenant_id=tenant.pk,
        name="nightly",
        kind="cron",
        cron="0 * * * *",
        partition=7,
        target={"type": "http", "url": "https://billing.internal/h"},
        retry={},
    )
    executions = execution_model.objects.bulk_create(
        execution_model(
            id=uuid.uuid4(),
            schedule_id=schedule.id,
            tenant_id=tenant.pk,
            partition=7,
            scheduled_for=now + timedelta(days=day, minutes=i),
            due_at=now + timedelta(days=day, minutes=i),
            state="succeeded" if i % 4 else "dead",
            error="" if i % 4 else "HTTP 503",
            target_override={"payload": {"n": i}} if i % 7 == 0 else None,
        )
        for day in DAYS
        for i in range(PER_DAY)
    )
    event_model.objects.bulk_create(
        event_model(
            tenant_id=tenant.pk,
            schedule_id=schedule.id,
            execution_id=e.id,
            at=e.scheduled_for + timedelta(seconds=5),
            kind="attempt_succeeded",
            message=f"attempt 1 of {e.id} succeeded",
            data={"status": 200},
        )
        for e in executions
    )
    tables = ("dispatch_execution", "dispatch_executionevent")
    had = {table: columns(table) for table in tables}
    before = [digest(table, had[table]) for table in tables]
    assert before[0][0] == before[1][0] == len(DAYS) * PER_DAY

    migrate_to_latest()

    assert [digest(table, had[table]) for table in tables] == before
    today = now.date()
    for table in ("dispatch_execution", "dispatch_executionevent"):
        held = where(table)
        assert held == {
            f"{table}_before": PER_DAY,
            f"{table}_after": PER_DAY,
            **{
                f"{table}_p{today + timedelta(days=d):%Y%m%d}": PER_DAY
                for d in DAYS
                if d not in (-60, 30)
            },
        }
    # The occurrence key still refuses a second row for one occurrence, across the
    # partitioned table, and a new event continues the old ids.
    first = executions[0]
    with pytest.raises(IntegrityError) as refused, transaction.atomic():
        Execution.objects.create(
            schedule_id=schedule.id,
            tenant_id=tenant.pk,
            scheduled_for=first.scheduled_for,
            due_at=first.scheduled_for,
        )
    assert violates_occurrence_key(refused.value)
    newest = max(ExecutionEvent.objects.values_list("id", flat=True))
    event = ExecutionEvent.objects.create(
        tenant_id=tenant.pk, schedule_id=schedule.id, kind="created", message="after"
    )
    assert event.id > newest
    # New rows get ids carrying their occurrence's millisecond.
    later = now + timedelta(seconds=1, microseconds=234)
    made = Execution.objects.create(
        schedule_id=schedule.id, tenant_id=tenant.pk, scheduled_for=later, due_at=later
    )
    window = ids.occurrence_window(made.id)
    assert window is not None and window[0] <= later < window[1]


def test_the_way_back_keeps_every_row(admin_principal: Principal) -> None:
    schedule = make_schedule(admin_principal, {"type": "http", "url": "https://billing.internal/h"})
    now = db_now()
    for minutes in range(30):
        execution_row(schedule, now - timedelta(minutes=minutes), state="succeeded")
    latest = columns("dispatch_execution")
    before = digest("dispatch_execution", latest)
    with schema_at(BEFORE):
        with connection.cursor() as cur:
            cur.execute("SELECT relkind FROM pg_class WHERE relname = 'dispatch_execution'")
            assert cur.fetchone()[0] == "r"
        # The columns of that time (later migrations added some), every row.
        old = columns("dispatch_execution")
        assert set(old) < set(latest)
        back_then = digest("dispatch_execution", old)
        assert back_then[0] == before[0]
    with connection.cursor() as cur:
        cur.execute("SELECT relkind FROM pg_class WHERE relname = 'dispatch_execution'")
        assert cur.fetchone()[0] == "p"
    assert digest("dispatch_execution", latest) == before
    assert digest("dispatch_execution", old) == back_then
