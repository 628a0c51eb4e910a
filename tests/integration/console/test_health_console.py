"""Health in the console: the schedule page's health card (with the current alert
state) and status grid, the dashboard's failing / late / paused / auto-paused /
snoozed lists and grid, the list sorted by health, tenant isolation, and dashboard
queries that do not grow with the number of schedules."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from dispatch import services
from dispatch.api.serializers import iso_z
from dispatch.models import Alert, AlertPolicy, Schedule
from dispatch.states import AUTO_PAUSE_ACTOR
from tests.support.console_support import World, bulk_schedules
from tests.support.rows import execution_row

pytestmark = pytest.mark.django_db


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
    assert text == (
        "2 schedules · 1 failing now · 0 late now · 1 paused · 0 auto-paused · 0 snoozed"
        " · all by health →"
    )
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


def test_an_auto_paused_schedule_is_listed_with_the_failing(world: World) -> None:
    now = services.db_now()
    bulk_schedules(world.tenant, 3, prefix="b")
    by_name = {s.name: s for s in Schedule.objects.filter(tenant=world.tenant)}
    execution_row(by_name["b-0000"], now - timedelta(hours=1), state="dead")
    # No failed run left (retention), but the breaker paused it: failing, not healthy.
    Schedule.objects.filter(pk=by_name["b-0002"].pk).update(
        paused=True, paused_by=AUTO_PAUSE_ACTOR, paused_reason=NOTE
    )
    html = world.client("viewer").get("/schedules/health").text
    names = re.findall(r'<td><a href="/schedules/[^"]+/">([^<]+)</a></td>', html)
    assert names == ["b-0000", "b-0002", "b-0001", "nightly"]


def _section(html: str, heading: str) -> str:
    match = re.search(rf'<h3 id="{heading}-h">.*?</ul>', html, re.S)
    assert match, f"no section {heading}"
    return match.group(0)


def _counts(html: str) -> str:
    match = re.search(r'<p id="health-counts">(.*?)</p>', html, re.S)
    assert match
    return re.sub(r"<[^>]+>", "", match.group(1))


NOTE = "auto-paused after 3 consecutive failures; last error: HTTP 500"


def test_schedule_page_shows_the_current_alert_state(world: World) -> None:
    s, now = world.schedule, services.db_now()
    page = f"/schedules/{s.id}/"
    quiet = re.search(r'<p id="alert-state">(.*?)</p>', world.client("viewer").get(page).text, re.S)
    assert quiet
    assert re.sub(r"<[^>]+>", "", quiet.group(1)) == "Alerts: not failing · last alert sent: none"

    Schedule.objects.filter(pk=s.pk).update(
        alert_failing=True,
        alert_snoozed_until=now + timedelta(hours=2),
        paused=True,
        paused_at=now,
        paused_by=AUTO_PAUSE_ACTOR,
        paused_reason=NOTE,
    )
    at = now - timedelta(hours=1)
    Alert.objects.create(
        tenant=world.tenant,
        schedule=s,
        scheduled_for=at,
        kind="failure",
        state="sent",
        sent_at=at,
    )
    Alert.objects.create(
        tenant=world.tenant, schedule=s, scheduled_for=now, kind="auto_paused", state="pending"
    )  # not sent yet: not the last alert sent
    html = world.client("viewer").get(page).text

    assert 'id="alert-failing"' in html and 'id="alert-auto-paused"' in html
    state = re.search(r'<p id="alert-state">(.*?)</p>', html, re.S)
    assert state and f"“{NOTE}”" in state.group(1)
    until = iso_z(now + timedelta(hours=2))
    assert f'id="alert-snoozed">snoozed until <time datetime="{until}"' in state.group(1)
    assert f'id="last-alert">failure at <time datetime="{iso_z(at)}"' in state.group(1)


def test_dashboard_lists_late_auto_paused_and_snoozed_schedules(world: World) -> None:
    now = services.db_now()
    minute = timedelta(minutes=1)
    AlertPolicy.objects.create(tenant=world.tenant, late_after_s=300, max_duration_s=600)
    held = execution_row(world.schedule, now - 10 * minute, state="scheduled")
    execution_row(world.schedule, now - 2 * minute, state="queued")  # within its grace
    overrun = execution_row(
        world.schedule, now - 30 * minute, state="running", started_at=now - 20 * minute
    )
    execution_row(world.schedule, now - 40 * minute, state="running", started_at=now - 5 * minute)
    # Another tenant's late run (its own policy) is not ours.
    AlertPolicy.objects.create(tenant=world.other, late_after_s=60)
    theirs_late = execution_row(world.other_schedule, now - 10 * minute, state="scheduled")
    bulk_schedules(world.tenant, 3, prefix="t")
    by_name = {s.name: s for s in Schedule.objects.filter(tenant=world.tenant)}
    broken, snoozed, woke = by_name["t-0000"], by_name["t-0001"], by_name["t-0002"]
    Schedule.objects.filter(pk=broken.pk).update(
        paused=True, paused_at=now, paused_by=AUTO_PAUSE_ACTOR, paused_reason=NOTE
    )
    Schedule.objects.filter(pk=snoozed.pk).update(alert_snoozed_until=now + timedelta(hours=3))
    Schedule.objects.filter(pk=woke.pk).update(alert_snoozed_until=now - minute)  # over
    Schedule.objects.filter(pk=world.other_schedule.pk).update(
        alert_snoozed_until=now + timedelta(hours=1)
    )
    bulk_schedules(world.other, 1, prefix="o")
    Schedule.objects.filter(tenant=world.other, name="o-0000").update(
        paused=True, paused_by=AUTO_PAUSE_ACTOR, paused_reason="theirs broke"
    )

    html = world.client("viewer").get("/dashboard/health", headers={"HX-Request": "true"}).text

    late = _section(html, "late")
    assert re.findall(r'id="late-([0-9a-f-]+)"', late) == [str(overrun.id), str(held.id)]
    assert f'href="/executions/{held.id}/"' in late
    assert "(scheduled; limit 300 s)" in late and "(running; limit 600 s)" in late
    auto = _section(html, "auto-paused")
    assert re.findall(r'id="auto-paused-([0-9a-f-]+)"', auto) == [str(broken.id)]
    assert f"“{NOTE}”" in auto
    assert f'id="resume-{broken.id}" href="/schedules/{broken.id}/#resume"' in auto
    assert re.findall(r'id="snoozed-([0-9a-f-]+)"', _section(html, "snoozed")) == [str(snoozed.id)]
    # The auto-paused schedule is failing (it has no failed run left to count).
    assert re.findall(r'id="failing-([0-9a-f-]+)"', _section(html, "failing")) == [str(broken.id)]
    assert _counts(html) == (
        "4 schedules · 1 failing now · 2 late now · 1 paused · 1 auto-paused · 1 snoozed"
        " · all by health →"
    )
    assert str(theirs_late.id) not in html and "theirs" not in html and "o-0000" not in html


def test_nothing_is_late_when_the_policy_is_off(world: World) -> None:
    now = services.db_now()
    execution_row(world.schedule, now - timedelta(hours=2), state="scheduled")
    execution_row(
        world.schedule,
        now - timedelta(hours=3),
        state="running",
        started_at=now - timedelta(hours=3),
    )
    AlertPolicy.objects.create(tenant=world.tenant, failure_threshold=2)  # no late limits
    html = world.client("viewer").get("/dashboard/health", headers={"HX-Request": "true"}).text
    assert "No run is late." in _section(html, "late")
    assert " 0 late now " in _counts(html)


def _dashboard_queries(world: World) -> int:
    client = world.client("viewer")
    client.get("/dashboard/health")
    connection.queries_log.clear()
    with CaptureQueriesContext(connection) as captured:
        response = client.get("/dashboard/health")
    assert response.status_code == 200
    return len(captured.captured_queries)


def test_dashboard_queries_do_not_grow_with_the_schedules(world: World) -> None:
    AlertPolicy.objects.create(tenant=world.tenant, late_after_s=60)
    counts = []
    for total, more in ((50, 50), (200, 150)):
        bulk_schedules(world.tenant, more, prefix=f"q{total}")
        now = services.db_now()
        made = Schedule.objects.filter(tenant=world.tenant, name__startswith=f"q{total}-")
        for n, s in enumerate(made):
            execution_row(s, now - timedelta(minutes=5), state="succeeded")
            execution_row(s, now - timedelta(minutes=2), state="dead")
            execution_row(s, now - timedelta(minutes=3), state="scheduled")  # late
            if n % 5 == 0:
                s.alert_snoozed_until = now + timedelta(hours=1)
                s.paused, s.paused_by, s.paused_reason = True, AUTO_PAUSE_ACTOR, NOTE
                s.save(
                    update_fields=["alert_snoozed_until", "paused", "paused_by", "paused_reason"]
                )
        counts.append(_dashboard_queries(world))
    assert counts[0] == counts[1], counts
    html = world.client("viewer").get("/dashboard/health", headers={"HX-Request": "true"}).text
    # The lists are bounded (the counts are not): 40 auto-paused, 160 late.
    assert "40 auto-paused · 40 snoozed" in _counts(html)
    assert "50+ late now" in _counts(html)
    assert len(re.findall(r'id="late-[0-9a-f]{8}-', html)) == 50
    assert 'id="grid-h"' in world.client("viewer").get("/dashboard/health").content.decode()


def test_a_paused_schedule_has_no_upcoming_cells(world: World) -> None:
    services.schedule_pause(actor=world.admin_p, schedule_id=world.schedule.id, reason="x")
    html = world.client("viewer").get(f"/schedules/{world.schedule.id}/").content.decode()
    assert 'id="health-h"' in html
    assert 'data-outcome="upcoming"' not in html.split('class="sg-legend')[0]
