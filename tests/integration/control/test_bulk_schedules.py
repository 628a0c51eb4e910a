"""Bulk actions on schedules through the API: by filter and by ids, small sets in
the request and large ones as an operation the control pump works, each item
through the one-schedule service (audited one by one) and the operation audited
as a whole; the combined resume preview; another tenant's ids; the bad requests."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from dispatch import selectors, services
from dispatch.models import Operation, OperationItem, Schedule
from dispatch.scheduler.control import pump_once
from dispatch.states import AuditAction, ControlState, ItemStatus
from tenants.models import AuditEvent, Tenant
from tenants.roles import Role
from tests.support.console_support import bulk_schedules

pytestmark = pytest.mark.django_db


def drive(operation_id: str) -> int:
    """Run the control pump (as each beat's thread does) until the operation is finished."""
    rounds = 0
    while Operation.objects.get(pk=operation_id).state == ControlState.RUNNING:
        assert pump_once() > 0, "a running operation must make progress each round"
        rounds += 1
    return rounds


def all_items(api: APIClient, operation_id: str, limit: int = 200) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    url = f"/v1/operations/{operation_id}?limit={limit}"
    while True:
        body = api.get(url).json()
        items += body["items"]
        if body["next_cursor"] is None:
            return items
        url = f"/v1/operations/{operation_id}?limit={limit}&cursor={body['next_cursor']}"


def test_bulk_pause_500_by_filter_is_an_operation_the_pump_finishes(
    api: APIClient, tenant: Tenant
) -> None:
    bulk_schedules(tenant, 500, prefix="freeze")
    bulk_schedules(tenant, 3, prefix="keep")
    until = (datetime.now(UTC) + timedelta(hours=6)).replace(microsecond=0)
    res = api.post(
        "/v1/schedules:bulk",
        {
            "action": "pause",
            "filter": {"search": "freeze-"},
            "reason": "deploy freeze",
            "until": until.isoformat(),
        },
        format="json",
    )
    assert res.status_code == 202, res.content
    body = res.json()
    op_id = body["id"]
    assert res["Location"] == f"/v1/operations/{op_id}"
    assert (body["state"], body["total"], body["processed"]) == ("running", 500, 0)
    assert body["filter"] == {"search": "freeze-"} and body["reason"] == "deploy freeze"
    # The filter was resolved when the request was made: a match created now is not part of it.
    bulk_schedules(tenant, 1, prefix="freeze-late")
    assert drive(op_id) == 5  # BULK_CHUNK items per round

    done = api.get(f"/v1/operations/{op_id}").json()
    assert (done["state"], done["processed"], done["succeeded"], done["failed"]) == (
        "done",
        500,
        500,
        0,
    )
    items = all_items(api, op_id)
    assert [i["position"] for i in items] == list(range(500))
    assert {i["status"] for i in items} == {"ok"}
    frozen = Schedule.objects.filter(tenant=tenant, name__startswith="freeze-0")
    assert {i["id"] for i in items} == {str(s.id) for s in frozen}
    assert all(
        s.paused and s.paused_reason == "deploy freeze" and s.paused_until == until for s in frozen
    )
    assert (
        not Schedule.objects.filter(tenant=tenant, paused=True)
        .exclude(name__startswith="freeze-0")
        .exists()
    )
    # Every item audited as the one-schedule pause audits it, by the requester; the operation once.
    pauses = AuditEvent.objects.filter(tenant=tenant, action=AuditAction.SCHEDULE_PAUSE)
    assert sorted(pauses.values_list("object_id", flat=True)) == sorted(str(s.id) for s in frozen)
    created = AuditEvent.objects.get(tenant=tenant, action=AuditAction.OPERATION_CREATE)
    assert created.object_id == op_id and created.after["total"] == 500
    assert {a.actor_label for a in pauses} == {created.actor_label}


def test_small_set_answers_200_with_every_result_and_is_an_operation_too(
    api: APIClient, tenant: Tenant
) -> None:
    bulk_schedules(tenant, 4, prefix="small")
    ids = [str(s.id) for s in Schedule.objects.filter(tenant=tenant)]
    res = api.post("/v1/schedules:bulk", {"action": "trigger", "ids": ids}, format="json")
    assert res.status_code == 200, res.content
    body = res.json()
    assert body["state"] == "done" and body["succeeded"] == 4
    assert [i["id"] for i in body["items"]] == ids
    assert all(i["status"] == "ok" and "execution" in i["detail"] for i in body["items"])
    assert api.get(f"/v1/operations/{body['id']}").json()["items"] == body["items"]
    triggers = AuditEvent.objects.filter(tenant=tenant, action=AuditAction.SCHEDULE_TRIGGER)
    assert sorted(triggers.values_list("object_id", flat=True)) == sorted(ids)


def _paused_with_misses(tenant: Tenant) -> list[Schedule]:
    """37 paused schedules that missed occurrences while paused, under each misfire policy.

    Monthly and yearly occurrences, so the previews cannot change while the test runs."""
    bulk_schedules(tenant, 20, prefix="monthly", expr="0 0 1 * *")
    bulk_schedules(tenant, 17, prefix="yearly", expr="0 6 1 1 *")
    paused_at = datetime(2024, 5, 15, tzinfo=UTC)
    policies = [("skip", 10), ("run_once", 10), ("catch_up", 3), ("catch_up", 50)]
    schedules = list(Schedule.objects.filter(tenant=tenant).order_by("name"))
    for n, schedule in enumerate(schedules):
        policy, limit = policies[n % len(policies)]
        Schedule.objects.filter(pk=schedule.pk).update(
            paused=True,
            paused_at=paused_at,
            paused_reason="outage",
            misfire=policy,
            catch_up_limit=limit,
            next_run_at=datetime(2024, 6, 1 + n % 3, tzinfo=UTC),
        )
    return list(Schedule.objects.filter(tenant=tenant).order_by("name"))


def test_resume_dry_run_sums_the_single_schedule_previews_then_resumes(
    api: APIClient, tenant: Tenant
) -> None:
    schedules = _paused_with_misses(tenant)
    bulk_schedules(tenant, 2, prefix="running")  # not paused: resuming changes nothing
    res = api.post(
        "/v1/schedules:bulk",
        {"action": "resume", "filter": {}, "dry_run": True},
        format="json",
    )
    assert res.status_code == 200, res.content
    preview = res.json()
    now = services.db_now()
    singles = [selectors.resume_preview(s, now) for s in schedules]
    run, skip = sum(p.run for p in singles), sum(p.skip for p in singles)
    assert run > 0 and skip > 0
    assert (preview["schedules"], preview["run"], preview["skip"]) == (37, run, skip)
    assert preview["text"] == f"resuming 37 schedules will run {run} occurrences and skip {skip}"
    by_id = {i["id"]: i for i in preview["items"]}
    for schedule, single in zip(schedules, singles, strict=True):
        item = by_id[str(schedule.id)]
        assert (item["run"], item["skip"], item["text"]) == (single.run, single.skip, single.text)
    # A dry run writes nothing: no operation, no audit, still paused.
    assert not Operation.objects.exists()
    assert not AuditEvent.objects.filter(
        tenant=tenant, object_type__in=["schedule", "operation"]
    ).exists()
    assert Schedule.objects.filter(tenant=tenant, paused=True).count() == 37

    ids = [str(s.id) for s in schedules]
    done = api.post("/v1/schedules:bulk", {"action": "resume", "ids": ids}, format="json")
    assert done.status_code == 200 and done.json()["succeeded"] == 37
    assert not Schedule.objects.filter(tenant=tenant, paused=True).exists()
    resumes = AuditEvent.objects.filter(tenant=tenant, action=AuditAction.SCHEDULE_RESUME)
    assert resumes.count() == 37


def test_pause_dry_run_lists_what_would_be_paused(api: APIClient, tenant: Tenant) -> None:
    bulk_schedules(tenant, 3, prefix="dry")
    first = Schedule.objects.filter(tenant=tenant).order_by("name").first()
    assert first is not None
    Schedule.objects.filter(pk=first.pk).update(paused=True)
    res = api.post(
        "/v1/schedules:bulk",
        {"action": "pause", "filter": {"search": "dry"}, "dry_run": True, "reason": "r"},
        format="json",
    )
    assert res.status_code == 200, res.content
    body = res.json()
    assert (body["schedules"], body["already_paused"], body["found"]) == (2, 1, 3)
    assert {i["name"]: i["paused"] for i in body["items"]} == {
        "dry-0000": True,
        "dry-0001": False,
        "dry-0002": False,
    }
    assert Schedule.objects.filter(tenant=tenant, paused=True).count() == 1


def test_another_tenants_ids_are_not_found_and_untouched(
    api: APIClient, tenant: Tenant, other_tenant: Tenant
) -> None:
    bulk_schedules(tenant, 2, prefix="mine")
    bulk_schedules(other_tenant, 2, prefix="theirs")
    mine = [str(s.id) for s in Schedule.objects.filter(tenant=tenant).order_by("name")]
    theirs = [str(s.id) for s in Schedule.objects.filter(tenant=other_tenant).order_by("name")]
    before = {s.id: (s.paused, s.version) for s in Schedule.objects.filter(tenant=other_tenant)}
    ids = [mine[0], theirs[0], "not-an-id", mine[1], theirs[1]]
    res = api.post(
        "/v1/schedules:bulk", {"action": "pause", "ids": ids, "reason": "x"}, format="json"
    )
    assert res.status_code == 200, res.content
    body = res.json()
    assert [(i["id"], i["status"]) for i in body["items"]] == [
        (mine[0], "ok"),
        (theirs[0], "not_found"),
        ("not-an-id", "not_found"),
        (mine[1], "ok"),
        (theirs[1], "not_found"),
    ]
    assert (body["succeeded"], body["failed"]) == (2, 3)
    after = {s.id: (s.paused, s.version) for s in Schedule.objects.filter(tenant=other_tenant)}
    assert after == before
    assert not AuditEvent.objects.filter(tenant=other_tenant, object_type="schedule").exists()
    assert not AuditEvent.objects.filter(object_id__in=theirs).exists()


def test_conflicts_and_invalid_items_are_recorded_per_item(api: APIClient, tenant: Tenant) -> None:
    bulk_schedules(tenant, 2, prefix="gone")
    ids = [str(s.id) for s in Schedule.objects.filter(tenant=tenant).order_by("name")]
    assert api.delete(f"/v1/schedules/{ids[0]}").status_code == 204
    res = api.post("/v1/schedules:bulk", {"action": "delete", "ids": ids}, format="json")
    body = res.json()
    assert [i["status"] for i in body["items"]] == ["not_found", "ok"]
    assert Schedule.objects.filter(tenant=tenant, deleted_at__isnull=True).count() == 0


@pytest.mark.parametrize(
    "body,field",
    [
        ({"action": "pause", "ids": ["a"], "filter": {}}, "filter"),
        ({"action": "pause"}, "ids"),
        ({"action": "explode", "ids": ["a"]}, "action"),
        ({"action": "pause", "ids": []}, "ids"),
        ({"action": "pause", "filter": {"colour": "red"}}, "filter"),
        ({"action": "pause", "filter": {"kind": "weekly"}}, "filter"),
        ({"action": "pause", "filter": {"paused": "maybe"}}, "filter"),
        ({"action": "resume", "ids": ["a"], "until": "2099-01-01T00:00:00Z"}, "until"),
        ({"action": "pause", "ids": ["a"], "until": "2001-01-01T00:00:00Z"}, "until"),
        ({"action": "pause", "ids": ["a"], "until": "tomorrow"}, "until"),
        ({"action": "pause", "ids": "a"}, "ids"),
    ],
)
def test_bad_requests_are_400_naming_the_field(
    api: APIClient, tenant: Tenant, body: dict[str, Any], field: str
) -> None:
    res = api.post("/v1/schedules:bulk", body, format="json")
    assert res.status_code == 400, res.content
    # The message names the field first (a filter's own fields as filter.<name>).
    assert res.json()["error"]["message"].startswith(field), res.json()
    assert not Operation.objects.exists()


def test_over_the_limit_is_400_naming_the_field(
    api: APIClient, tenant: Tenant, settings: Any
) -> None:
    settings.BULK_MAX_ITEMS = 5
    bulk_schedules(tenant, 6, prefix="many")
    res = api.post("/v1/schedules:bulk", {"action": "pause", "filter": {}}, format="json")
    assert res.status_code == 400
    err = res.json()["error"]
    assert "filter" in err["detail"] and "more than 5" in err["message"]
    ids = [str(s.id) for s in Schedule.objects.filter(tenant=tenant)]
    res = api.post("/v1/schedules:bulk", {"action": "pause", "ids": ids}, format="json")
    assert res.status_code == 400 and "ids" in res.json()["error"]["detail"]
    ok = api.post("/v1/schedules:bulk", {"action": "pause", "ids": ids[:5]}, format="json")
    assert ok.status_code == 200
    assert not Schedule.objects.filter(tenant=tenant, paused=True).exclude(id__in=ids[:5]).exists()


def test_viewer_is_403_and_nothing_changes(
    api_for: Callable[[Tenant, Role], APIClient], tenant: Tenant
) -> None:
    bulk_schedules(tenant, 2, prefix="v")
    viewer = api_for(tenant, Role.VIEWER)
    res = viewer.post("/v1/schedules:bulk", {"action": "pause", "filter": {}}, format="json")
    assert res.status_code == 403
    assert not Operation.objects.exists()
    assert not Schedule.objects.filter(tenant=tenant, paused=True).exists()
    operator = api_for(tenant, Role.OPERATOR)
    op = operator.post("/v1/schedules:bulk", {"action": "pause", "filter": {}}, format="json")
    assert op.status_code == 200
    # A viewer may read the operation, not cancel it.
    assert viewer.get(f"/v1/operations/{op.json()['id']}").status_code == 200
    assert viewer.post(f"/v1/operations/{op.json()['id']}:cancel").status_code == 403


def test_cancel_leaves_the_unworked_items_cancelled(api: APIClient, tenant: Tenant) -> None:
    bulk_schedules(tenant, 250, prefix="c")
    res = api.post(
        "/v1/schedules:bulk", {"action": "pause", "filter": {"search": "c-"}}, format="json"
    )
    assert res.status_code == 202
    op_id = res.json()["id"]
    assert pump_once() == 100
    cancelled = api.post(f"/v1/operations/{op_id}:cancel")
    assert cancelled.status_code == 200, cancelled.content
    body = cancelled.json()
    assert (body["state"], body["processed"], body["cancelled"]) == ("cancelled", 100, 150)
    assert pump_once() == 0  # nothing left for the pump
    statuses = list(
        OperationItem.objects.filter(operation_id=op_id)
        .order_by("position")
        .values_list("status", flat=True)
    )
    assert statuses == [ItemStatus.OK] * 100 + [ItemStatus.CANCELLED] * 150
    assert Schedule.objects.filter(tenant=tenant, paused=True).count() == 100
    audit = AuditEvent.objects.get(tenant=tenant, action=AuditAction.OPERATION_CANCEL)
    assert audit.object_id == op_id and audit.after["cancelled"] == 150
    # Idempotent; a finished operation cannot be cancelled.
    again = api.post(f"/v1/operations/{op_id}:cancel")
    assert again.status_code == 200 and again.json()["cancelled"] == 150
    assert AuditEvent.objects.filter(action=AuditAction.OPERATION_CANCEL).count() == 1
    first = [i["id"] for i in api.get(f"/v1/operations/{op_id}?limit=3").json()["items"]]
    small = api.post("/v1/schedules:bulk", {"action": "resume", "ids": first}, format="json")
    assert small.json()["state"] == "done"
    late = api.post(f"/v1/operations/{small.json()['id']}:cancel")
    assert late.status_code == 409 and "done" in late.json()["error"]["message"]


def test_another_tenants_operation_is_404(
    api: APIClient, outsider_api: APIClient, tenant: Tenant
) -> None:
    bulk_schedules(tenant, 1, prefix="o")
    op_id = api.post("/v1/schedules:bulk", {"action": "pause", "filter": {}}, format="json").json()[
        "id"
    ]
    assert outsider_api.get(f"/v1/operations/{op_id}").status_code == 404
    assert outsider_api.post(f"/v1/operations/{op_id}:cancel").status_code == 404
    assert api.get("/v1/operations/nope").status_code == 404
    assert api.get(f"/v1/operations/{op_id}?cursor=x").status_code == 400
