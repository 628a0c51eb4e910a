"""The runs page's bulk bar (Django test client, real PostgreSQL): checkboxes for
operators only; cancel / re-run by the checked rows or by the page's filter,
reviewed (how many, what happens to each) before the confirm button; a filter
the bulk request cannot express is refused rather than widened; another
tenant's ids are per-item not found; CSRF; viewers 403."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from dispatch import services
from dispatch.models import Execution, ExecutionState, Operation
from tests.support.console_support import World, db_now

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(world: World) -> World:
    """The shared world (tests/integration/conftest.py) with two dead runs of "nightly"
    besides the scheduled one the world triggered."""
    for days in (1, 2):
        at = db_now() - timedelta(days=days)
        Execution.objects.create(
            schedule=world.schedule,
            tenant=world.tenant,
            scheduled_for=at,
            due_at=at,
            state=ExecutionState.DEAD,
            error="HTTP 503",
        )
    return world


def _dead(world: World) -> list[Execution]:
    return list(Execution.objects.filter(schedule=world.schedule, state=ExecutionState.DEAD))


def test_checkboxes_and_the_bar_are_for_operators_only(world: World) -> None:
    page = world.client("operator").get("/runs/").content.decode()
    assert 'id="runs-bulk-form"' in page
    assert len(re.findall(r'name="ids" value="[0-9a-f-]{36}" form="runs-bulk-form"', page)) == 3
    viewer = world.client("viewer").get("/runs/").content.decode()
    assert 'id="runs-bulk-form"' not in viewer and 'name="ids"' not in viewer
    ids = [str(e.id) for e in _dead(world)]
    response = world.client("viewer").post("/executions/bulk", {"action": "rerun", "ids": ids})
    assert response.status_code == 403


def test_cancel_the_selected_run_reviewed_first(world: World) -> None:
    client = world.client("operator")
    data = {
        "action": "cancel",
        "scope": "ids",
        "ids": [str(world.execution.id)],
        "reason": "deploy freeze",
    }
    review = client.post("/executions/bulk", data)
    assert review.status_code == 200, review.content[:3000]
    text = review.content.decode()
    assert "Cancel 1 execution?" in text and "may already have reached its target" in text
    world.execution.refresh_from_db()
    assert world.execution.state == ExecutionState.SCHEDULED, "the review changes nothing"
    response = client.post("/executions/bulk", data | {"confirm": "on"})
    assert response.status_code == 302
    operation = Operation.objects.get()
    assert response["Location"] == f"/operations/{operation.id}/"
    world.execution.refresh_from_db()
    assert world.execution.state == ExecutionState.CANCELLED
    assert "deploy freeze" in world.execution.reason
    page = client.get(response["Location"]).content.decode()
    assert f'href="/executions/{world.execution.id}/"' in page and ">ok</span>" in page


def test_rerun_all_matching_the_pages_filter(world: World) -> None:
    client = world.client("operator")
    page = client.get(f"/runs/?state=dead&schedule={world.schedule.id}").content.decode()
    assert re.search(r'name="state" value="dead" form="runs-bulk-form"', page)
    assert re.search(rf'name="schedule" value="{world.schedule.id}" form="runs-bulk-form"', page)
    data = {
        "action": "rerun",
        "scope": "filter",
        "state": "dead",
        "schedule": str(world.schedule.id),
    }
    text = client.post("/executions/bulk", data).content.decode()
    assert "Re-run 2 executions matching the filter?" in text
    assert "next attempt with a new fencing token" in text
    response = client.post("/executions/bulk", data | {"confirm": "on"})
    assert response.status_code == 302
    rows = Execution.objects.filter(schedule=world.schedule).exclude(pk=world.execution.pk)
    assert {(e.state, e.reruns) for e in rows} == {(ExecutionState.SCHEDULED, 1)}
    world.execution.refresh_from_db()
    assert world.execution.reruns == 0, "the scheduled run was not part of the filter"


def test_a_filter_the_bulk_request_cannot_express_is_refused(world: World) -> None:
    data = {"action": "rerun", "scope": "filter", "state": "dead", "error": "503"}
    response = world.client("operator").post("/executions/bulk", data)
    assert response.status_code == 400
    assert "filter: error cannot pick a bulk action" in response.content.decode()
    assert not Operation.objects.exists()


def test_another_tenants_runs_are_not_found_per_item_and_untouched(world: World) -> None:
    client = world.client("operator")
    theirs = world.other_execution
    data = {
        "action": "cancel",
        "scope": "ids",
        "ids": [str(theirs.id), str(world.execution.id)],
        "confirm": "on",
    }
    response = client.post("/executions/bulk", data)
    assert response.status_code == 302
    page = client.get(response["Location"]).content.decode()
    assert ">not_found</span>" in page and f'href="/executions/{theirs.id}/"' not in page
    theirs.refresh_from_db()
    assert theirs.state == ExecutionState.SCHEDULED


def test_rerun_with_a_reason_is_a_400_naming_it(world: World) -> None:
    ids = [str(e.id) for e in _dead(world)]
    data = {"action": "rerun", "ids": ids, "scope": "ids", "reason": "x", "confirm": "on"}
    response = world.client("operator").post("/executions/bulk", data)
    assert response.status_code == 400
    assert "reason: only with action cancel" in response.content.decode()
    assert not Operation.objects.exists()


def test_bulk_runs_need_the_csrf_token(world: World) -> None:
    client = world.client("operator", csrf=True)
    ids = [str(e.id) for e in _dead(world)]
    response = client.post("/executions/bulk", {"action": "rerun", "ids": ids, "confirm": "on"})
    assert response.status_code == 403 and b"CSRF" in response.content
    assert all(e.reruns == 0 for e in _dead(world))


def test_the_services_still_reach_the_per_item_conflicts(world: World) -> None:
    # A re-run of a scheduled run is a conflict of that item, not an error of the page.
    services.execution_cancel(actor=world.admin_p, execution_id=world.execution.id)
    ids = [str(world.execution.id), str(_dead(world)[0].id)]
    Execution.objects.filter(pk=world.execution.pk).update(state=ExecutionState.RUNNING)
    response = world.client("operator").post(
        "/executions/bulk", {"action": "rerun", "scope": "ids", "ids": ids, "confirm": "on"}
    )
    assert response.status_code == 302
    page = world.client("operator").get(response["Location"]).content.decode()
    items = page[page.index('id="operation-items"') :]
    assert ">conflict</span>" in items and ">ok</span>" in items
    assert "execution is running" in items


def test_the_trigger_filter_narrows_all_matching(world: World) -> None:
    client = world.client("operator")
    data = {"action": "cancel", "scope": "filter", "trigger": "manual", "reason": "freeze"}
    text = client.post("/executions/bulk", data).content.decode()
    assert "Cancel 1 execution matching the filter?" in text
    response = client.post("/executions/bulk", data | {"confirm": "on"})
    assert response.status_code == 302
    world.execution.refresh_from_db()
    assert world.execution.state == ExecutionState.CANCELLED
    assert len(_dead(world)) == 2, "the cron-triggered dead runs were not part of it"
