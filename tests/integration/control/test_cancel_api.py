"""`POST /v1/executions/{id}:cancel`: who may, which states, what is recorded.

Without workers: the rows are written as the beat and the worker leave them; the
stop of a running attempt by real processes is in test_cancel_processes.py.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from dispatch import services
from dispatch.models import Execution, ExecutionEvent, Schedule
from tenants.models import AuditEvent, Tenant
from tenants.roles import Principal, Role
from tests.conftest import make_principal
from tests.support.rows import execution_row

pytestmark = pytest.mark.django_db


def _schedule(principal: Principal, name: str = "nightly", **extra: Any) -> Schedule:
    return services.schedule_create(
        actor=principal,
        data={
            "name": name,
            "cron": "0 3 * * *",
            "target": {"type": "http", "url": "https://billing.internal/hook"},
        }
        | extra,
    )


def _execution(schedule: Schedule, state: str = "running", **fields: Any) -> Execution:
    at = services.db_now().replace(microsecond=0) - timedelta(minutes=5)
    return execution_row(schedule, at, state=state, fencing_token=3, **fields)


def _cancel(api: APIClient, execution: Execution, body: dict[str, Any] | None = None) -> Any:
    return api.post(f"/v1/executions/{execution.id}:cancel", body or {}, format="json")


@pytest.mark.parametrize("state", ["scheduled", "queued", "running", "retry_scheduled"])
def test_cancel_an_active_execution_records_who_and_why(
    api: APIClient, admin_principal: Principal, state: str
) -> None:
    execution = _execution(_schedule(admin_principal), state)
    res = _cancel(api, execution, {"reason": "deploy freeze"})
    assert res.status_code == 200, res.content
    body = res.json()
    assert body["state"] == "cancelled" and body["reason_code"] == "cancelled_by_user"
    assert body["fencing_token"] == 4, "the token is bumped: a running worker's writes fail"
    assert body["reason"].startswith("cancelled by ") and body["reason"].endswith(": deploy freeze")
    assert body["finished_at"] is not None

    [event] = ExecutionEvent.objects.filter(execution=execution, kind="cancelled")
    assert event.data["reason"] == "deploy freeze" and event.data["previous_state"] == state
    [audit] = AuditEvent.objects.filter(action="execution.cancel", object_id=str(execution.id))
    assert body["reason"] == f"cancelled by {audit.actor_label}: deploy freeze"
    assert event.actor == audit.actor_label
    assert event.data["audit_id"] == audit.pk
    assert audit.before == {"state": state, "fencing_token": 3}
    assert audit.after == {"state": "cancelled", "reason": "deploy freeze"}
    assert audit.object_type == "execution" and audit.outcome == "ok"


def test_cancel_twice_is_200_and_records_once(api: APIClient, admin_principal: Principal) -> None:
    execution = _execution(_schedule(admin_principal))
    first = _cancel(api, execution, {"reason": "one"})
    second = _cancel(api, execution, {"reason": "two"})
    assert first.status_code == second.status_code == 200
    assert second.json() == first.json(), "the second cancel changes nothing"
    assert ExecutionEvent.objects.filter(execution=execution, kind="cancelled").count() == 1
    assert AuditEvent.objects.filter(action="execution.cancel").count() == 1


@pytest.mark.parametrize("state", ["succeeded", "dead", "skipped"])
def test_cancel_of_another_final_state_is_409_naming_it(
    api: APIClient, admin_principal: Principal, state: str
) -> None:
    execution = _execution(_schedule(admin_principal), state)
    res = _cancel(api, execution)
    assert res.status_code == 409, res.content
    assert res.json()["error"]["code"] == "state_conflict"
    assert res.json()["error"]["message"].startswith(f"execution is {state};")
    execution.refresh_from_db()
    assert execution.state == state and execution.fencing_token == 3
    assert not AuditEvent.objects.filter(action="execution.cancel").exists()


def test_viewer_is_403_and_other_tenant_is_404(
    api_for: Any,
    tenant: Tenant,
    outsider_api: APIClient,
    admin_principal: Principal,
) -> None:
    execution = _execution(_schedule(admin_principal))
    viewer = api_for(tenant, Role.VIEWER)
    assert _cancel(viewer, execution).status_code == 403
    res = _cancel(outsider_api, execution)
    assert res.status_code == 404 and res.json()["error"]["code"] == "not_found"
    operator = api_for(tenant, Role.OPERATOR)
    assert _cancel(operator, execution).status_code == 200


def test_unknown_id_and_bad_body_answer_cleanly(api: APIClient, admin_principal: Principal) -> None:
    assert api.post("/v1/executions/not-a-uuid:cancel", {}, format="json").status_code == 404
    missing = "00000000-0000-0000-0000-000000000000"
    assert api.post(f"/v1/executions/{missing}:cancel", {}, format="json").status_code == 404
    execution = _execution(_schedule(admin_principal))
    res = _cancel(api, execution, {"why": "typo"})
    assert res.status_code == 400 and "why" in res.json()["error"]["detail"]
    res = _cancel(api, execution, {"reason": "x" * 401})
    assert res.status_code == 400 and "reason" in res.json()["error"]["detail"]
    assert Execution.objects.get(pk=execution.pk).state == "running"


def test_cancel_skips_dependents_as_for_a_failed_upstream(
    api: APIClient, admin_principal: Principal
) -> None:
    upstream = _schedule(admin_principal, "extract")
    dependent = _schedule(admin_principal, "load", depends_on=[str(upstream.id)])
    execution = _execution(upstream)
    assert _cancel(api, execution, {"reason": "bad data"}).status_code == 200
    [skipped] = Execution.objects.filter(schedule=dependent)
    assert skipped.scheduled_for == execution.scheduled_for
    assert skipped.state == "skipped" and skipped.reason_code == "upstream"
    assert str(execution.id) in skipped.reason and "cancelled" in skipped.reason


def test_bulk_caller_links_the_operation(admin_principal: Principal, tenant: Tenant) -> None:
    execution = _execution(_schedule(admin_principal), "queued")
    result = services.execution_cancel(
        actor=make_principal(tenant, Role.OPERATOR),
        execution_id=execution.id,
        operation_id="op-1",
    )
    assert result.changed and result.execution.state == "cancelled"
    event = ExecutionEvent.objects.get(execution=execution, kind="cancelled")
    assert event.data["operation_id"] == "op-1"
    again = services.execution_cancel(actor=admin_principal, execution_id=execution.id)
    assert not again.changed and again.execution.fencing_token == result.execution.fencing_token


def test_openapi_documents_cancel_with_its_409(api: APIClient) -> None:
    doc = api.get("/v1/openapi.json").json()
    op = doc["paths"]["/v1/executions/{id}:cancel"]["post"]
    assert {"200", "400", "403", "404", "409"} <= set(op["responses"])
