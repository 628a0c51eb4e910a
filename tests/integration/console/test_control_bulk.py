"""The schedule list's bulk bar (Django test client, real PostgreSQL): checkboxes
for operators only; a review page (the service's dry run: for resume the combined
misfire preview) before the confirm button; by selected ids or by the list's
filter; the operation page with per-item results and progress that polls only
while it runs; errors naming the field; CSRF; another tenant's ids are per-item
not found and untouched, another tenant's operation a 404."""

from __future__ import annotations

import re
from datetime import UTC, timedelta
from typing import Any

import pytest

from dispatch import services
from dispatch.models import Operation, Schedule
from dispatch.states import ControlState
from tests.support.console_support import World, bulk_schedules, db_now

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(world: World) -> World:
    """The shared world (tests/integration/conftest.py) with three "etl" schedules."""
    bulk_schedules(world.tenant, 3, prefix="etl")
    return world


def _etl() -> list[Schedule]:
    return list(Schedule.objects.filter(name__startswith="etl-").order_by("name"))


def _ids(schedules: list[Schedule]) -> list[str]:
    return [str(s.id) for s in schedules]


def test_checkboxes_and_the_bar_are_for_operators_only(world: World) -> None:
    page = world.client("operator").get("/schedules/").content.decode()
    assert 'id="bulk-form"' in page
    assert page.count('name="ids"') == 4  # nightly + 3 etl
    assert re.search(
        r'<form method="post" action="/schedules/bulk"[^>]*>\s*<input type="hidden" name="csrfmiddlewaretoken"',
        page,
    )
    viewer = world.client("viewer").get("/schedules/").content.decode()
    assert 'id="bulk-form"' not in viewer and 'name="ids"' not in viewer
    response = world.client("viewer").post(
        "/schedules/bulk", {"action": "pause", "ids": _ids(_etl())}
    )
    assert response.status_code == 403
    assert not Schedule.objects.filter(paused=True).exists()


def test_pause_by_ids_reviews_first_then_pauses_with_one_reason_and_until(world: World) -> None:
    client = world.client("operator")
    picked = _etl()[:2]
    until = (db_now() + timedelta(days=1)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M")
    data = {
        "action": "pause",
        "scope": "ids",
        "ids": _ids(picked),
        "reason": "deploy freeze",
        "until": until,
    }
    review = client.post("/schedules/bulk", data)
    assert review.status_code == 200, review.content[:3000]
    text = review.content.decode()
    assert "Pause 2 schedules?" in text and "Pausing 2 schedules." in text
    assert 'id="bulk-confirm"' in text and "etl-0000" in text and "etl-0001" in text
    assert not Schedule.objects.filter(paused=True).exists(), "the review changes nothing"
    carried = re.findall(r'<input type="hidden" name="([a-z]+)" value="([^"]*)"', text)
    form: dict[str, list[str]] = {}
    for name, value in carried:
        form.setdefault(name, []).append(value)
    assert form["confirm"] == ["on"] and sorted(form["ids"]) == sorted(_ids(picked))
    response = client.post("/schedules/bulk", form)
    assert response.status_code == 302
    operation = Operation.objects.get()
    assert response["Location"] == f"/operations/{operation.id}/"
    assert operation.state == ControlState.DONE and operation.succeeded == 2
    paused = Schedule.objects.filter(paused=True)
    assert {s.name for s in paused} == {"etl-0000", "etl-0001"}
    assert all(s.paused_reason == "deploy freeze" and s.paused_until for s in paused)
    page = client.get(response["Location"]).content.decode()
    assert "Bulk pause of 2 schedules" in page and page.count(">ok</span>") == 2
    assert "hx-trigger" not in page, "a finished operation does not poll"


def test_resume_review_shows_the_combined_preview(world: World) -> None:
    for s in _etl():
        services.schedule_pause(actor=world.admin_p, schedule_id=s.id, reason="x")
    # Their next runs were missed while paused (misfire skip: one skipped each).
    Schedule.objects.filter(name__startswith="etl-").update(
        next_run_at=db_now() - timedelta(days=2)
    )
    review = world.client("operator").post(
        "/schedules/bulk", {"action": "resume", "scope": "ids", "ids": _ids(_etl())}
    )
    assert review.status_code == 200
    text = review.content.decode()
    match = re.search(r"Resuming 3 schedules will run (\d+) occurrences? and skip (\d+)", text)
    assert match, text[:3000]
    assert Schedule.objects.filter(paused=True).count() == 3


def test_all_matching_the_filter_acts_on_the_filter_not_the_page(world: World) -> None:
    client = world.client("operator")
    page = client.get("/schedules/?q=etl").content.decode()
    assert re.search(r'name="q" value="etl" form="bulk-form"', page)
    data = {"action": "pause", "scope": "filter", "q": "etl", "reason": "freeze"}
    review = client.post("/schedules/bulk", data).content.decode()
    assert "Pause 3 schedules matching the filter?" in review
    response = client.post("/schedules/bulk", data | {"confirm": "on"})
    assert response.status_code == 302
    assert {s.name for s in Schedule.objects.filter(paused=True)} == {
        "etl-0000",
        "etl-0001",
        "etl-0002",
    }
    assert not Schedule.objects.get(pk=world.schedule.pk).paused


def test_another_tenants_ids_are_not_found_per_item_and_untouched(world: World) -> None:
    client = world.client("operator")
    data = {
        "action": "pause",
        "scope": "ids",
        "ids": [*_ids(_etl()[:1]), str(world.other_schedule.id)],
        "confirm": "on",
    }
    response = client.post("/schedules/bulk", data)
    assert response.status_code == 302
    page = client.get(response["Location"]).content.decode()
    assert ">not_found</span>" in page and ">ok</span>" in page
    assert f'href="/schedules/{world.other_schedule.id}/"' not in page
    world.other_schedule.refresh_from_db()
    assert not world.other_schedule.paused
    # Their operation page is a 404 to us, ours to them.
    operation = Operation.objects.get()
    assert world.client("outsider").get(f"/operations/{operation.id}/").status_code == 404
    assert world.client("outsider").post(f"/operations/{operation.id}/cancel").status_code == 404


@pytest.mark.parametrize(
    "data,needle",
    [
        ({"action": "pause", "scope": "ids"}, "ids: select at least one row"),
        ({"action": "pause", "ids": ["not-an-id"]}, "ids: not an id"),
        ({"action": "pause", "ids": "__etl__", "until": "soon"}, "until: is not a date and time"),
        (
            {"action": "resume", "ids": "__etl__", "until": "2099-01-01T00:00"},
            "until: only with action pause",
        ),
        ({"action": "explode", "ids": "__etl__"}, "action: Select a valid choice"),
        (
            {"action": "pause", "ids": "__etl__", "reason": "r" * 501},
            "reason: Ensure this value has at most 500",
        ),
    ],
)
def test_bad_requests_are_a_400_naming_the_field(
    world: World, data: dict[str, Any], needle: str
) -> None:
    data = {"scope": "ids", **data}
    if data.get("ids") == "__etl__":
        data["ids"] = _ids(_etl())
    response = world.client("operator").post("/schedules/bulk", data)
    assert response.status_code == 400
    text = response.content.decode()
    assert 'id="bulk-error"' in text and needle in text, text[:3000]
    assert not Operation.objects.exists()


def test_bulk_and_stopping_an_operation_need_the_csrf_token(world: World, settings: Any) -> None:
    client = world.client("operator", csrf=True)
    data = {"action": "delete", "scope": "ids", "ids": _ids(_etl()), "confirm": "on"}
    response = client.post("/schedules/bulk", data)
    assert response.status_code == 403 and b"CSRF" in response.content
    assert Schedule.objects.filter(name__startswith="etl-", deleted_at__isnull=True).count() == 3
    settings.BULK_SYNC_MAX = 1
    outcome = services.bulk_schedules(actor=world.admin_p, action="trigger", ids=_ids(_etl()))
    assert outcome.operation is not None
    response = client.post(f"/operations/{outcome.operation.id}/cancel")
    assert response.status_code == 403 and b"CSRF" in response.content
    outcome.operation.refresh_from_db()
    assert outcome.operation.state == ControlState.RUNNING


def test_a_running_operation_polls_its_progress_and_can_be_stopped(
    world: World, settings: Any
) -> None:
    settings.BULK_SYNC_MAX = 1  # three items: left running for the control pump
    client = world.client("operator")
    response = client.post(
        "/schedules/bulk",
        {"action": "trigger", "scope": "ids", "ids": _ids(_etl()), "confirm": "on"},
    )
    assert response.status_code == 302
    operation = Operation.objects.get()
    assert operation.state == ControlState.RUNNING
    page = client.get(response["Location"]).content.decode()
    assert re.search(r'<section id="operation-progress"[^>]*hx-trigger="every 2s"', page)
    assert "0 of 3 done" in page and 'id="cancel-operation"' in page
    fragment = client.get(
        response["Location"], HTTP_HX_REQUEST="true", HTTP_HX_TARGET="operation-progress"
    ).content.decode()
    assert (
        fragment.lstrip().startswith('<section id="operation-progress"') and "<html" not in fragment
    )
    assert world.client("viewer").post(f"/operations/{operation.id}/cancel").status_code == 403
    assert client.post(f"/operations/{operation.id}/cancel").status_code == 302
    operation.refresh_from_db()
    assert operation.state == ControlState.CANCELLED
    page = client.get(response["Location"]).content.decode()
    items = page[page.index('id="operation-items"') :]
    assert "hx-trigger" not in page and items.count(">cancelled</span>") == 3
    # Stopping a finished operation again: the 409 names the state, on the page.
    Operation.objects.filter(pk=operation.pk).update(state=ControlState.DONE)
    response = client.post(f"/operations/{operation.id}/cancel")
    assert response.status_code == 409 and b"operation is done" in response.content
