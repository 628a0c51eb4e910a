"""The execution page's Cancel and Re-run (Django test client, real PostgreSQL):
operators only (a viewer sees the buttons disabled with the reason, and a POST is
403), each asks first and says what will happen, CSRF on the POST, another
tenant's execution is a 404, and the services' 409 / 400 are shown on the page."""

from __future__ import annotations

import re

import pytest

from dispatch.models import Execution, ExecutionState
from tenants.models import AuditEvent
from tests.support.console_support import World

pytestmark = pytest.mark.django_db


def _finish(execution: Execution, state: ExecutionState = ExecutionState.DEAD) -> None:
    Execution.objects.filter(pk=execution.pk).update(state=state, error="HTTP 503")


def test_viewer_sees_both_buttons_disabled_with_the_reason_and_is_refused(world: World) -> None:
    url = f"/executions/{world.execution.id}/"
    page = world.client("viewer").get(url).content.decode()
    assert re.search(r'<button type="button" class="muted" id="cancel-execution" disabled', page)
    assert re.search(r'<button type="button" class="muted" id="rerun-execution" disabled', page)
    assert "Cancel and re-run need the operator role; you are viewer." in page
    assert f"{url}cancel" not in page and f"{url}rerun" not in page
    client = world.client("viewer")
    for action in ("cancel", "rerun"):
        assert client.get(f"{url}{action}").status_code == 403
        assert client.post(f"{url}{action}", {"reason": "x"}).status_code == 403
    world.execution.refresh_from_db()
    assert world.execution.state == ExecutionState.SCHEDULED


def test_operator_buttons_follow_the_state(world: World) -> None:
    url = f"/executions/{world.execution.id}/"
    client = world.client("operator")
    page = client.get(url).content.decode()
    assert f'href="{url}cancel"' in page, "a scheduled execution can be cancelled"
    assert re.search(r'<button type="button" class="muted" id="rerun-execution" disabled', page)
    assert "only a final execution (succeeded, dead, skipped, cancelled) can be re-run" in page
    _finish(world.execution)
    page = client.get(url).content.decode()
    assert f'href="{url}rerun"' in page
    # Over for good: no Cancel at all (a disabled one beside its reason read as an offer).
    assert 'id="cancel-execution"' not in page and "can be cancelled" not in page


def test_cancel_asks_first_then_cancels_with_the_reason(world: World) -> None:
    url = f"/executions/{world.execution.id}/cancel"
    client = world.client("operator")
    page = client.get(url).content.decode()
    assert "Cancel this execution" in page
    assert "Its fencing token is bumped" in page
    assert 'name="csrfmiddlewaretoken"' in page
    world.execution.refresh_from_db()
    assert world.execution.state == ExecutionState.SCHEDULED, "GET changes nothing"
    response = client.post(url, {"reason": "deploy freeze"})
    assert response.status_code == 302
    assert response["Location"] == f"/executions/{world.execution.id}/"
    world.execution.refresh_from_db()
    assert world.execution.state == ExecutionState.CANCELLED
    assert "deploy freeze" in world.execution.reason
    assert AuditEvent.objects.filter(
        action="execution.cancel", object_id=str(world.execution.id), actor_label="user:olga"
    ).exists()
    # Again (a double click, a stale tab): idempotent, said so, no second audit row.
    response = client.post(url, {"reason": "again"}, follow=True)
    assert b"already cancelled" in response.content
    assert AuditEvent.objects.filter(action="execution.cancel").count() == 1


def test_cancel_of_a_running_attempt_says_the_call_may_have_reached_the_target(
    world: World,
) -> None:
    Execution.objects.filter(pk=world.execution.pk).update(
        state=ExecutionState.RUNNING, lease_owner="w1", fencing_token=4
    )
    page = world.client("operator").get(f"/executions/{world.execution.id}/cancel")
    text = page.content.decode()
    assert "fencing token is bumped (4 → 5)" in text
    assert "the worker stops it within ~10 s" in text
    assert "The call may already have reached the target" in text


def test_cancel_of_a_final_execution_shows_the_409_naming_the_state(world: World) -> None:
    _finish(world.execution, ExecutionState.SUCCEEDED)
    response = world.client("operator").post(
        f"/executions/{world.execution.id}/cancel", {"reason": "late"}
    )
    assert response.status_code == 409
    text = response.content.decode()
    assert 'id="control-error"' in text and "succeeded" in text
    world.execution.refresh_from_db()
    assert world.execution.state == ExecutionState.SUCCEEDED


def test_cancel_reason_too_long_is_a_400_naming_the_field(world: World) -> None:
    response = world.client("operator").post(
        f"/executions/{world.execution.id}/cancel", {"reason": "x" * 501}
    )
    assert response.status_code == 400
    assert b"at most 500 characters" in response.content
    world.execution.refresh_from_db()
    assert world.execution.state == ExecutionState.SCHEDULED


def test_rerun_form_is_prefilled_with_the_schedules_payload_and_says_what_happens(
    world: World,
) -> None:
    _finish(world.execution)
    world.execution.refresh_from_db()
    page = world.client("operator").get(f"/executions/{world.execution.id}/rerun")
    text = page.content.decode()
    assert f"attempt {world.execution.attempt + 1}" in text
    assert f"new fencing token ({world.execution.fencing_token + 1})" in text
    assert "same <code>X-Scheduled-For</code>" in text
    assert 'name="headers"' in text and 'name="payload"' in text
    assert "never their values" in text


def test_rerun_with_an_edited_body_records_the_override(world: World) -> None:
    _finish(world.execution)
    response = world.client("operator").post(
        f"/executions/{world.execution.id}/rerun",
        {"payload": '{"replay": true}', "headers": '{"X-Reason": "replay"}'},
    )
    assert response.status_code == 302, response.content[:2000]
    world.execution.refresh_from_db()
    assert world.execution.state == ExecutionState.SCHEDULED
    assert world.execution.reruns == 1 and world.execution.attempt == 2
    assert world.execution.target_override is not None
    assert world.execution.target_override["body"] == {"replay": True}
    assert world.execution.target_override["headers"] == {"X-Reason": "replay"}
    assert AuditEvent.objects.filter(
        action="execution.rerun", object_id=str(world.execution.id)
    ).exists()


def test_rerun_without_edits_runs_the_schedules_target(world: World) -> None:
    _finish(world.execution)
    response = world.client("operator").post(
        f"/executions/{world.execution.id}/rerun", {"payload": "", "headers": "{}"}
    )
    assert response.status_code == 302
    world.execution.refresh_from_db()
    assert world.execution.reruns == 1 and world.execution.target_override is None


def test_rerun_of_an_active_execution_shows_the_409_naming_the_state(world: World) -> None:
    response = world.client("operator").post(f"/executions/{world.execution.id}/rerun", {})
    assert response.status_code == 409
    text = response.content.decode()
    assert 'id="control-error"' in text and "scheduled" in text
    world.execution.refresh_from_db()
    assert world.execution.reruns == 0


@pytest.mark.parametrize(
    "data,needle",
    [
        ({"payload": "{not json"}, "payload: is not valid JSON"),
        ({"headers": "[1, 2]"}, "headers: must be a JSON object"),
        ({"headers": '{"Authorization": "Bearer hunter2"}'}, "target.headers"),
    ],
)
def test_rerun_bad_payload_is_a_400_naming_the_field(
    world: World, data: dict[str, str], needle: str
) -> None:
    _finish(world.execution)
    response = world.client("operator").post(f"/executions/{world.execution.id}/rerun", data)
    assert response.status_code == 400
    assert needle in response.content.decode()
    world.execution.refresh_from_db()
    assert world.execution.reruns == 0 and world.execution.state == ExecutionState.DEAD


def test_cancel_and_rerun_need_the_csrf_token(world: World) -> None:
    client = world.client("operator", csrf=True)
    for action in ("cancel", "rerun"):
        response = client.post(f"/executions/{world.execution.id}/{action}", {})
        assert response.status_code == 403 and b"CSRF" in response.content
    page = client.get(f"/executions/{world.execution.id}/cancel").content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token
    response = client.post(
        f"/executions/{world.execution.id}/cancel", {"csrfmiddlewaretoken": token.group(1)}
    )
    assert response.status_code == 302
    world.execution.refresh_from_db()
    assert world.execution.state == ExecutionState.CANCELLED


def test_another_tenants_execution_is_404_and_untouched(world: World) -> None:
    client = world.client("admin")
    theirs = world.other_execution
    _finish(theirs)
    for action in ("cancel", "rerun"):
        assert client.get(f"/executions/{theirs.id}/{action}").status_code == 404
        assert client.post(f"/executions/{theirs.id}/{action}", {}).status_code == 404
    missing = "00000000-0000-0000-0000-00000000abcd"
    assert client.post(f"/executions/{missing}/cancel", {}).status_code == 404
    theirs.refresh_from_db()
    assert theirs.state == ExecutionState.DEAD and theirs.reruns == 0
