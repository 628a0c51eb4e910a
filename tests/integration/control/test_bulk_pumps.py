"""Two beats' control pumps at once: each locks a different operation (FOR UPDATE
SKIP LOCKED), never the same chunk twice, and every item is worked exactly once."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from dispatch.models import Operation
from dispatch.scheduler.control import pump_once
from dispatch.states import AuditAction, ControlState
from tenants.models import AuditEvent, Tenant
from tests.support.console_support import bulk_schedules

pytestmark = pytest.mark.django_db(transaction=True)


def test_concurrent_pumps_work_each_item_once(api: APIClient, tenant: Tenant) -> None:
    bulk_schedules(tenant, 300, prefix="a")
    bulk_schedules(tenant, 300, prefix="b")
    ops = [
        api.post(
            "/v1/schedules:bulk", {"action": "pause", "filter": {"search": f"{p}-"}}, format="json"
        ).json()["id"]
        for p in ("a", "b")
    ]
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def pump() -> None:
        barrier.wait()
        try:
            while Operation.objects.filter(state=ControlState.RUNNING).exists():
                pump_once()
        except BaseException as exc:  # surfaced below, on the test's thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=pump) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    done: list[Any] = list(Operation.objects.filter(pk__in=ops))
    assert {(o.state, o.processed, o.succeeded) for o in done} == {(ControlState.DONE, 300, 300)}
    pauses = AuditEvent.objects.filter(tenant=tenant, action=AuditAction.SCHEDULE_PAUSE)
    # Exactly one pause per schedule: a second would be a pause_update of the same one.
    assert pauses.count() == 600
    assert pauses.values("object_id").distinct().count() == 600
    assert not AuditEvent.objects.filter(action=AuditAction.SCHEDULE_PAUSE_UPDATE).exists()
