"""The schedule form edits several specs (one per line) and start/end: saved as the
API would save them, shown back line by line, errors inline naming the line, and the
live preview shows the union."""

from __future__ import annotations

import re

import pytest

from dispatch.models import Schedule
from dispatch.timing import cron
from tests.support.console_support import World, form_data

pytestmark = pytest.mark.django_db
SPECS = "0 9 * * 1-5\nevery 90m from 2026-01-01T00:15"


def test_form_saves_specs_and_bounds_and_shows_them_back(world: World) -> None:
    client = world.client("operator")
    data = form_data(
        name="multi", cron=SPECS, start_at="2027-01-04T00:00", end_at="2027-02-01T00:00"
    )
    response = client.post("/schedules/new", data)
    assert response.status_code == 302, response.content.decode()[:3000]
    s = Schedule.objects.get(name="multi")
    specs, start, end = cron.decompose(s.cron)
    assert specs == [
        cron.Spec(cron="0 9 * * 1-5"),
        cron.Spec(every="1h30m", anchor="2026-01-01T00:15:00"),
    ]
    zone = cron.get_zone(s.timezone)
    assert start is not None and start.astimezone(zone).isoformat()[:16] == "2027-01-04T00:00"
    assert end is not None and end.astimezone(zone).isoformat()[:16] == "2027-02-01T00:00"
    page = client.get(f"/schedules/{s.id}/edit").content.decode()
    assert "every 1h30m from 2026-01-01T00:15:00" in page and "2027-01-04T00:00" in page


def test_bad_spec_line_is_an_inline_error_naming_the_line(world: World) -> None:
    before = Schedule.objects.count()
    data = form_data(cron="0 9 * * *\nevery 10s from 2026-01-01T00:00")
    response = world.client("operator").post("/schedules/new", data)
    assert response.status_code == 400
    html = response.content.decode()
    block = re.search(r'<ul class="errorlist" id="id_cron_error">(.*?)</ul>', html, re.S)
    assert block is not None, html[:3000]
    assert "specs, line 2 (every): must be at least 1m" in block.group(1)
    assert Schedule.objects.count() == before


def test_live_preview_shows_the_union(world: World) -> None:
    response = world.client("operator").post(
        "/schedules/preview", form_data(cron="0 9 * * *\n30 9 * * *"), HTTP_HX_REQUEST="true"
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert re.search(r"\d{4}-\d\d-\d\d 09:00:00 CE[S]?T", html)
    assert re.search(r"\d{4}-\d\d-\d\d 09:30:00 CE[S]?T", html)
