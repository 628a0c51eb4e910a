"""The backfill pump's fair turns and the per-tenant bound on running backfills
(in-process pump, real PostgreSQL): a tenant's backfills parked on a paused schedule
take no turn from another tenant's, tenants take turns while both have work, and a
create beyond BACKFILL_MAX_RUNNING_PER_TENANT is refused with nothing written."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from rest_framework.test import APIClient

from dispatch import services
from dispatch.models import Backfill, Execution
from dispatch.scheduler import backfills as pump
from dispatch.states import ACTIVE_STATES, ControlState
from tenants.models import AuditEvent
from tenants.roles import Principal

pytestmark = pytest.mark.django_db

TARGET = {"type": "http", "url": "https://billing.internal/hook"}


def make(api: APIClient) -> str:
    res = api.post(
        "/v1/schedules",
        {
            "name": f"bf-{uuid.uuid4().hex[:8]}",
            "cron": "0 * * * *",
            "timezone": "UTC",
            "target": TARGET,
            "concurrency": "allow",  # runs released up to the backfill's max_concurrent
        },
        format="json",
    )
    assert res.status_code == 201, res.content
    return str(res.json()["id"])


def backfill(api: APIClient, sid: str, hours: int, **body: Any) -> Any:
    """A backfill of `hours` hourly occurrences on 3 November 2026."""
    return api.post(
        f"/v1/schedules/{sid}:backfill",
        {"from": "2026-11-03T00:00:00Z", "to": f"2026-11-03T{hours:02d}:00:00Z"} | body,
        format="json",
    )


def finish_all_active() -> None:
    """What workers would do: every released run ends (succeeded)."""
    Execution.objects.filter(backfill__isnull=False, state__in=ACTIVE_STATES).update(
        state="succeeded"
    )


def state_of(bid: str) -> tuple[str, int]:
    b = Backfill.objects.get(pk=bid)
    return b.state, b.position


def test_backfills_parked_on_a_paused_schedule_do_not_hold_up_another_tenants(
    api: APIClient,
    outsider_api: APIClient,
    admin_principal: Principal,
    settings: Any,
) -> None:
    # More parked backfills than the pump ever looked at per round (50) before the fix;
    # the bound is raised so one tenant can have them (rows from before it was set).
    settings.BACKFILL_MAX_RUNNING_PER_TENANT = 100
    paused = make(api)
    parked = [backfill(api, paused, 2).json()["id"] for _ in range(55)]
    services.schedule_pause(actor=admin_principal, schedule_id=paused)
    live = make(outsider_api)
    theirs = backfill(outsider_api, live, 3, max_concurrent=3).json()["id"]

    assert pump.pump_once() == 3  # all three of the other tenant's occurrences released
    finish_all_active()
    assert pump.pump_once() == 1  # plan walked, no run active: done
    assert state_of(theirs) == (ControlState.DONE, 3)
    assert Execution.objects.filter(backfill_id=theirs, state="succeeded").count() == 3
    assert pump.pump_once() == 0  # nothing else can progress

    # The parked ones still wait, running, untouched, and go on once the schedule resumes.
    assert {state_of(bid) for bid in parked} == {(ControlState.RUNNING, 0)}
    assert not Execution.objects.filter(backfill_id__in=parked).exists()
    services.schedule_resume(actor=admin_principal, schedule_id=paused)
    assert pump.pump_once() == 1
    assert Execution.objects.filter(backfill_id=parked[0]).count() == 1


def test_tenants_take_turns_while_both_have_work(api: APIClient, outsider_api: APIClient) -> None:
    long = backfill(api, make(api), 20).json()["id"]
    short = backfill(outsider_api, make(outsider_api), 2).json()["id"]
    rounds = 0
    while state_of(short)[0] == ControlState.RUNNING:
        assert pump.pump_once() > 0
        finish_all_active()
        rounds += 1
        # Two releases and the end of the short one, each after one turn of the long one
        # at most (before the fix the oldest with work went first: 20 rounds of the long one).
        assert rounds <= 6, f"after {rounds} rounds the short backfill is at {state_of(short)}"
    assert state_of(long)[0] == ControlState.RUNNING
    assert 0 < state_of(long)[1] <= 3


def test_a_backfill_beyond_the_tenants_running_bound_is_409_and_writes_nothing(
    api: APIClient, outsider_api: APIClient, settings: Any
) -> None:
    settings.BACKFILL_MAX_RUNNING_PER_TENANT = 2
    sid = make(api)
    first, second = (backfill(api, sid, 2).json()["id"] for _ in range(2))
    creates = AuditEvent.objects.filter(action="backfill.create").count()

    res = backfill(api, sid, 2)
    assert res.status_code == 409, res.content
    assert res.json()["error"] == {
        "code": "limit_reached",
        "message": "this tenant already has 2 running backfills, the most it may have at once "
        "(BACKFILL_MAX_RUNNING_PER_TENANT = 2); start this one when one of them finishes or "
        "is cancelled",
        "detail": {"running": ["2"], "limit": ["2"]},
    }
    assert set(Backfill.objects.values_list("id", flat=True)) == {
        uuid.UUID(first),
        uuid.UUID(second),
    }
    assert AuditEvent.objects.filter(action="backfill.create").count() == creates
    # The dry run writes nothing, so it is not refused; nor is another tenant's backfill.
    assert backfill(api, sid, 2, dry_run=True).status_code == 200
    assert backfill(outsider_api, make(outsider_api), 2).status_code == 202

    # A cancelled one frees its place.
    assert api.post(f"/v1/backfills/{first}:cancel").status_code == 200
    assert backfill(api, sid, 2).status_code == 202
    assert Backfill.objects.filter(tenant__slug="billing", state=ControlState.RUNNING).count() == 2


def test_a_finished_backfill_frees_its_place(api: APIClient, settings: Any) -> None:
    settings.BACKFILL_MAX_RUNNING_PER_TENANT = 1
    sid = make(api)
    bid = backfill(api, sid, 1).json()["id"]
    assert backfill(api, sid, 1).status_code == 409
    while state_of(bid)[0] == ControlState.RUNNING:
        assert pump.pump_once() > 0
        finish_all_active()
    assert backfill(api, sid, 1).status_code == 202  # a finished one no longer counts
