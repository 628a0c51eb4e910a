"""Concurrent manual triggers of one schedule against a tenant limit: exactly the
limit accepted, the rest 429 with Retry-After, overlap applied, every one audited."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from dispatch.models import Execution
from tenants.models import AuditEvent, Tenant
from tenants.roles import Role
from tests.support.concurrency import at_once

TARGET = {"type": "http", "url": "https://billing.internal/hook"}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("overlap", "accepted", "expected_states"),
    # allow: the limit (5) is reached and the rest are refused. forbid: only the
    # first run is active; the others are recorded as skipped (not active), so
    # none is refused.
    [("allow", 5, {"scheduled": 5}), ("forbid", 24, {"scheduled": 1, "skipped": 23})],
)
def test_concurrent_triggers_respect_the_limit(
    api_for: Callable[[Tenant, Role], APIClient],
    tenant: Tenant,
    overlap: str,
    accepted: int,
    expected_states: dict[str, int],
) -> None:
    tenant.quota.max_concurrent = 5
    tenant.quota.save()
    owner = api_for(tenant, Role.OPERATOR)
    sid = owner.post(
        "/v1/schedules",
        {"name": "t", "cron": "0 0 1 1 *", "target": TARGET, "concurrency": overlap},
        format="json",
    ).json()["id"]
    clients = [api_for(tenant, Role.OPERATOR) for _ in range(24)]

    def trigger(client: APIClient) -> tuple[int, Any]:
        res = client.post(f"/v1/schedules/{sid}:trigger")
        return res.status_code, res

    results = at_once(clients, trigger)
    codes = sorted(code for code, _ in results)
    assert codes.count(202) == accepted and codes.count(429) == 24 - accepted, codes
    states: dict[str, int] = {}
    for state in Execution.objects.filter(schedule_id=sid).values_list("state", flat=True):
        states[state] = states.get(state, 0) + 1
    assert states == expected_states
    limited = [res for code, res in results if code == 429]
    assert all(
        int(r["Retry-After"]) >= 1 and r.json()["error"]["code"] == "throttled" for r in limited
    )
    audits = AuditEvent.objects.filter(action="schedule.trigger", object_id=sid)
    assert audits.filter(outcome="ok").count() == codes.count(202)
    assert audits.filter(outcome="denied").count() == codes.count(429)
