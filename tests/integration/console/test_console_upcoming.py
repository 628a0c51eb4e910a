"""The dashboard lists upcoming fires one row a schedule, says how many schedules
and fires are due, and links to every fire; a schedule paused until T lists no runs inside
the pause (console and API), and says so."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
from rest_framework.test import APIClient

from dispatch import services
from tenants.models import Tenant
from tenants.roles import Role
from tests.support.console_support import TARGET, World, bulk_schedules, db_now

pytestmark = pytest.mark.django_db
HOURLY = 426


def hourly_schedules(world: World, n: int) -> None:
    """n schedules firing once an hour (each at its own H minute): n fires in any hour."""
    bulk_schedules(world.tenant, n, prefix="hourly", expr="H * * * *", next_run_after=db_now())


def upcoming_section(html: str) -> str:
    return html[html.index('id="up-h"') : html.index("</section>", html.index('id="up-h"'))]


def test_dashboard_says_how_many_schedules_and_fires_and_links_to_all(world: World) -> None:
    # The world's own schedule ("0 0 * * *" Amsterdam) may be due within the hour too.
    hourly_schedules(world, HOURLY)
    client = world.client("viewer")
    html = client.get("/").content.decode()
    body = upcoming_section(html)
    # One row a schedule, the first 20; each row's link carries a stable id (focus
    # survives the refresh).
    assert len(re.findall(r'<tr><td><a id="up-[^"]+" href="/schedules/', body)) == 20
    match = re.search(
        r'id="upcoming-more"[^>]*>20 of (\d+) schedules due in the next hour \((\d+) fires\)', body
    )
    assert match, body[-600:]
    schedules, fires = int(match.group(1)), int(match.group(2))
    assert schedules in (HOURLY, HOURLY + 1) and fires == schedules
    assert 'href="/upcoming"' in body
    first = client.get("/upcoming").content.decode()
    assert f"1 to 200 of {fires}" in first and first.count('<td class="clip">') == 200
    last = client.get("/upcoming?page=3").content.decode()
    assert f"401 to {fires} of {fires}" in last
    assert last.count('<td class="clip">') == fires - 400
    assert "Later →" not in last and "← Earlier" in last
    # Another tenant's fires are neither counted nor listed.
    other = upcoming_section(world.client("outsider").get("/").content.decode())
    assert "hourly-0001" not in other and f"of {schedules} schedules" not in other


def test_an_every_minute_schedule_is_one_row_below_what_needs_attention(world: World) -> None:
    """Issue 35, defect 7: 44 of 50 upcoming rows were one every-minute schedule, and the
    failures and health started below 2,300 px."""
    bulk_schedules(world.tenant, 1, prefix="minutely", expr="* * * * *", next_run_after=db_now())
    hourly_schedules(world, 3)
    html = world.client("viewer").get("/").content.decode()
    body = upcoming_section(html)
    rows = re.findall(r'<tr><td><a id="up-[^"]+" href="/schedules/[^"]+/">([^<]+)</a>', body)
    assert rows.count("minutely-0000") == 1, rows
    count = re.search(r'minutely-0000</a>.*?<td class="num">(\d+)</td>', body, re.S)
    assert count and int(count.group(1)) in (60, 61), body
    # Attention first: failures, running and the health board come before upcoming fires.
    for first in ('id="bad-h"', 'id="run-h"', 'id="health-board"'):
        assert html.index(first) < html.index('id="up-h"'), first
    # The 15 s refresh of the section answers the same rows on its own.
    part = world.client("viewer").get("/dashboard/upcoming").content.decode()
    assert part.lstrip().startswith('<section aria-labelledby="up-h"') and "minutely-0000" in part


def test_paused_until_leaves_the_runs_inside_the_pause_out_and_says_so(
    world: World, api_for: Callable[[Tenant, Role], APIClient]
) -> None:
    s = services.schedule_create(
        actor=world.admin_p, data={"name": "hourly", "cron": "0 * * * *", "target": TARGET}
    )
    until = db_now() + timedelta(hours=3, minutes=30)
    services.schedule_pause(actor=world.admin_p, schedule_id=s.id, reason="freeze", until=until)
    html = world.client("viewer").get(f"/schedules/{s.id}/").content.decode()
    assert 'id="paused-note"' in html and "Paused until" in html
    section = html[html.index('id="next-h"') : html.index('id="dep-h"')]
    shown = re.findall(r'<time datetime="([^"]+)"', section)
    assert len(shown) >= 10
    instants = [datetime.fromisoformat(t.replace("Z", "+00:00")) for t in shown]
    assert all(t >= until for t in instants), (until, instants[:3])
    body = api_for(world.tenant, Role.VIEWER).get(f"/v1/schedules/{s.id}/preview").json()
    assert body["note"].startswith("paused until ")
    firsts = [
        datetime.fromisoformat(o["scheduled_for"].replace("Z", "+00:00"))
        for o in body["occurrences"]
    ]
    assert firsts and all(t >= until for t in firsts)
