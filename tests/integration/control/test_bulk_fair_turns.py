"""The bulk pump's fair turns and the per-tenant bound on queued items (in-process
pump, real PostgreSQL): one tenant's long queue delays another tenant's operation by
a chunk a turn, not by the whole queue, and a request that would queue items past
BULK_MAX_QUEUED_ITEMS_PER_TENANT is refused with nothing written."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from rest_framework.test import APIClient

from dispatch.models import Operation, OperationItem, Schedule
from dispatch.scheduler import operations as pump
from dispatch.states import AuditAction, ControlState, ItemStatus
from tenants.models import AuditEvent, Tenant
from tests.support.console_support import bulk_schedules

pytestmark = pytest.mark.django_db


def pause_ids(api: APIClient, count: int) -> Any:
    """A bulk pause of `count` ids (no such schedules: each item is worked, `not_found`)."""
    ids = [str(uuid.uuid4()) for _ in range(count)]
    return api.post("/v1/schedules:bulk", {"action": "pause", "ids": ids}, format="json")


def state_of(operation_id: str) -> str:
    return str(Operation.objects.get(pk=operation_id).state)


def test_a_long_queue_of_one_tenant_does_not_hold_up_another_tenants_operation(
    api: APIClient, outsider_api: APIClient, other_tenant: Tenant
) -> None:
    # 12 chunks of one tenant queued first (first in, first out: the other waited for
    # all 12; with fair turns, for one chunk a turn).
    theirs = []
    for _ in range(4):
        res = pause_ids(api, 300)
        assert res.status_code == 202, res.content
        theirs.append(res.json()["id"])
    bulk_schedules(other_tenant, 150, prefix="small")
    res = outsider_api.post(
        "/v1/schedules:bulk", {"action": "pause", "filter": {"search": "small-"}}, format="json"
    )
    assert res.status_code == 202, res.content
    small = res.json()["id"]

    rounds = 0
    while state_of(small) == ControlState.RUNNING:
        assert pump.pump_once() > 0
        rounds += 1
        # Its two chunks, each after one chunk of the other tenant at most.
        assert rounds <= 4, f"{rounds} rounds and the 150-item pause is not done"
    op = Operation.objects.get(pk=small)
    assert (op.state, op.processed, op.succeeded) == (ControlState.DONE, 150, 150)
    assert Schedule.objects.filter(tenant=other_tenant, paused=True).count() == 150
    worked = Operation.objects.filter(pk__in=theirs).values_list("processed", flat=True)
    assert sum(worked) <= 200

    # The long queue still finishes, every item worked once.
    while Operation.objects.filter(pk__in=theirs, state=ControlState.RUNNING).exists():
        assert pump.pump_once() > 0
    done = Operation.objects.filter(pk__in=theirs)
    assert {(o.state, o.processed, o.failed) for o in done} == {(ControlState.DONE, 300, 300)}
    items = OperationItem.objects.filter(operation_id__in=theirs)
    assert set(items.values_list("status", flat=True)) == {ItemStatus.NOT_FOUND}


def test_queuing_past_the_tenants_bound_is_429_and_writes_nothing(
    api: APIClient, outsider_api: APIClient, settings: Any
) -> None:
    settings.BULK_MAX_QUEUED_ITEMS_PER_TENANT = 500
    assert pause_ids(api, 400).status_code == 202
    before = (
        Operation.objects.count(),
        OperationItem.objects.count(),
        AuditEvent.objects.filter(action=AuditAction.OPERATION_CREATE).count(),
    )

    res = pause_ids(api, 200)
    assert res.status_code == 429, res.content
    assert res.json()["error"] == {
        "code": "queue_full",
        "message": "this tenant's running bulk operations have 400 items queued; 200 more would "
        "pass the bound of 500 (BULK_MAX_QUEUED_ITEMS_PER_TENANT). It frees as those operations "
        "finish (or are cancelled): retry then, or send a smaller set",
        "detail": {"queued": ["400"], "limit": ["500"], "items": ["200"]},
    }
    after = (
        Operation.objects.count(),
        OperationItem.objects.count(),
        AuditEvent.objects.filter(action=AuditAction.OPERATION_CREATE).count(),
    )
    assert after == before

    # Worked in the request, a small set queues nothing and is not refused; another
    # tenant's queue is its own.
    assert pause_ids(api, 50).status_code == 200
    assert pause_ids(outsider_api, 500).status_code == 202

    # Room frees as the pump works the queue: one chunk (100) of it done, 200 more fit.
    assert pause_ids(api, 101).status_code == 429
    while (
        OperationItem.objects.filter(
            operation__tenant__slug="billing", status=ItemStatus.PENDING
        ).count()
        > 300
    ):
        assert pump.pump_once() > 0
    assert pause_ids(api, 200).status_code == 202
