"""A large bulk pause finished by a real beat process: its control pump thread
works the operation chunk by chunk off the firing path, and every item is audited."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from dispatch.models import Operation, OperationItem, Schedule
from dispatch.states import AuditAction, ControlState, ItemStatus
from tenants.models import AuditEvent, Tenant
from tests.support.console_support import bulk_schedules
from tests.support.procs import beat_cmd, processes, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_the_beats_control_pump_finishes_a_bulk_pause(
    tmp_path: Path, api: APIClient, tenant: Tenant
) -> None:
    bulk_schedules(tenant, 500, prefix="freeze")
    until = (datetime.now(UTC) + timedelta(days=1)).replace(microsecond=0)
    res = api.post(
        "/v1/schedules:bulk",
        {"action": "pause", "filter": {"search": "freeze"}, "reason": "freeze", "until": until},
        format="json",
    )
    assert res.status_code == 202, res.content
    op_id = res.json()["id"]
    with processes(tmp_path) as start:
        beat = start("beat", beat_cmd("--name", "bulk-beat", "--cycle", "0.2"))
        wait_for(
            lambda: Operation.objects.get(pk=op_id).state != ControlState.RUNNING,
            timeout=90,
            what=f"operation finished; beat log:\n{beat.output()[-2000:]}",
        )
    op = Operation.objects.get(pk=op_id)
    assert (op.state, op.processed, op.succeeded, op.failed) == (ControlState.DONE, 500, 500, 0)
    assert set(OperationItem.objects.filter(operation=op).values_list("status", flat=True)) == {
        ItemStatus.OK
    }
    assert (
        Schedule.objects.filter(
            tenant=tenant, paused=True, paused_reason="freeze", paused_until=until
        ).count()
        == 500
    )
    pauses = AuditEvent.objects.filter(tenant=tenant, action=AuditAction.SCHEDULE_PAUSE)
    assert pauses.count() == 500
    assert pauses.values_list("object_id", flat=True).distinct().count() == 500
    assert {a.actor_label for a in pauses} == {op.created_by}
