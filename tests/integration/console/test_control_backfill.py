"""The schedule page's Backfill form (Django test client, real PostgreSQL): the
dry run's table comes before the confirm button and writes nothing; confirming
creates the backfill, listed on the schedule with its progress fragment (which
polls only while there is something left to watch); bad input is a 400 naming
the field, shown on the form; operators only, CSRF on both steps, another
tenant's schedule or backfill is a 404."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from dispatch import services
from dispatch.models import Backfill, Execution
from dispatch.states import ControlState
from tests.support.console_support import TARGET, World, db_now

pytestmark = pytest.mark.django_db
AMS = ZoneInfo("Europe/Amsterdam")


def _local(days_ago: int, time: str = "00:30") -> str:
    """A datetime-local value in Amsterdam, `days_ago` days before today there."""
    day = (db_now().astimezone(AMS) - timedelta(days=days_ago)).date()
    return f"{day.isoformat()}T{time}"


def _form(**overrides: Any) -> dict[str, Any]:
    # The world's "nightly" runs at 00:00 Amsterdam: D-6 .. D-2, five occurrences.
    data: dict[str, Any] = {
        "range_from": _local(7),
        "range_to": _local(2),
        "reprocess": "none",
        "max_concurrent": "2",
        "order": "oldest",
    }
    data.update(overrides)
    return data


def _table(response: Any) -> str:
    text: str = response.content.decode()
    return text[text.index('id="plan-table"') :]


def _url(world: World) -> str:
    return f"/schedules/{world.schedule.id}/backfill"


def test_the_schedule_page_has_the_form_for_operators_only(world: World) -> None:
    page = world.client("operator").get(f"/schedules/{world.schedule.id}/").content.decode()
    assert 'id="backfill-form"' in page and 'id="backfill-dry-run"' in page
    assert "Europe/Amsterdam" in page
    assert 'id="backfill-confirm"' not in page, "no confirm button before a dry run"
    viewer = world.client("viewer").get(f"/schedules/{world.schedule.id}/").content.decode()
    assert 'id="backfill-form"' not in viewer
    assert world.client("viewer").post(_url(world), _form()).status_code == 403
    assert not Backfill.objects.exists()


def test_dry_run_says_what_happens_then_the_confirm_then_each_occurrence(
    world: World,
) -> None:
    response = world.client("operator").post(_url(world), _form())
    assert response.status_code == 200, response.content[:3000]
    text = response.content.decode()
    assert "Dry run: 5 occurrences" in text
    table = text[text.index('id="plan-table"') :]
    assert len(re.findall(r"<tr><td>\d+</td>", table)) == 5
    assert table.count(">create</span>") == 5
    # The same action in a row is one line, and the confirm comes right after those
    # lines, before the list of every occurrence (open: a short one).
    spans = text[text.index('id="plan-spans"') : text.index("</ul>", text.index('id="plan-spans"'))]
    assert spans.count("<li>") == 1 and ">create</span> #1-5 (5)" in spans
    assert (
        text.index('id="plan-spans"')
        < text.index('id="backfill-confirm"')
        < text.index('id="plan-table"')
    )
    assert '<details id="plan-details" open>' in text
    assert "Run backfill: 5 to run" in text
    # A month of nights: the list is folded away, the confirm still right after the lines.
    month = world.client("operator").post(_url(world), _form(range_from=_local(32))).content
    longer = month.decode()
    assert "Dry run: 30 occurrences" in longer, longer[:2000]
    assert '<details id="plan-details">' in longer
    assert longer.index('id="backfill-confirm"') < longer.index('id="plan-table"')
    assert not Backfill.objects.exists()
    assert Execution.objects.filter(schedule=world.schedule).count() == 1


def test_htmx_dry_run_answers_the_section_only(world: World) -> None:
    response = world.client("operator").post(_url(world), _form(), HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    text = response.content.decode()
    assert text.lstrip().startswith(
        '<section class="card" aria-labelledby="backfill-h" id="backfill">'
    )
    assert "<html" not in text and 'id="backfill-confirm"' in text
    # A bad range over htmx comes back in the section too (htmx swaps only 2xx answers).
    response = world.client("operator").post(
        _url(world), _form(range_to=_local(9)), HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 200
    assert "to: must be after from" in response.content.decode()


def test_existing_executions_are_skipped_or_rerun_by_reprocess(world: World) -> None:
    day = (db_now().astimezone(AMS) - timedelta(days=4)).date()
    at = datetime(day.year, day.month, day.day, tzinfo=AMS)
    Execution.objects.create(
        schedule=world.schedule,
        tenant=world.tenant,
        scheduled_for=at,
        due_at=at,
        state="dead",
    )
    text = _table(world.client("operator").post(_url(world), _form()))
    assert text.count(">create</span>") == 4 and text.count(">skip-existing</span>") == 1
    text = _table(world.client("operator").post(_url(world), _form(reprocess="failed")))
    assert text.count(">create</span>") == 4 and text.count(">rerun</span>") == 1


def test_confirm_creates_the_backfill_listed_with_its_live_progress(world: World) -> None:
    client = world.client("operator")
    dry = client.post(_url(world), _form()).content.decode()
    carried = dict(re.findall(r'<input type="hidden" name="([a-z_]+)" value="([^"]*)"', dry))
    assert carried["confirm"] == "1" and carried["range_from"] == _local(7)
    response = client.post(_url(world), carried)
    assert response.status_code == 302
    assert response["Location"].endswith("#backfills")
    backfill = Backfill.objects.get(schedule=world.schedule)
    assert len(backfill.plan) == 5 and backfill.max_concurrent == 2
    assert backfill.created_by == "user:olga"
    page = client.get(response["Location"].split("#")[0]).content.decode()
    assert 'id="backfills"' in page and "Backfill started: 5 to run." in page
    fragment = re.search(rf'<div id="backfill-{backfill.id}"[^>]*>', page)
    assert fragment and 'hx-trigger="every 2s"' in fragment.group(0)
    assert f'id="cancel-backfill-{backfill.id}"' in page

    # The fragment the page polls: still live while it runs; once done with
    # nothing active, it has no trigger, so the polling stops.
    progress = client.get(f"/backfills/{backfill.id}/progress").content.decode()
    assert "0 of 5 released" in progress and 'hx-trigger="every 2s"' in progress
    Backfill.objects.filter(pk=backfill.pk).update(state=ControlState.DONE, position=5)
    progress = client.get(f"/backfills/{backfill.id}/progress").content.decode()
    assert "5 of 5 released" in progress and "hx-trigger" not in progress
    assert "cancel-backfill" not in progress


def test_cancel_a_backfill_then_again_then_a_finished_one(world: World) -> None:
    backfill = services.backfill_create(
        actor=world.admin_p,
        schedule_id=world.schedule.id,
        range_from=db_now() - timedelta(days=7),
        range_to=db_now() - timedelta(days=2),
    ).backfill
    assert backfill is not None
    client = world.client("operator")
    assert world.client("viewer").post(f"/backfills/{backfill.id}/cancel").status_code == 403
    response = client.post(f"/backfills/{backfill.id}/cancel")
    assert response.status_code == 302
    backfill.refresh_from_db()
    assert backfill.state == ControlState.CANCELLED and backfill.cancelled_by == "user:olga"
    assert client.post(f"/backfills/{backfill.id}/cancel").status_code == 302
    Backfill.objects.filter(pk=backfill.pk).update(state=ControlState.DONE)
    response = client.post(f"/backfills/{backfill.id}/cancel")
    assert response.status_code == 409
    assert b"backfill is done" in response.content


@pytest.mark.parametrize(
    "overrides,needle",
    [
        ({"range_to": 9}, "to: must be after from"),
        ({"range_to": -2}, "to: must not be in the future"),
        ({"range_from": "yesterday"}, "from: is not a date and time"),
        ({"max_concurrent": "0"}, "max_concurrent: must be in 1..100"),
        ({"reprocess": "some"}, "Select a valid choice"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_on_the_form(
    world: World, overrides: dict[str, str | int], needle: str
) -> None:
    # (A number is that many days ago, read when the test runs.)
    data = {k: _local(v) if isinstance(v, int) else v for k, v in overrides.items()}
    response = world.client("operator").post(_url(world), _form(**data))
    assert response.status_code == 400
    text = response.content.decode()
    assert needle in text, text[:4000]
    assert 'id="backfill-confirm"' not in text
    assert not Backfill.objects.exists()


def test_a_one_off_job_has_no_form_and_a_post_is_a_400(world: World) -> None:
    once = services.schedule_create(
        actor=world.admin_p,
        data={
            "name": "once",
            "run_at": db_now() + timedelta(days=1),
            "target": TARGET,
        },
    )
    page = world.client("operator").get(f"/schedules/{once.id}/").content.decode()
    assert 'id="backfill-form"' not in page
    response = world.client("operator").post(f"/schedules/{once.id}/backfill", _form())
    assert response.status_code == 400
    assert b"one-off job" in response.content


def test_backfill_needs_the_csrf_token(world: World) -> None:
    client = world.client("operator", csrf=True)
    response = client.post(_url(world), _form())
    assert response.status_code == 403 and b"CSRF" in response.content
    response = client.post(_url(world), _form(confirm="1"))
    assert response.status_code == 403
    assert not Backfill.objects.exists()
    backfill = services.backfill_create(
        actor=world.admin_p,
        schedule_id=world.schedule.id,
        range_from=db_now() - timedelta(days=3),
        range_to=db_now() - timedelta(days=1),
    ).backfill
    assert backfill is not None
    response = client.post(f"/backfills/{backfill.id}/cancel")
    assert response.status_code == 403 and b"CSRF" in response.content
    backfill.refresh_from_db()
    assert backfill.state == ControlState.RUNNING


def test_another_tenants_schedule_and_backfill_are_404(world: World) -> None:
    theirs = services.backfill_create(
        actor=world.outsider_p,
        schedule_id=world.other_schedule.id,
        range_from=db_now() - timedelta(days=3),
        range_to=db_now() - timedelta(days=1),
    ).backfill
    assert theirs is not None
    client = world.client("admin")
    assert client.post(f"/schedules/{world.other_schedule.id}/backfill", _form()).status_code == 404
    assert client.get(f"/backfills/{theirs.id}/progress").status_code == 404
    assert client.post(f"/backfills/{theirs.id}/cancel").status_code == 404
    theirs.refresh_from_db()
    assert theirs.state == ControlState.RUNNING
    assert Backfill.objects.filter(schedule=world.other_schedule).count() == 1
