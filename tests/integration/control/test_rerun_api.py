"""`POST /v1/executions/{id}:rerun`: a new attempt chain of the same execution.

Without workers: what the row, the timeline and the audit log say right after the
call, and the answers to bad input. The run itself (beat + worker) is in
test_rerun_processes.py.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from dispatch import services
from dispatch.models import Execution, ExecutionEvent, Schedule
from tenants.models import AuditEvent, Tenant
from tenants.roles import Principal, Role
from tests.support.rows import execution_row

pytestmark = pytest.mark.django_db

TARGET = {"type": "http", "url": "https://billing.internal/hook", "body": {"day": "mon"}}


def _schedule(principal: Principal, **extra: Any) -> Schedule:
    return services.schedule_create(
        actor=principal,
        data={"name": "nightly", "cron": "0 3 * * *", "target": TARGET} | extra,
    )


def _dead(schedule: Schedule, **fields: Any) -> Execution:
    at = services.db_now().replace(microsecond=0) - timedelta(hours=1)
    values: dict[str, Any] = {
        "state": "dead",
        "attempt": 3,
        "fencing_token": 3,
        "status_code": 500,
        "error": "HTTP 500",
        "reason_code": "http_500",
        "reason": "HTTP 500 — attempts exhausted (3 of 3)",
        "finished_at": at + timedelta(minutes=1),
        "started_at": at,
    }
    return execution_row(schedule, at, **(values | fields))


def _rerun(api: APIClient, execution: Execution, body: dict[str, Any] | None = None) -> Any:
    return api.post(f"/v1/executions/{execution.id}:rerun", body or {}, format="json")


def test_rerun_of_a_dead_execution_starts_a_new_chain_of_the_same_row(
    api: APIClient, admin_principal: Principal
) -> None:
    execution = _dead(_schedule(admin_principal))
    before = services.db_now()
    res = _rerun(api, execution)
    assert res.status_code == 202, res.content
    body = res.json()
    assert body["id"] == str(execution.id) and body["scheduled_for"].startswith(
        execution.scheduled_for.strftime("%Y-%m-%dT%H:%M")
    )
    assert body["state"] == "scheduled" and body["attempt"] == 4 and body["attempt_base"] == 3
    assert body["reruns"] == 1 and body["fencing_token"] == 4
    for cleared in ("status_code", "error", "reason_code", "finished_at", "started_at"):
        assert body[cleared] is None, cleared
    row = Execution.objects.get(pk=execution.pk)
    assert row.due_at >= before and row.target_override is None
    assert Execution.objects.filter(schedule=execution.schedule).count() == 1

    [event] = ExecutionEvent.objects.filter(execution=execution, kind="rerun")
    assert event.data["attempt"] == 4 and event.data["previous_state"] == "dead"
    assert event.data["target_edited"] is False
    [audit] = AuditEvent.objects.filter(action="execution.rerun", object_id=str(execution.id))
    assert event.data["audit_id"] == audit.pk
    assert audit.before == {"state": "dead", "attempt": 3}
    assert audit.after == {"state": "scheduled", "attempt": 4}


@pytest.mark.parametrize("state", ["scheduled", "queued", "running", "retry_scheduled"])
def test_rerun_of_an_active_execution_is_409_naming_the_state(
    api: APIClient, admin_principal: Principal, state: str
) -> None:
    execution = _dead(_schedule(admin_principal), state=state)
    res = _rerun(api, execution)
    assert res.status_code == 409, res.content
    assert res.json()["error"]["message"].startswith(f"execution is {state}; only a final")
    assert Execution.objects.get(pk=execution.pk).attempt == 3
    assert not AuditEvent.objects.filter(action="execution.rerun").exists()


@pytest.mark.parametrize("state", ["succeeded", "skipped", "cancelled"])
def test_every_final_state_can_be_rerun(
    api: APIClient, admin_principal: Principal, state: str
) -> None:
    execution = _dead(_schedule(admin_principal), state=state)
    assert _rerun(api, execution).status_code == 202


def test_second_rerun_before_the_first_ran_is_409(
    api: APIClient, admin_principal: Principal
) -> None:
    execution = _dead(_schedule(admin_principal))
    assert _rerun(api, execution).status_code == 202
    res = _rerun(api, execution)
    assert res.status_code == 409 and "execution is scheduled" in res.json()["error"]["message"]


def test_edited_target_is_validated_stored_for_this_run_and_audited_as_a_diff(
    api: APIClient, admin_principal: Principal
) -> None:
    schedule = _schedule(admin_principal)
    execution = _dead(schedule)
    edited = TARGET | {"body": {"day": "tue"}, "headers": {"X-Replay": "1"}}
    res = _rerun(api, execution, {"target": edited})
    assert res.status_code == 202, res.content
    row = Execution.objects.get(pk=execution.pk)
    assert row.target_override is not None
    assert row.target_override["body"] == {"day": "tue"}
    assert row.target_override["headers"] == {"X-Replay": "1"}
    schedule.refresh_from_db()
    assert schedule.target["body"] == {"day": "mon"}, "the schedule's target is untouched"
    audit = AuditEvent.objects.get(action="execution.rerun")
    assert audit.before["target"] == {"body": {"day": "mon"}, "headers": schedule.target["headers"]}
    assert audit.after["target"] == {"body": {"day": "tue"}, "headers": {"X-Replay": "1"}}
    event = ExecutionEvent.objects.get(execution=execution, kind="rerun")
    assert event.data["target_edited"] is True


@pytest.mark.parametrize(
    "target,field",
    [
        ({"type": "smtp"}, "target.type"),
        ({"type": "http", "url": "ftp://x.example/"}, "target.url"),
        (
            {
                "type": "http",
                "url": "https://billing.internal/h",
                "headers": {"Authorization": "x"},
            },
            "target.headers.Authorization",
        ),
        ("not an object", "target"),
    ],
)
def test_bad_edited_target_is_400_naming_the_field_and_changes_nothing(
    api: APIClient, admin_principal: Principal, target: Any, field: str
) -> None:
    execution = _dead(_schedule(admin_principal))
    res = _rerun(api, execution, {"target": target})
    assert res.status_code == 400, res.content
    assert field in res.json()["error"]["detail"], res.json()
    row = Execution.objects.get(pk=execution.pk)
    assert row.state == "dead" and row.attempt == 3 and row.reruns == 0


def test_viewer_is_403_other_tenant_404_unknown_field_400(
    api_for: Any, tenant: Tenant, outsider_api: APIClient, admin_principal: Principal
) -> None:
    execution = _dead(_schedule(admin_principal))
    assert _rerun(api_for(tenant, Role.VIEWER), execution).status_code == 403
    assert _rerun(outsider_api, execution).status_code == 404
    res = _rerun(api_for(tenant, Role.OPERATOR), execution, {"payload": {}})
    assert res.status_code == 400 and "payload" in res.json()["error"]["detail"]
    assert Execution.objects.get(pk=execution.pk).reruns == 0


def test_rerun_of_a_deleted_schedules_execution_is_409(
    api: APIClient, admin_principal: Principal
) -> None:
    schedule = _schedule(admin_principal)
    execution = _dead(schedule)
    services.schedule_delete(actor=admin_principal, schedule_id=schedule.id)
    res = _rerun(api, execution)
    assert res.status_code == 409 and "deleted" in res.json()["error"]["message"]


def test_backfill_caller_links_the_backfill(admin_principal: Principal) -> None:
    from dispatch.models import Backfill

    schedule = _schedule(admin_principal)
    execution = _dead(schedule)
    now = services.db_now()
    backfill = Backfill.objects.create(
        tenant=schedule.tenant, schedule=schedule, range_from=now - timedelta(days=1), range_to=now
    )
    rerun = services.execution_rerun(
        actor=admin_principal, execution_id=execution.id, backfill_id=str(backfill.id)
    )
    assert rerun.backfill_id == backfill.id
    event = ExecutionEvent.objects.get(execution=execution, kind="rerun")
    assert event.data["backfill_id"] == str(backfill.id)


def test_openapi_documents_rerun_with_its_409(api: APIClient) -> None:
    doc = api.get("/v1/openapi.json").json()
    op = doc["paths"]["/v1/executions/{id}:rerun"]["post"]
    assert {"202", "400", "403", "404", "409"} <= set(op["responses"])
    ok = op["responses"]["202"]["content"]["application/json"]["schema"]["$ref"]
    out = doc["components"]["schemas"][ok.rsplit("/", 1)[1]]["properties"]
    assert {"reruns", "attempt_base", "backfill_id"} <= set(out)


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_reruns_one_202_one_409(
    api_for: Any, tenant: Tenant, admin_principal: Principal
) -> None:
    execution = _dead(_schedule(admin_principal))
    clients = [api_for(tenant, Role.OPERATOR) for _ in range(2)]
    barrier = threading.Barrier(2)
    answers: list[int] = []

    def go(client: APIClient) -> None:
        try:
            barrier.wait()
            answers.append(_rerun(client, execution).status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=go, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(answers) == [202, 409]
    row = Execution.objects.get(pk=execution.pk)
    assert row.reruns == 1 and row.attempt == 4
    assert ExecutionEvent.objects.filter(execution=execution, kind="rerun").count() == 1
