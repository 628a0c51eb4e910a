"""Alert policies and snooze through the API: the tenant default, a schedule's
override and where the effective one comes from, validation naming the field,
roles (viewers read, operators write), another tenant's objects as 404s."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from dispatch.models import AlertPolicy
from tenants.models import AuditEvent, Tenant
from tenants.roles import Role
from tests.support.worker_support import db_now

pytestmark = pytest.mark.django_db


@pytest.fixture
def schedule_id(api: APIClient, seed_example: dict[str, Any]) -> str:
    res = api.post("/v1/schedules", seed_example, format="json")
    assert res.status_code == 201, res.content
    return str(res.json()["id"])


def test_default_then_override_then_back(api: APIClient, schedule_id: str) -> None:
    url = f"/v1/schedules/{schedule_id}/alert-policy"
    built_in = api.get(url).json()
    assert built_in == {
        "failure_threshold": 1,
        "recovery": True,
        "realert_s": 0,
        "auto_pause_after": 0,
        "late_after_s": 0,
        "max_duration_s": 0,
        "channels": [],
        "source": "built-in",
        "snoozed_until": None,
    }
    cid = api.post(
        "/v1/alert-channels",
        {"name": "m", "kind": "email", "config": {"to": ["o@b.test"]}},
        format="json",
    ).json()["id"]
    res = api.put("/v1/alert-policy", {"failure_threshold": 3, "channels": [cid]}, format="json")
    assert res.status_code == 200, res.content
    assert (res.json()["failure_threshold"], res.json()["channels"]) == (3, [cid])
    assert api.get(url).json()["source"] == "tenant"

    own = api.put(url, {"auto_pause_after": 5, "recovery": False}, format="json")
    assert own.status_code == 200, own.content
    assert own.json() | {"snoozed_until": None} == built_in | {
        "auto_pause_after": 5,
        "recovery": False,
        "source": "schedule",
    }
    assert AlertPolicy.objects.filter(schedule_id=schedule_id, auto_pause_after=5).exists()
    back = api.delete(url)
    assert back.status_code == 200 and back.json()["source"] == "tenant"
    actions = set(
        AuditEvent.objects.filter(object_type="alert_policy").values_list("action", flat=True)
    )
    assert actions == {"alert_policy.set", "alert_policy.delete"}


@pytest.mark.parametrize(
    "body,field",
    [
        ({"failure_threshold": 0}, "failure_threshold"),
        ({"realert_s": -1}, "realert_s"),
        ({"auto_pause_after": "five"}, "auto_pause_after"),
        ({"late_after_s": 7 * 86400 + 1}, "late_after_s"),
        ({"max_duration_s": True}, "max_duration_s"),
        ({"recovery": "sometimes"}, "recovery"),
        ({"channels": ["not-a-uuid"]}, "channels"),
        ({"channels": ["00000000-0000-0000-0000-000000000000"]}, "channels"),
        ({"muted": True}, "muted"),
    ],
)
def test_a_bad_policy_is_a_400_naming_the_field(
    api: APIClient, body: dict[str, Any], field: str
) -> None:
    res = api.put("/v1/alert-policy", body, format="json")
    assert res.status_code == 400, res.content
    assert field in res.json()["error"]["detail"], res.json()


def test_another_tenants_channel_and_schedule_are_unknown(
    api: APIClient, outsider_api: APIClient, schedule_id: str
) -> None:
    theirs = outsider_api.post(
        "/v1/alert-channels",
        {"name": "m", "kind": "email", "config": {"to": ["o@b.test"]}},
        format="json",
    ).json()["id"]
    res = api.put("/v1/alert-policy", {"channels": [theirs]}, format="json")
    assert res.status_code == 400 and "channels" in res.json()["error"]["detail"]
    for method in ("get", "put", "delete"):
        res = getattr(outsider_api, method)(
            f"/v1/schedules/{schedule_id}/alert-policy", {}, format="json"
        )
        assert res.status_code == 404, (method, res.status_code)
    res = outsider_api.post(f"/v1/schedules/{schedule_id}:snooze", {"until": None}, format="json")
    assert res.status_code == 404


def test_viewers_read_operators_write(
    api_for: Callable[[Tenant, Role], APIClient], tenant: Tenant, schedule_id: str
) -> None:
    viewer, operator = api_for(tenant, Role.VIEWER), api_for(tenant, Role.OPERATOR)
    assert viewer.get("/v1/alert-policy").status_code == 200
    assert viewer.put("/v1/alert-policy", {}, format="json").status_code == 403
    assert (
        viewer.post(
            f"/v1/schedules/{schedule_id}:snooze", {"until": None}, format="json"
        ).status_code
        == 403
    )
    assert operator.put("/v1/alert-policy", {"realert_s": 600}, format="json").status_code == 200


def test_snooze_and_unsnooze(api: APIClient, schedule_id: str) -> None:
    until = db_now() + timedelta(hours=2)
    url = f"/v1/schedules/{schedule_id}:snooze"
    res = api.post(url, {"until": until.isoformat()}, format="json")
    assert res.status_code == 200, res.content
    assert res.json()["snoozed_until"].startswith(until.strftime("%Y-%m-%dT%H:%M"))
    past = api.post(url, {"until": (db_now() - timedelta(minutes=1)).isoformat()}, format="json")
    assert past.status_code == 400 and "until" in past.json()["error"]["detail"]
    assert api.post(url, {}, format="json").status_code == 400  # until is required (null ends it)
    ended = api.post(url, {"until": None}, format="json")
    assert ended.status_code == 200 and ended.json()["snoozed_until"] is None
    assert AuditEvent.objects.filter(action="schedule.snooze", object_id=schedule_id).count() == 2


def test_policies_are_in_the_openapi_document(api: APIClient) -> None:
    paths = api.get("/v1/openapi.json").json()["paths"]
    assert set(paths["/v1/alert-policy"]) == {"get", "put"}
    assert set(paths["/v1/schedules/{id}/alert-policy"]) == {"get", "put", "delete"}
    assert {"400", "403", "404"} <= set(paths["/v1/schedules/{id}:snooze"]["post"]["responses"])
