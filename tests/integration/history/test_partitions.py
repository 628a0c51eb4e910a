"""The day partitions kept ahead (dispatch/history/partitions.py): the days the clock
is about to reach are created out of the upper catch-all, whose rows move into them,
and days given back to the lower catch-all can be carved out again, rows included."""

from __future__ import annotations

import math
import uuid
from datetime import timedelta
from itertools import pairwise
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from dispatch import selectors
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


def test_newest_first_reads_walk_the_days_and_miss_nothing(
    admin_principal: Principal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runs page's read goes one window of days at a time (newest_first_windows):
    every page, cursor and capped total must come out as one read of the whole table
    would, across day partitions, the days ahead and both catch-alls."""
    schedule = make_schedule(admin_principal, TARGET)
    tenant = schedule.tenant
    now = db_now()
    partitions.reopen_days(partitions.day_of(now) - timedelta(days=40))
    monkeypatch.setattr(partitions, "HELD_DAYS_CACHE_S", 0.0)  # the days just made, at once
    assert len(list(partitions.newest_first_windows(now, held=partitions.held_days()))) == 8
    offsets_h = [*range(-1100, 0, 37), *range(0, 60, 7), 24 * 30]  # 46 days back .. a month ahead
    for h in offsets_h:
        execution_row(schedule, now + timedelta(hours=h, seconds=h % 5), state="succeeded")
    homes = {home_of(e) for e in Execution.objects.filter(tenant=tenant)}
    assert {"dispatch_execution_before", "dispatch_execution_after"} <= homes and len(homes) > 20
    everyone = list(
        Execution.objects.filter(tenant=tenant)
        .order_by("-scheduled_for", "-id")
        .values_list("id", flat=True)
    )

    def walk(flt: selectors.ExecutionFilter) -> list[uuid.UUID]:
        seen: list[uuid.UUID] = []
        cursor = None
        while True:
            page = selectors.execution_list(tenant=tenant, cursor=cursor, limit=7, flt=flt)
            seen += [e.id for e in page.items]
            if page.next_cursor is None:
                return seen
            cursor = page.next_cursor

    assert walk(selectors.ExecutionFilter()) == everyone
    # 40 held days behind today are more than a request reads (READ_DAYS): the total
    # counts the newest of them and says there may be more ...
    read_from = partitions.day_start(
        partitions.day_of(now) - timedelta(days=partitions.READ_DAYS - 1)
    )
    newest = Execution.objects.filter(tenant=tenant, scheduled_for__gte=read_from).count()
    assert 0 < newest < len(everyone)
    assert selectors.execution_count(tenant=tenant, flt=selectors.ExecutionFilter()) == (
        newest,
        True,
    )
    # ... and with every day in one request, it is the whole table's.
    monkeypatch.setattr(partitions, "READ_DAYS", 1000)
    assert selectors.execution_count(tenant=tenant, flt=selectors.ExecutionFilter()) == (
        len(everyone),
        False,
    )
    since, until = now - timedelta(days=20), now + timedelta(hours=20)
    bounded = selectors.execution_filter(since=since, until=until)
    expected = list(
        Execution.objects.filter(tenant=tenant, scheduled_for__gte=since, scheduled_for__lt=until)
        .order_by("-scheduled_for", "-id")
        .values_list("id", flat=True)
    )
    assert 0 < len(expected) < len(everyone)
    assert walk(bounded) == expected
    assert selectors.execution_count(tenant=tenant, flt=bounded) == (len(expected), False)

    # The latest execution of each schedule, however far back its newest one lies.
    quiet = make_schedule(admin_principal, TARGET)
    old = execution_row(quiet, now - timedelta(days=33), state="dead")
    execution_row(quiet, now - timedelta(days=34), state="succeeded")
    latest = selectors.last_executions(tenant=tenant, schedule_ids=[schedule.id, quiet.id])
    assert latest[quiet.id].id == old.id
    assert latest[schedule.id].id == everyone[0]

    # A page that fills from today's window is one read of it, not one per window.
    with CaptureQueriesContext(connection) as queries:
        selectors.execution_list(tenant=tenant, limit=5)
    assert len([q for q in queries if "dispatch_execution" in q["sql"]]) == 1


def test_an_error_search_walks_the_days_within_its_scan_budget(
    admin_principal: Principal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The error-text search reads its ERROR_SCAN_ROWS candidates window by window:
    followed through its cursors (short, scan-limited pages included) it finds every
    match once, in order, and no page reads past its budget."""
    schedule = make_schedule(admin_principal, TARGET)
    tenant = schedule.tenant
    now = db_now()
    partitions.reopen_days(partitions.day_of(now) - timedelta(days=20))
    monkeypatch.setattr(partitions, "HELD_DAYS_CACHE_S", 0.0)
    monkeypatch.setattr(selectors.executions, "ERROR_SCAN_ROWS", 6)
    for h in range(-24 * 25, 48, 5):  # 25 days back .. 2 days ahead, a failure every 5 h
        error = "disk quota exceeded" if h % 7 == 0 else "HTTP 503"
        execution_row(schedule, now + timedelta(hours=h), state="dead", error=error)
    matches = list(
        Execution.objects.filter(tenant=tenant, error__icontains="quota")
        .order_by("-scheduled_for", "-id")
        .values_list("id", flat=True)
    )
    assert len(matches) > 5

    seen: list[uuid.UUID] = []
    limited = 0
    cursor = None
    flt = selectors.execution_filter(error="QUOTA")
    while True:
        page = selectors.execution_list(tenant=tenant, cursor=cursor, limit=2, flt=flt)
        assert len(page.items) <= 2
        seen += [e.id for e in page.items]
        limited += page.scan_limited
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == matches
    # One match in seven candidates and six read a page: most pages stop at the budget.
    assert limited >= len(matches) // 2


def test_a_sparse_filter_reads_its_days_a_page_at_a_time(
    admin_principal: Principal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filter that matches few rows reads READ_DAYS held days a page and stops there,
    short or empty, with a cursor: followed, it finds every match once, in order; a
    state no row has ends; the capped total says there may be more."""
    schedule = make_schedule(admin_principal, TARGET)
    tenant = schedule.tenant
    now = db_now()
    partitions.reopen_days(partitions.day_of(now) - timedelta(days=20))
    monkeypatch.setattr(partitions, "HELD_DAYS_CACHE_S", 0.0)
    default_days = partitions.READ_DAYS
    monkeypatch.setattr(partitions, "READ_DAYS", 3)
    for h in range(-24 * 25, 48, 5):  # 25 days back .. 2 days ahead, a run every 5 h
        execution_row(
            schedule, now + timedelta(hours=h), state="dead" if h % 70 == 0 else "succeeded"
        )
    dead = list(
        Execution.objects.filter(tenant=tenant, state="dead")
        .order_by("-scheduled_for", "-id")
        .values_list("id", flat=True)
    )
    assert len(dead) > 5

    def walk(flt: selectors.ExecutionFilter) -> tuple[list[uuid.UUID], int, int]:
        seen: list[uuid.UUID] = []
        pages = limited = 0
        cursor = None
        while True:
            page = selectors.execution_list(tenant=tenant, cursor=cursor, limit=2, flt=flt)
            pages += 1
            assert len(page.items) <= 2
            seen += [e.id for e in page.items]
            limited += page.scan_limited
            if page.next_cursor is None:
                return seen, pages, limited
            cursor = page.next_cursor

    seen, pages, limited = walk(selectors.execution_filter(state="dead"))
    assert seen == dead
    assert limited > 0  # some pages stopped at their days, short
    # Three held days a page, each page new ones (one after a cut starts on the day
    # below it): today with the days ahead and two below, then three a page down the
    # rest, the last with the catch-all below them.
    nothing, pages, limited = walk(selectors.execution_filter(state="retry_scheduled"))
    below = len([d for d in partitions.held_days() if d < partitions.day_of(now)])
    assert below >= 20
    assert nothing == [] and pages == 1 + math.ceil((below - 2) / 3) and limited == pages - 1
    # Counted over the newest three days only: at least that many, maybe more.
    counted = selectors.execution_count(tenant=tenant, flt=selectors.execution_filter(state="dead"))
    newest = Execution.objects.filter(
        tenant=tenant,
        state="dead",
        scheduled_for__gte=partitions.day_start(partitions.day_of(now) - timedelta(days=2)),
    ).count()
    assert counted == (newest, True)
    # A schedule's own page shows its newest runs however old they are.
    history = selectors.schedule_history(tenant=tenant, schedule=schedule, limit=500)
    assert [e.id for e in history] == list(
        Execution.objects.filter(schedule=schedule)
        .order_by("-scheduled_for", "-id")
        .values_list("id", flat=True)
    )
    # Every day kept fits the default budget: the same walk is one page, not capped.
    monkeypatch.setattr(partitions, "READ_DAYS", default_days)
    first = selectors.execution_list(
        tenant=tenant, limit=50, flt=selectors.execution_filter(state="dead")
    )
    assert [e.id for e in first.items] == dead and first.next_cursor is None
    assert selectors.execution_count(
        tenant=tenant, flt=selectors.execution_filter(state="dead")
    ) == (len(dead), False)
