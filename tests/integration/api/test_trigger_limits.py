"""Manual triggers against a tenant's concurrency limit: what counts is "in flight"
(queued + running, dispatch/states.py IN_FLIGHT_STATES), the one definition the
beat's admission uses; past it a trigger is 429 with Retry-After, overlap is
applied to accepted ones, and every one is audited."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from core.db import db_now
from dispatch.models import Execution, Schedule
from dispatch.states import ExecutionState, Trigger
from tenants.models import AuditEvent, Tenant
from tenants.roles import Role
from tests.support.concurrency import at_once

TARGET = {"type": "http", "url": "https://billing.internal/hook"}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("overlap", "in_flight", "accepted", "expected_states"),
    # A trigger's own row is `scheduled` until the beat admits it, so it is not
    # in flight: below the limit every trigger is accepted and the beat admits
    # them up to the cap. At the limit (5 queued/running elsewhere) all are
    # refused. forbid: only the first run is active; the others are recorded as
    # skipped.
    [
        ("allow", 0, 24, {"scheduled": 24}),
        ("allow", 5, 0, {}),
        ("forbid", 0, 24, {"scheduled": 1, "skipped": 23}),
    ],
)
def test_concurrent_triggers_respect_the_limit(
    api_for: Callable[[Tenant, Role], APIClient],
    tenant: Tenant,
    overlap: str,
    in_flight: int,
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
    busy = _schedule(owner, "busy")
    for n in range(in_flight):
        _execution(busy, ExecutionState.QUEUED if n % 2 else ExecutionState.RUNNING, n)
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


def _schedule(client: APIClient, name: str) -> Schedule:
    sid = client.post(
        "/v1/schedules",
        {"name": name, "cron": "0 0 1 1 *", "target": TARGET, "concurrency": "allow"},
        format="json",
    ).json()["id"]
    return Schedule.objects.get(pk=sid)


def _execution(schedule: Schedule, state: ExecutionState, n: int) -> Execution:
    at = db_now().replace(year=2000, microsecond=n)
    return Execution.objects.create(
        schedule=schedule,
        tenant=schedule.tenant,
        partition=schedule.partition,
        scheduled_for=at,
        due_at=at,
        trigger=Trigger.CRON,
        state=state,
    )


@pytest.mark.django_db
def test_a_trigger_counts_exactly_queued_and_running_as_in_flight(
    api_for: Callable[[Tenant, Role], APIClient], tenant: Tenant
) -> None:
    tenant.quota.max_concurrent = 1
    tenant.quota.save()
    owner = api_for(tenant, Role.OPERATOR)
    target = _schedule(owner, "target")
    other = _schedule(owner, "other")
    # Waiting rows hold no worker slot: neither a retry nor a planned occurrence counts.
    waiting = [
        _execution(other, state, n)
        for n, state in enumerate(
            [ExecutionState.RETRY_SCHEDULED, ExecutionState.SCHEDULED, ExecutionState.SUCCEEDED]
        )
    ]
    first = owner.post(f"/v1/schedules/{target.id}:trigger")
    assert first.status_code == 202, first.json()
    for n, state in enumerate([ExecutionState.QUEUED, ExecutionState.RUNNING]):
        row = _execution(other, state, 10 + n)
        refused = owner.post(f"/v1/schedules/{target.id}:trigger")
        assert refused.status_code == 429, (state, refused.json())
        assert refused.json()["error"]["message"] == (
            f"tenant {tenant.slug} is at its concurrency limit 1; retry later"
        )
        row.delete()
    again = owner.post(f"/v1/schedules/{target.id}:trigger")
    assert again.status_code == 202, again.json()
    assert all(Execution.objects.filter(pk=w.pk).exists() for w in waiting)
