"""POST /v1/executions:bulk: cancel or re-run many executions by ids or by filter,
each through execution_cancel / execution_rerun (audited one by one, naming the
operation), the operation audited as a whole; another tenant's ids not found."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from dispatch import services
from dispatch.models import Execution, Operation, Schedule
from dispatch.scheduler.control import pump_once
from dispatch.states import AuditAction, ControlState, EventData
from tenants.models import AuditEvent, Tenant
from tenants.roles import Principal, Role
from tests.conftest import make_principal
from tests.support.rows import execution_row

pytestmark = pytest.mark.django_db


def _schedule(principal: Principal, name: str) -> Schedule:
    return services.schedule_create(
        actor=principal,
        data={
            "name": name,
            "cron": "0 3 * * *",
            "target": {"type": "http", "url": "https://billing.internal/hook"},
        },
    )


def _rows(schedule: Schedule, states: list[str]) -> list[Execution]:
    base = services.db_now().replace(microsecond=0) - timedelta(days=1)
    return [
        execution_row(schedule, base - timedelta(minutes=n), state=state)
        for n, state in enumerate(states)
    ]


def test_cancel_by_filter_cancels_each_and_names_the_operation(
    api: APIClient, admin_principal: Principal
) -> None:
    schedule = _schedule(admin_principal, "nightly")
    scheduled = _rows(schedule, ["scheduled"] * 3 + ["succeeded"] * 2)[:3]
    res = api.post(
        "/v1/executions:bulk",
        {"action": "cancel", "filter": {"state": ["scheduled"]}, "reason": "deploy freeze"},
        format="json",
    )
    assert res.status_code == 200, res.content
    body = res.json()
    assert (body["state"], body["total"], body["succeeded"]) == ("done", 3, 3)
    assert {i["id"] for i in body["items"]} == {str(e.id) for e in scheduled}
    for execution in scheduled:
        execution.refresh_from_db()
        assert execution.state == "cancelled" and execution.reason.endswith(": deploy freeze")
    audits = AuditEvent.objects.filter(action=AuditAction.EXECUTION_CANCEL)
    assert sorted(audits.values_list("object_id", flat=True)) == sorted(
        str(e.id) for e in scheduled
    )
    assert {a.after[EventData.OPERATION_ID] for a in audits} == {body["id"]}
    assert Execution.objects.filter(state="succeeded").count() == 2


def test_the_filter_is_the_execution_lists_state_trigger_and_time_range(
    api: APIClient, admin_principal: Principal
) -> None:
    schedule = _schedule(admin_principal, "mixed")
    base = services.db_now().replace(microsecond=0) - timedelta(days=2)
    triggers = ("cron", "manual", "backfill")
    rows = {
        (trigger, hours): execution_row(
            schedule, base + timedelta(hours=hours, minutes=n), state="dead", trigger=trigger
        )
        for n, trigger in enumerate(triggers)
        for hours in (1, 5, 9)
    }
    window = {"from": base + timedelta(hours=2), "to": base + timedelta(hours=10)}
    res = api.post(
        "/v1/executions:bulk",
        {
            "action": "rerun",
            "filter": {"state": ["dead"], "trigger": ["manual", "backfill"]} | window,
        },
        format="json",
    )
    assert res.status_code == 200, res.content
    # Newest first, as the list shows them; the other trigger and the rows outside left alone.
    expected = [("backfill", 9), ("manual", 9), ("backfill", 5), ("manual", 5)]
    assert [i["id"] for i in res.json()["items"]] == [str(rows[k].id) for k in expected]
    assert {i["status"] for i in res.json()["items"]} == {"ok"}
    assert Execution.objects.filter(state="dead").count() == 5
    assert res.json()["filter"]["from"] == window["from"].isoformat()


def test_rerun_by_ids_per_item_results_across_tenants(
    api: APIClient, admin_principal: Principal, other_tenant: Tenant
) -> None:
    mine = _rows(_schedule(admin_principal, "mine"), ["dead", "running", "succeeded"])
    theirs = _rows(_schedule(make_principal(other_tenant), "theirs"), ["dead"])
    before = Execution.objects.get(pk=theirs[0].pk)
    ids = [str(mine[0].id), str(theirs[0].id), str(mine[1].id), str(mine[2].id)]
    res = api.post("/v1/executions:bulk", {"action": "rerun", "ids": ids}, format="json")
    assert res.status_code == 200, res.content
    items = res.json()["items"]
    assert [(i["id"], i["status"]) for i in items] == [
        (ids[0], "ok"),
        (ids[1], "not_found"),
        (ids[2], "conflict"),
        (ids[3], "ok"),
    ]
    assert "running" in items[2]["detail"]
    after = Execution.objects.get(pk=theirs[0].pk)
    assert (after.state, after.attempt, after.fencing_token) == (
        before.state,
        before.attempt,
        before.fencing_token,
    )
    assert not AuditEvent.objects.filter(object_id=str(theirs[0].id)).exists()
    assert Execution.objects.get(pk=mine[0].pk).state == "scheduled"
    assert Execution.objects.get(pk=mine[1].pk).state == "running"


def test_a_large_cancel_is_an_operation_the_pump_works(
    api: APIClient, admin_principal: Principal
) -> None:
    schedule = _schedule(admin_principal, "big")
    _rows(schedule, ["retry_scheduled"] * 150)
    res = api.post(
        "/v1/executions:bulk",
        {"action": "cancel", "filter": {"schedule_id": str(schedule.id)}},
        format="json",
    )
    assert res.status_code == 202, res.content
    op_id = res.json()["id"]
    assert pump_once() == 100 and pump_once() == 50
    op = Operation.objects.get(pk=op_id)
    assert (op.state, op.succeeded) == (ControlState.DONE, 150)
    assert not Execution.objects.exclude(state="cancelled").exists()
    assert AuditEvent.objects.filter(action=AuditAction.EXECUTION_CANCEL).count() == 150


@pytest.mark.parametrize(
    "body,field",
    [
        ({"action": "cancel", "ids": ["a"], "filter": {}}, "filter"),
        ({"action": "cancel"}, "ids"),
        ({"action": "pause", "ids": ["a"]}, "action"),
        ({"action": "rerun", "ids": ["a"], "reason": "x"}, "reason"),
        ({"action": "cancel", "filter": {"state": ["sleeping"]}}, "filter"),
        ({"action": "cancel", "filter": {"schedule_id": "nope"}}, "filter"),
        ({"action": "cancel", "filter": {"from": "yesterday"}}, "filter"),
        ({"action": "cancel", "filter": {"error": "x"}}, "filter"),
        ({"action": "cancel", "filter": {"trigger": ["sometimes"]}}, "filter"),
        (
            {
                "action": "cancel",
                "filter": {"from": "2026-01-02T00:00:00Z", "to": "2026-01-01T00:00:00Z"},
            },
            "filter",
        ),
    ],
)
def test_bad_requests_are_400_naming_the_field(
    api: APIClient, body: dict[str, Any], field: str
) -> None:
    res = api.post("/v1/executions:bulk", body, format="json")
    assert res.status_code == 400, res.content
    # The message names the field first (a filter's own fields as filter.<name>).
    assert res.json()["error"]["message"].startswith(field), res.json()
    assert not Operation.objects.exists()


def test_over_the_limit_is_400(api: APIClient, admin_principal: Principal, settings: Any) -> None:
    settings.BULK_MAX_ITEMS = 3
    _rows(_schedule(admin_principal, "many"), ["dead"] * 4)
    res = api.post("/v1/executions:bulk", {"action": "rerun", "filter": {}}, format="json")
    assert res.status_code == 400 and "filter" in res.json()["error"]["detail"]
    assert not Execution.objects.exclude(state="dead").exists()


def test_viewer_is_403(
    api_for: Callable[[Tenant, Role], APIClient], tenant: Tenant, admin_principal: Principal
) -> None:
    _rows(_schedule(admin_principal, "v"), ["scheduled"])
    res = api_for(tenant, Role.VIEWER).post(
        "/v1/executions:bulk", {"action": "cancel", "filter": {}}, format="json"
    )
    assert res.status_code == 403
    assert Execution.objects.get().state == "scheduled"
