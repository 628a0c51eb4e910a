"""Role x endpoint matrix, with an outsider tenant whose objects must be 404."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from dispatch.models import Schedule
from tenants.models import AuditEvent, Tenant
from tenants.roles import Role

pytestmark = pytest.mark.django_db

MISSING = "00000000-0000-0000-0000-00000000abcd"


@pytest.fixture
def owned(
    api_for: Callable[[Tenant, Role], APIClient],
    tenant: Tenant,
    other_tenant: Tenant,
    seed_example: dict[str, Any],
) -> dict[str, Any]:
    """What the owner tenant holds, as ids: a schedule, an execution and a spare token
    (named apart from the console tests' `world`, which is another thing)."""
    owner = api_for(tenant, Role.ADMIN)
    sid = owner.post("/v1/schedules", seed_example, format="json").json()["id"]
    eid = owner.post(f"/v1/schedules/{sid}:trigger").json()["execution_id"]
    token_id = owner.post("/v1/tokens", {"name": "spare", "role": "viewer"}, format="json").json()[
        "id"
    ]
    return {"sid": sid, "eid": eid, "token_id": token_id, "body": seed_example}


def routes(w: dict[str, Any]) -> list[tuple[str, str, Any, Role]]:
    """(method, url, body, least role allowed)"""
    sid, eid = w["sid"], w["eid"]
    return [
        ("get", "/v1/schedules", None, Role.VIEWER),
        ("get", f"/v1/schedules/{sid}", None, Role.VIEWER),
        ("get", f"/v1/schedules/{sid}/preview", None, Role.VIEWER),
        ("get", "/v1/executions", None, Role.VIEWER),
        ("get", f"/v1/executions/{eid}", None, Role.VIEWER),
        ("post", "/v1/schedules", w["body"] | {"name": "new-one"}, Role.OPERATOR),
        ("patch", f"/v1/schedules/{sid}", {"jitter_s": 3, "version": 1}, Role.OPERATOR),
        ("post", f"/v1/schedules/{sid}:pause", {"reason": "r"}, Role.OPERATOR),
        ("post", f"/v1/schedules/{sid}:resume", None, Role.OPERATOR),
        ("post", f"/v1/schedules/{sid}:trigger", None, Role.OPERATOR),
        ("post", "/v1/jobs", {"target": w["body"]["target"]}, Role.OPERATOR),
        ("get", "/v1/tokens", None, Role.ADMIN),
        ("post", "/v1/tokens", {"name": "t", "role": "viewer"}, Role.ADMIN),
        ("delete", f"/v1/tokens/{w['token_id']}", None, Role.ADMIN),
        ("delete", f"/v1/schedules/{sid}", None, Role.OPERATOR),
    ]


@pytest.mark.parametrize("role", list(Role))
def test_role_matrix(
    role: Role, api_for: Callable[[Tenant, Role], APIClient], tenant: Tenant, owned: dict[str, Any]
) -> None:
    client = api_for(tenant, role)
    for method, url, body, least in routes(owned):
        res = getattr(client, method)(url, body, format="json")
        if role >= least:
            assert res.status_code in (200, 201, 202, 204), (role, method, url, res.content)
        else:
            assert res.status_code == 403, (role, method, url, res.status_code)
            assert res.json()["error"]["code"] == "forbidden"
    denied = AuditEvent.objects.filter(outcome="denied").count()
    expected = sum(1 for *_, least in routes(owned) if role < least)
    assert denied == expected


def _object_routes(w: dict[str, Any], ids: dict[str, str]) -> list[tuple[str, str, Any]]:
    sid, eid, tid = ids["sid"], ids["eid"], ids["token_id"]
    return [
        ("get", f"/v1/schedules/{sid}", None),
        ("get", f"/v1/schedules/{sid}/preview", None),
        ("patch", f"/v1/schedules/{sid}", {"jitter_s": 3, "version": 1}),
        ("delete", f"/v1/schedules/{sid}", None),
        ("post", f"/v1/schedules/{sid}:pause", None),
        ("post", f"/v1/schedules/{sid}:resume", None),
        ("post", f"/v1/schedules/{sid}:trigger", None),
        ("get", f"/v1/executions/{eid}", None),
        ("delete", f"/v1/tokens/{tid}", None),
    ]


def test_outsider_gets_404_identical_to_missing_and_changes_nothing(
    outsider_api: APIClient, owned: dict[str, Any]
) -> None:
    before = Schedule.objects.get(pk=owned["sid"])
    missing = {"sid": MISSING, "eid": MISSING, "token_id": "999999"}
    for (method, url, body), (_, missing_url, _) in zip(
        _object_routes(owned, owned), _object_routes(owned, missing), strict=True
    ):
        theirs = getattr(outsider_api, method)(url, body, format="json")
        nothing = getattr(outsider_api, method)(missing_url, body, format="json")
        assert theirs.status_code == 404, (method, url)
        assert theirs.json() == nothing.json(), (method, url)
    after = Schedule.objects.get(pk=owned["sid"])
    assert (after.version, after.paused, after.deleted_at, after.jitter_s) == (
        before.version,
        before.paused,
        before.deleted_at,
        before.jitter_s,
    )
    listed = outsider_api.get(f"/v1/executions?schedule_id={owned['sid']}").json()["results"]
    assert listed == []
    assert outsider_api.get("/v1/schedules").json()["results"] == []


def test_no_token_is_401_with_bearer_challenge(db: Any) -> None:
    res = APIClient().get("/v1/schedules")
    assert res.status_code == 401
    assert res["WWW-Authenticate"].startswith("Bearer")
    assert res.json()["error"]["code"] == "not_authenticated"
