"""Health in the console: the schedule page's health card and status grid, the
dashboard's failing / paused lists and grid, the list sorted by health, tenant
isolation, and dashboard queries that do not grow with the number of schedules."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from dispatch import services
from dispatch.models import Schedule
from tests.support.console_support import World, build_world, bulk_schedules
from tests.support.rows import execution_row

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(db: Any) -> World:
    return build_world()


def _cell(html: str, cell_id: str) -> str:
    match = re.search(rf'<a class="sg-cell[^"]*" id="cell-{cell_id}"[^>]*>[^<]*</a>', html)
    assert match, f"no cell {cell_id}"
    return match.group(0)


def test_schedule_page_shows_health_and_a_linked_grid(world: World) -> None:
    s, now = world.schedule, services.db_now()
    h = timedelta(hours=1)
    ok = execution_row(
        s,
        now - 4 * h,
        state="succeeded",
        started_at=now - 4 * h,
        finished_at=now - 4 * h + timedelta(seconds=30),
    )
    skipped = execution_row(
        s,
        now - 3 * h,
        state="skipped",
        reason_code="paused",
        reason="paused by ops-lead: maintenance",
    )
    dead = execution_row(
        s,
        now - 2 * h,
        state="dead",
        status_code=500,
        started_at=now - 2 * h,
        finished_at=now - 2 * h + timedelta(seconds=10),
    )
    cancelled = execution_row(s, now - h, state="cancelled", reason="cancelled by olga")

    html = world.client("viewer").get(f"/schedules/{s.id}/").content.decode()

    assert re.search(r'id="consecutive-failures"[^>]*>1<', html)
    day = re.search(r'<tr id="health-24h">(.*?)</tr>', html, re.S)
    assert day
    cells = re.findall(r"<td>(.*?)</td>", day.group(1))
    assert cells == ["2", "1", "1", "50.0 %", "10.0 s", "30.0 s"]
    dead_cell = _cell(html, str(dead.id))
    assert f'href="/executions/{dead.id}/"' in dead_cell
    assert 'data-outcome="failed"' in dead_cell and "failed (HTTP 500)" in dead_cell
    assert ">✗<" in dead_cell  # a symbol, not only a colour
    assert "skipped (paused by ops-lead: maintenance)" in _cell(html, str(skipped.id))
    assert 'data-outcome="cancelled"' in _cell(html, str(cancelled.id))
    assert 'data-outcome="succeeded"' in _cell(html, str(ok.id))
    # Oldest first: the cells are in occurrence order.
    assert (
        html.index(f"cell-{ok.id}")
        < html.index(f"cell-{skipped.id}")
        < html.index(f"cell-{dead.id}")
    )
    upcoming = re.findall(
        r'<a class="sg-cell sg-upcoming" data-outcome="upcoming" href="([^"]+)"', html
    )
    assert len(upcoming) == 6
    assert all(u.startswith(f"/explain?schedule={s.id}&amp;at_utc=") for u in upcoming)


def test_dashboard_lists_failing_and_paused_schedules(world: World) -> None:
    now = services.db_now()
    execution_row(world.schedule, now - timedelta(hours=2), state="dead")
    execution_row(world.schedule, now - timedelta(hours=1), state="skipped")
    last = execution_row(world.schedule, now - timedelta(minutes=30), state="dead")
    calm = services.schedule_create(
        actor=world.admin_p,
        data={
            "name": "calm",
            "cron": "0 0 * * *",
            "target": {"type": "http", "url": "https://billing.internal/x"},
        },
    )
    execution_row(calm, now - timedelta(hours=1), state="succeeded")
    services.schedule_pause(actor=world.admin_p, schedule_id=calm.id, reason="vendor outage")
    # Another tenant's failures are not ours.
    execution_row(world.other_schedule, now - timedelta(hours=1), state="dead")

    client = world.client("viewer")
    assert 'hx-get="/dashboard/health"' in client.get("/").content.decode()
    html = client.get("/dashboard/health", headers={"HX-Request": "true"}).content.decode()

    failing = re.search(r'<h3 id="failing-h">.*?</ul>', html, re.S)
    assert failing
    assert f'id="failing-{world.schedule.id}"' in failing.group(0)
    assert "2 consecutive failures" in failing.group(0)
    assert "calm" not in failing.group(0) and "theirs" not in failing.group(0)
    paused = re.search(r'<h3 id="paused-h">.*?</ul>', html, re.S)
    assert paused and f'id="paused-{calm.id}"' in paused.group(0)
    assert "vendor outage" in paused.group(0)
    counts = re.search(r'<p id="health-counts">(.*?)</p>', html, re.S)
    assert counts
    text = re.sub(r"<[^>]+>", "", counts.group(1))
    assert "2 schedules · 1 failing now · 1 paused" in text
    assert "theirs" not in html
    assert f'href="/executions/{last.id}/"' in _cell(html, str(last.id))  # the grid's row


def test_list_sorted_by_health(world: World) -> None:
    now = services.db_now()
    bulk_schedules(world.tenant, 3, prefix="b")
    by_name = {s.name: s for s in Schedule.objects.filter(tenant=world.tenant)}
    for n in range(1, 4):
        execution_row(by_name["b-0001"], now - timedelta(hours=n), state="dead")
    execution_row(by_name["b-0002"], now - timedelta(hours=1), state="dead")
    execution_row(world.other_schedule, now - timedelta(hours=1), state="dead")

    html = world.client("viewer").get("/schedules/health").content.decode()
    names = re.findall(r'<td><a href="/schedules/[^"]+/">([^<]+)</a></td>', html)

    assert names[:2] == ["b-0001", "b-0002"]
    worst = re.search(r"<tr>\s*<td><a [^>]*>b-0001</a></td>(.*?)</tr>", html, re.S)
    assert worst
    cells = [
        re.sub(r"<[^>]+>", "", c).strip()
        for c in re.findall(r"<td>(.*?)</td>", worst.group(1), re.S)
    ]
    assert cells[:3] == ["3", "0.0 % of 3", "0.0 % of 3"]  # streak, 24 h, 7 d
    assert sorted(names) == ["b-0000", "b-0001", "b-0002", "nightly"]
    assert 'id="sort-health"' in world.client("viewer").get("/schedules/").content.decode()


def _dashboard_queries(world: World) -> int:
    client = world.client("viewer")
    client.get("/dashboard/health")
    connection.queries_log.clear()
    with CaptureQueriesContext(connection) as captured:
        response = client.get("/dashboard/health")
    assert response.status_code == 200
    return len(captured.captured_queries)


def test_dashboard_queries_do_not_grow_with_the_schedules(world: World) -> None:
    counts = []
    for total, more in ((50, 50), (200, 150)):
        bulk_schedules(world.tenant, more, prefix=f"q{total}")
        now = services.db_now()
        for s in Schedule.objects.filter(tenant=world.tenant, name__startswith=f"q{total}-"):
            execution_row(s, now - timedelta(minutes=5), state="succeeded")
            execution_row(s, now - timedelta(minutes=2), state="dead")
        counts.append(_dashboard_queries(world))
    assert counts[0] == counts[1], counts
    assert 'id="grid-h"' in world.client("viewer").get("/dashboard/health").content.decode()


def test_a_paused_schedule_has_no_upcoming_cells(world: World) -> None:
    services.schedule_pause(actor=world.admin_p, schedule_id=world.schedule.id, reason="x")
    html = world.client("viewer").get(f"/schedules/{world.schedule.id}/").content.decode()
    assert 'id="health-h"' in html
    assert 'data-outcome="upcoming"' not in html.split('class="sg-legend')[0]
