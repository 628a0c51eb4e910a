"""The audit log: one row per mutation, in the same transaction, append-only."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import DatabaseError, transaction
from rest_framework.test import APIClient

from dispatch.models import ExecutionEvent
from tenants import services
from tenants.models import AuditEvent, Tenant
from tenants.roles import Role

pytestmark = pytest.mark.django_db


def test_each_api_mutation_writes_one_audit_row_with_actor_and_request_id(
    api: APIClient, seed_example: dict[str, Any]
) -> None:
    start = AuditEvent.objects.count()
    res = api.post("/v1/schedules", seed_example, format="json", HTTP_X_REQUEST_ID="req-123")
    assert res["X-Request-Id"] == "req-123"
    sid = res.json()["id"]
    api.patch(f"/v1/schedules/{sid}", {"jitter_s": 1, "version": 1}, format="json")
    api.post(f"/v1/schedules/{sid}:pause")
    api.post(f"/v1/schedules/{sid}:resume")
    api.post(f"/v1/schedules/{sid}:trigger")
    api.post("/v1/jobs", {"target": seed_example["target"]}, format="json")
    tok = api.post("/v1/tokens", {"name": "n", "role": "viewer"}, format="json").json()
    api.delete(f"/v1/tokens/{tok['id']}")
    api.delete(f"/v1/schedules/{sid}")
    rows = list(AuditEvent.objects.order_by("id")[start:])
    assert [r.action for r in rows] == [
        "schedule.create",
        "schedule.update",
        "schedule.pause",
        "schedule.resume",
        "schedule.trigger",
        "job.create",
        "token.create",
        "token.revoke",
        "schedule.delete",
    ]
    first = rows[0]
    assert first.request_id == "req-123" and first.actor_kind == "token"
    assert first.actor_label.startswith("token:sched_") and first.tenant.slug == "billing"
    assert first.after["cron"] == "0 0 * * *"
    update = rows[1]
    assert update.before["jitter_s"] == 120 and update.after["jitter_s"] == 1
    assert all(r.outcome == "ok" for r in rows)


def test_audit_rows_cannot_be_updated_or_deleted(tenant: Tenant) -> None:
    row = AuditEvent.objects.filter(tenant=tenant).first()
    assert row is not None
    with pytest.raises(DatabaseError), transaction.atomic():
        AuditEvent.objects.filter(pk=row.pk).update(action="tampered")
    with pytest.raises(DatabaseError), transaction.atomic():
        AuditEvent.objects.filter(pk=row.pk).delete()
    with pytest.raises(ValueError, match="append-only"):
        row.save()
    assert AuditEvent.objects.get(pk=row.pk).action == "tenant.create"


def test_audit_is_in_the_same_transaction_as_the_change(tenant: Tenant) -> None:
    start = AuditEvent.objects.count()
    with pytest.raises(RuntimeError), transaction.atomic():
        services.token_issue(tenant=tenant, name="rolled-back", role=Role.VIEWER)
        raise RuntimeError("abort")
    assert AuditEvent.objects.count() == start
    assert not tenant.tokens.filter(name="rolled-back").exists()


def test_role_changes_are_audited(tenant: Tenant) -> None:
    user = get_user_model().objects.create_user("alice", password="pw-long-enough-1")
    services.membership_set(tenant=tenant, user=user, role=Role.VIEWER, actor=None)
    services.membership_set(tenant=tenant, user=user, role=Role.ADMIN, actor=None)
    services.membership_set(tenant=tenant, user=user, role=None, actor=None)
    actions = list(
        AuditEvent.objects.filter(object_type="membership")
        .order_by("id")
        .values_list("action", "after")
    )
    assert actions == [
        ("member.add", {"user": "alice", "role": "viewer"}),
        ("member.role_change", {"user": "alice", "role": "admin"}),
        ("member.remove", None),
    ]


def _schedule_audits(sid: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(object_id=sid).order_by("id"))


def test_resuming_a_schedule_that_is_not_paused_changes_nothing(
    api: APIClient, seed_example: dict[str, Any]
) -> None:
    sid = api.post("/v1/schedules", seed_example, format="json").json()["id"]
    before = _schedule_audits(sid)
    res = api.post(f"/v1/schedules/{sid}:resume")
    assert res.status_code == 200, res.content
    assert res.json()["version"] == 1 and res["ETag"] == '"1"'
    assert _schedule_audits(sid) == before
    assert not ExecutionEvent.objects.filter(schedule_id=sid, kind="resumed").exists()


def test_a_second_pause_is_an_audited_change_of_the_first(
    api: APIClient, seed_example: dict[str, Any]
) -> None:
    sid = api.post("/v1/schedules", seed_example, format="json").json()["id"]
    first = api.post(f"/v1/schedules/{sid}:pause", {"reason": "freeze"}, format="json").json()
    res = api.post(
        f"/v1/schedules/{sid}:pause",
        {"reason": "freeze, extended", "until": "2099-01-01T00:00:00Z"},
        format="json",
    )
    assert res.status_code == 200, res.content
    body = res.json()
    assert body["paused_reason"] == "freeze, extended"
    assert body["paused_until"] == "2099-01-01T00:00:00Z"
    # Still the same pause: it began with the first request.
    assert body["paused_at"] == first["paused_at"] and body["version"] == first["version"] + 1
    change = _schedule_audits(sid)[-1]
    assert change.action == "schedule.pause_update"
    assert change.before["paused_reason"] == "freeze" and change.before["paused_until"] is None
    assert change.after["paused_reason"] == "freeze, extended"
    assert change.after["paused_until"].startswith("2099-01-01T00:00:00")
    assert ExecutionEvent.objects.filter(schedule_id=sid, kind="pause_updated").count() == 1
