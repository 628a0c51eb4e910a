"""The dashboard says how many fires are due when it shows only the first 50,
and links to all of them; a schedule paused until T lists no runs inside
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


def test_dashboard_says_50_of_how_many_and_links_to_all(world: World) -> None:
    # The world's own schedule ("0 0 * * *" Amsterdam) may be due within the hour too.
    hourly_schedules(world, HOURLY)
    client = world.client("viewer")
    html = client.get("/").content.decode()
    body = html[html.index('id="up-h"') : html.index('id="run-h"')]
    # Each row's link carries a stable id (focus survives the 5 s refresh).
    assert len(re.findall(r'<tr><td><a id="up-[^"]+" href="/schedules/', body)) == 50
    match = re.search(r'id="upcoming-more">50 of (\d+) due in the next hour', body)
    assert match, body[-600:]
    total = int(match.group(1))
    assert total in (HOURLY, HOURLY + 1)
    assert 'href="/upcoming"' in body
    first = client.get("/upcoming").content.decode()
    assert f"1 to 200 of {total}" in first and first.count('<td class="clip">') == 200
    last = client.get("/upcoming?page=3").content.decode()
    assert f"401 to {total} of {total}" in last
    assert last.count('<td class="clip">') == total - 400
    assert "Later →" not in last and "← Earlier" in last
    # Another tenant's fires are neither counted nor listed.
    other = world.client("outsider").get("/").content.decode()
    assert 'id="upcoming-more"' not in other and "hourly-0001" not in other


def test_no_note_when_everything_fits(world: World) -> None:
    html = world.client("viewer").get("/").content.decode()
    assert 'id="upcoming-more"' not in html


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
