"""The day partitions kept ahead (dispatch/history/partitions.py): the days the clock
is about to reach are created out of the upper catch-all, whose rows move into them,
and days given back to the lower catch-all can be carved out again, rows included."""

from __future__ import annotations

from datetime import timedelta
from itertools import pairwise
from pathlib import Path

import pytest
from django.db import connection

from dispatch.history import archive, partitions
from dispatch.history.objects import FileStore
from dispatch.models import Execution
from tenants.roles import Principal
from tests.support.rows import execution_row
from tests.support.worker_support import db_now, make_schedule

pytestmark = pytest.mark.django_db(transaction=True)

TARGET = {"type": "http", "url": "https://billing.internal/h"}


def home_of(execution: Execution) -> str:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT tableoid::regclass::text FROM dispatch_execution WHERE id = %s",
            [execution.id],
        )
        return str(cur.fetchone()[0])


def test_days_ahead_are_made_from_the_upper_catchall_with_its_rows(
    admin_principal: Principal,
) -> None:
    schedule = make_schedule(admin_principal, TARGET)
    today = partitions.day_of(db_now())
    last = partitions.days(partitions.EXECUTIONS)[-1].day
    far = execution_row(schedule, partitions.day_start(last + timedelta(days=3)), state="succeeded")
    assert home_of(far) == "dispatch_execution_after"

    # Nothing to do while enough days are left...
    assert partitions.ensure_ahead(today) == []
    # ...and, seen from a clock near the last day, the week ahead of it is made.
    created = partitions.ensure_ahead(last - timedelta(days=1))

    new_last = last - timedelta(days=1) + timedelta(days=partitions.AHEAD_DAYS)
    for table in partitions.TABLES:
        held = [p.day for p in partitions.days(table)]
        assert held[-1] == new_last
        assert held == sorted(held) and len(held) == len(set(held))
        assert all(b - a == timedelta(days=1) for a, b in pairwise(held))
    assert len(created) == 2 * (new_last - last).days
    assert home_of(far) == f"dispatch_execution_p{last + timedelta(days=3):%Y%m%d}"
    assert Execution.objects.filter(id=far.id).exists()


def test_days_given_back_can_be_carved_out_again(
    admin_principal: Principal, tmp_path: Path
) -> None:
    schedule = make_schedule(admin_principal, TARGET)
    first = partitions.days(partitions.EXECUTIONS)[0].day
    old = execution_row(
        schedule, partitions.day_start(first - timedelta(days=2)) + timedelta(hours=3)
    )
    assert home_of(old) == "dispatch_execution_before"

    created = partitions.reopen_days(first - timedelta(days=2))

    assert f"dispatch_execution_p{first - timedelta(days=2):%Y%m%d}" in created
    assert home_of(old) == f"dispatch_execution_p{first - timedelta(days=2):%Y%m%d}"
    assert partitions.days(partitions.EVENTS)[0].day == first - timedelta(days=2)

    # Given back the way retention gives days back.
    old.delete()
    for back in (2, 1):
        assert archive.retire_day(first - timedelta(days=back), FileStore(tmp_path)).dropped
    assert partitions.days(partitions.EXECUTIONS)[0].day == first
