"""What the console shows, read the way a person reads it (issue 35): the schedules
list's last run is one that ran, bulk results name their schedules, a finished run
offers no cancel, durations read in ms / s / min, and the explainer's answer reads
as a sentence with a coloured, worded answer badge."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.template import Context, Template
from django.utils.html import escape
from rest_framework.test import APIClient

from dispatch import services
from dispatch.models import Execution, Schedule
from dispatch.states import ExplainCode
from tenants.models import Tenant
from tenants.roles import Role
from tests.support.console_support import World, text
from tests.support.rows import execution_row

pytestmark = pytest.mark.django_db


def _row_of(html: str, name: str) -> str:
    """The schedules list's table row whose name link is `name`."""
    for row in re.findall(r"<tr>.*?</tr>", html, re.S):
        if re.search(rf">{re.escape(name)}</a>", row):
            return row
    raise AssertionError(f"no row for {name}")


# --- defect 11: the schedules list's "Last run" -------------------------------------------


def test_last_run_is_the_newest_run_that_started_not_the_upcoming_one(world: World) -> None:
    s, now = world.schedule, services.db_now()
    # The world's manual trigger is waiting too: not a run yet.
    ran = execution_row(
        s,
        now - timedelta(hours=2),
        state="dead",
        started_at=now - timedelta(hours=2),
        finished_at=now - timedelta(hours=2) + timedelta(seconds=3),
    )
    execution_row(s, now + timedelta(hours=1), state="scheduled")
    execution_row(s, now + timedelta(minutes=1), state="queued")

    row = _row_of(text(world.client("viewer").get("/schedules/")), s.name)

    last_cell = re.findall(r"<td>(.*?)</td>", row, re.S)[-1]
    assert f'href="/executions/{ran.id}/"' in last_cell, last_cell
    assert "dead" in last_cell and "scheduled" not in last_cell and "queued" not in last_cell


def test_last_run_says_never_while_the_only_execution_is_waiting(world: World) -> None:
    # The world's schedule has only its manual trigger's execution, not started yet.
    assert world.execution.state in ("scheduled", "queued")

    row = _row_of(text(world.client("viewer").get("/schedules/")), world.schedule.name)

    last_cell = re.findall(r"<td>(.*?)</td>", row, re.S)[-1]
    assert "never" in last_cell and "/executions/" not in last_cell, last_cell


# --- defect 12: bulk results name their schedules -----------------------------------------


def _item_rows(page: str) -> list[str]:
    table = page[page.index('id="operation-items"') :]
    return re.findall(r"<tr><td>\d+</td>.*?</tr>", table[: table.index("</table>")], re.S)


def test_a_schedule_operations_results_are_by_name_linking_to_each(world: World) -> None:
    etl = services.schedule_create(
        actor=world.admin_p,
        data={"name": "etl-orders", "cron": "0 3 * * *", "target": world.schedule.target},
    )
    client = world.client("operator")
    response = client.post(
        "/schedules/bulk",
        {"action": "pause", "scope": "ids", "ids": [str(world.schedule.id), str(etl.id)]}
        | {"reason": "freeze", "confirm": "on"},
    )
    assert response.status_code == 302
    rows = _item_rows(text(client.get(response["Location"])))

    assert len(rows) == 2
    for row, schedule in zip(rows, (world.schedule, etl), strict=True):
        # The name is the link's text; the id stays on the page, after it.
        link = re.search(r'<a id="item-\d+" href="([^"]+)">(.*?)</a>', row, re.S)
        assert link is not None, row
        assert link.group(1) == f"/schedules/{schedule.id}/"
        assert link.group(2).strip() == schedule.name
        assert str(schedule.id) in row[link.end() :]


def test_a_deleted_schedule_keeps_its_name_in_the_results(world: World) -> None:
    client = world.client("operator")
    response = client.post(
        "/schedules/bulk",
        {"action": "delete", "scope": "ids", "ids": [str(world.schedule.id)], "confirm": "on"},
    )
    assert response.status_code == 302
    (row,) = _item_rows(text(client.get(response["Location"])))
    assert ">ok</span>" in row and f">{world.schedule.name}</a>" in row


def test_a_run_operations_results_name_the_schedule_and_occurrence(world: World) -> None:
    now = services.db_now()
    dead = execution_row(world.schedule, now - timedelta(days=1), state="dead")
    theirs = world.other_execution
    client = world.client("operator")
    response = client.post(
        "/executions/bulk",
        {"action": "rerun", "scope": "ids", "ids": [str(dead.id), str(theirs.id)]}
        | {"confirm": "on"},
    )
    assert response.status_code == 302
    mine, other = _item_rows(text(client.get(response["Location"])))

    link = re.search(r'<a id="item-0" href="([^"]+)">(.*?)</a>', mine, re.S)
    assert link is not None, mine
    assert link.group(1) == f"/executions/{dead.id}/" and link.group(2).strip() == "nightly"
    stamp = dead.scheduled_for.isoformat().replace("+00:00", "Z")
    assert f'<time datetime="{stamp}"' in mine and str(dead.id) in mine
    # Another tenant's run names nothing here: its id only, no link, no name.
    assert ">not_found</span>" in other and str(theirs.id) in other
    assert "<a " not in other and world.other_schedule.name not in other


# --- defect 13: a finished run's page -----------------------------------------------------


def _finished(world: World, state: str = "succeeded") -> str:
    Execution.objects.filter(pk=world.execution.pk).update(state=state)
    return f"/executions/{world.execution.id}/"


def _control(page: str) -> str:
    start = page.index('id="execution-control"')
    return page[start : page.index("</div>", start)]


@pytest.mark.parametrize("state", ["succeeded", "dead", "skipped", "cancelled"])
def test_a_finished_run_offers_no_cancel_at_all(world: World, state: str) -> None:
    url = _finished(world, state)

    control = _control(text(world.client("operator").get(url)))

    assert 'id="cancel-execution"' not in control and "Cancel" not in control, control
    assert "can be cancelled" not in control
    assert f'href="{url}rerun"' in control, "re-run is what a finished run offers"


def test_a_viewer_on_a_finished_run_reads_the_reason_once(world: World) -> None:
    url = _finished(world)

    control = _control(text(world.client("viewer").get(url)))

    assert 'id="cancel-execution"' not in control
    assert re.search(r'<button type="button" class="muted" id="rerun-execution" disabled', control)
    assert control.count("need the operator role") == 1


def test_a_waiting_run_still_offers_cancel(world: World) -> None:
    url = f"/executions/{world.execution.id}/"
    control = _control(text(world.client("operator").get(url)))
    assert f'href="{url}cancel"' in control


def _scheduled_for(page: str) -> str:
    match = re.search(r"<dt>Scheduled for</dt><dd>(.*?)</dd>", page, re.S)
    assert match is not None
    return match.group(1)


@pytest.mark.parametrize("page", ["", "cancel", "rerun"])
def test_scheduled_for_is_shown_once_when_the_viewer_is_in_the_schedules_zone(
    world: World, page: str
) -> None:
    if page == "rerun":
        _finished(world)
    url = f"/executions/{world.execution.id}/{page}"
    client = world.client("operator")
    client.cookies["console_tz"] = world.schedule.timezone  # Europe/Amsterdam

    shown = _scheduled_for(text(client.get(url)))

    assert shown.count("<time ") == 1, shown
    local = world.execution.scheduled_for.astimezone(ZoneInfo("Europe/Amsterdam"))
    assert local.strftime("%Y-%m-%d %H:%M:%S") in shown

    # In another zone, both: the viewer's (the instant) and the schedule's wall time,
    # labelled with its zone.
    client.cookies["console_tz"] = "Asia/Tokyo"
    both = _scheduled_for(text(client.get(url)))
    assert both.count("<time ") == 1 and "JST" in both
    assert 'class="muted local-time"' in both and ("CET" in both or "CEST" in both)
    assert "Europe/Amsterdam" in both


# --- defect 16: durations in ms / s / min --------------------------------------------------


def _ran(world: World, ago: timedelta, took: timedelta) -> None:
    at = services.db_now() - ago
    execution_row(world.schedule, at, state="succeeded", started_at=at, finished_at=at + took)


def test_short_runs_read_in_ms_on_the_health_card_and_the_health_list(world: World) -> None:
    _ran(world, timedelta(hours=1), timedelta(milliseconds=8))
    _ran(world, timedelta(hours=2), timedelta(milliseconds=30))

    card = text(world.client("viewer").get(f"/schedules/{world.schedule.id}/"))
    day = re.search(r'<tr id="health-24h">(.*?)</tr>', card, re.S)
    assert day is not None
    assert re.findall(r"<td>(.*?)</td>", day.group(1))[-2:] == ["8 ms", "30 ms"]

    listed = text(world.client("viewer").get("/schedules/health"))
    assert "<td>8 ms / 30 ms</td>" in listed and "0.0 s" not in listed


def test_longer_runs_read_in_s_then_min(world: World) -> None:
    _ran(world, timedelta(hours=1), timedelta(milliseconds=2400))
    _ran(world, timedelta(hours=2), timedelta(seconds=90))

    card = text(world.client("viewer").get(f"/schedules/{world.schedule.id}/"))
    day = re.search(r'<tr id="health-24h">(.*?)</tr>', card, re.S)
    assert day is not None
    assert re.findall(r"<td>(.*?)</td>", day.group(1))[-2:] == ["2.4 s", "1.5 min"]


def test_the_execution_pages_fire_lag_and_jitter_read_in_ms(world: World) -> None:
    e = world.execution
    Execution.objects.filter(pk=e.pk).update(
        due_at=e.scheduled_for + timedelta(milliseconds=250),
        enqueued_at=e.scheduled_for + timedelta(milliseconds=262),
    )
    page = text(world.client("viewer").get(f"/executions/{e.id}/"))
    assert "(jitter 250 ms)" in page
    assert "<dd>12 ms from due to published</dd>" in page


def test_the_operator_views_fire_lag_reads_in_ms(world: World) -> None:
    e = world.execution
    Execution.objects.filter(pk=e.pk).update(
        due_at=e.scheduled_for,
        enqueued_at=e.scheduled_for + timedelta(milliseconds=40),
        trigger="cron",
    )
    html = text(world.client("staff").get("/ops/"))
    assert "p50 <strong>40 ms</strong>" in html


# --- defect 23: the explainer's sentence and answer badge ----------------------------------

MIDNIGHT = datetime(2026, 1, 4, 23, 0, tzinfo=UTC)  # 2026-01-05 00:00 in Amsterdam


def _answer_for(world: World, api: APIClient, **row: Any) -> tuple[str, str, dict[str, Any]]:
    """The explainer page's answer badge and sentence for the world's schedule's
    2026-01-05 midnight occurrence with an execution of `row`, and the API's answer."""
    sid = world.schedule.id
    Schedule.objects.filter(pk=sid).update(created_at=MIDNIGHT - timedelta(days=1))
    world.schedule.refresh_from_db()
    execution_row(world.schedule, MIDNIGHT, **row)
    html = text(world.client("viewer").get(f"/explain?schedule={sid}&at=2026-01-05T00:00"))
    badge = re.search(r'<span [^>]*id="answer-code"[^>]*>[^<]*</span>', html)
    sentence = re.search(r'<p class="sentence" id="answer-sentence">(.*?)</p>', html, re.S)
    assert badge is not None and sentence is not None, html[-3000:]
    answer = api.get(f"/v1/schedules/{sid}/explain", {"at": "2026-01-04T23:00:00Z"}).json()
    return badge.group(0), sentence.group(1), answer


@pytest.mark.parametrize(
    ("row", "code", "tone", "label"),
    [
        ({"state": "dead", "error": "HTTP 503"}, "dead", "bad", "Dead"),
        ({"state": "succeeded"}, "ran", "ok", "Ran"),
        (
            {"state": "skipped", "reason_code": "overlap_forbid", "reason": "previous run"},
            "skipped_overlap",
            "warn",
            "Skipped: overlap",
        ),
    ],
)
def test_the_answer_reads_as_a_sentence_with_a_coloured_worded_badge(
    world: World,
    api_for: Callable[[Tenant, Role], APIClient],
    row: dict[str, Any],
    code: str,
    tone: str,
    label: str,
) -> None:
    badge, sentence, api = _answer_for(world, api_for(world.tenant, Role.VIEWER), **row)

    assert f'class="badge badge-{tone}"' in badge, badge
    assert f">{label}</span>" in badge and f'data-code="{code}"' in badge
    assert sentence[:1].isupper(), sentence
    # The API answers as before: the code, and the sentence as the explainer wrote it
    # (to be quoted inside others: lower case).
    assert api["code"] == code and api["sentence"][:1].islower()
    assert sentence == api["sentence"][:1].upper() + api["sentence"][1:]


def test_every_answer_code_has_a_tone_and_a_label() -> None:
    from console.templatetags.console_tags import ANSWER_TONES

    # Each code's tone is decided, none left to the default by oversight.
    assert set(ANSWER_TONES) == set(ExplainCode.values)
    badge = Template("{% load console_tags %}{{ code|answer_badge }}")
    for code in ExplainCode:
        html = badge.render(Context({"code": code.value}))
        assert f'class="badge badge-{ANSWER_TONES[code]}"' in html, code
        shown = re.search(r">([^<]+)</span>", html)
        assert shown is not None and "_" not in shown.group(1) and shown.group(1)[0].isupper()
        assert f'title="{code.value}: {escape(code.label)}"' in html, "the meaning on hover"
