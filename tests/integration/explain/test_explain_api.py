"""`GET /v1/schedules/{id}/explain?at=`: the explainer's answer over the API."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from dispatch import services
from dispatch.models import Execution, Schedule
from tenants.models import Tenant
from tenants.roles import Role
from tests.conftest import make_principal
from tests.support.explain_support import amsterdam_schedule
from tests.support.rows import execution_row

pytestmark = pytest.mark.django_db
MON_0900 = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)


@pytest.fixture
def schedule(tenant: Tenant) -> Schedule:
    return amsterdam_schedule(make_principal(tenant), "0 9 * * 1-5", name="morning")


def test_viewer_reads_the_answer_with_code_sentence_and_evidence(
    api_for: Callable[[Tenant, Role], APIClient], tenant: Tenant, schedule: Schedule
) -> None:
    e = execution_row(
        schedule,
        MON_0900,
        state="skipped",
        reason_code="misfire",
        reason="skipped by misfire policy (skip)",
    )
    Execution.objects.filter(pk=e.pk).update(created_at=MON_0900 + timedelta(minutes=14))
    response = api_for(tenant, Role.VIEWER).get(
        f"/v1/schedules/{schedule.id}/explain?at=2026-01-05T08:00:00Z"
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["code"] == "skipped_misfire"
    assert body["sentence"].startswith(
        "skipped by the misfire policy (skip) at 2026-01-05 09:00 CET"
    )
    assert body["at"] == "2026-01-05T08:00:00Z"
    assert body["occurrence"] == "2026-01-05T08:00:00Z"
    assert body["execution_id"] == str(e.id)
    assert body["evidence"] == [
        {
            "kind": "execution",
            "id": str(e.id),
            "label": "skipped (cron)",
            "url": f"/v1/executions/{e.id}",
        }
    ]


def test_at_with_an_offset_is_the_same_instant(api: APIClient, schedule: Schedule) -> None:
    body = api.get(
        f"/v1/schedules/{schedule.id}/explain", {"at": "2026-01-05T09:30:00+01:00"}
    ).json()
    assert body["code"] == "not_an_occurrence"
    assert body["at"] == "2026-01-05T08:30:00Z" and body["occurrence"] is None
    assert body["evidence"][0] == {
        "kind": "schedule",
        "id": str(schedule.id),
        "label": "morning",
        "url": f"/v1/schedules/{schedule.id}",
    }


@pytest.mark.parametrize(
    "query,message",
    [
        ("", "at: is required"),
        ("?at=yesterday", "at: must be an ISO 8601 instant"),
        ("?at=2026-01-05T09:00:00", "at: must carry a zone offset or Z"),
        ("?at=0001-01-01T00:00:00Z", "at: must be between 1970-01-01T00:00:00Z"),
        ("?at=9000-12-31T23:59:59-14:00", "at: must be between"),
    ],
)
def test_bad_at_is_400_naming_at(
    api: APIClient, schedule: Schedule, query: str, message: str
) -> None:
    response = api.get(f"/v1/schedules/{schedule.id}/explain{query}")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid" and "at" in error["detail"]
    assert error["message"].startswith(message)


def test_another_tenants_schedule_is_404(outsider_api: APIClient, schedule: Schedule) -> None:
    for url in (
        f"/v1/schedules/{schedule.id}/explain?at=2026-01-05T08:00:00Z",
        "/v1/schedules/00000000-0000-0000-0000-00000000abcd/explain?at=2026-01-05T08:00:00Z",
        "/v1/schedules/not-a-uuid/explain?at=2026-01-05T08:00:00Z",
    ):
        response = outsider_api.get(url)
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"


def test_deleted_schedule_still_explains(
    api: APIClient, schedule: Schedule, tenant: Tenant
) -> None:
    services.schedule_delete(actor=make_principal(tenant), schedule_id=schedule.id)
    body = api.get(f"/v1/schedules/{schedule.id}/explain", {"at": "2031-01-06T08:00:00Z"}).json()
    assert body["code"] == "deleted"
    assert any(e["kind"] == "audit" for e in body["evidence"])


def test_needs_a_token(db: Any, schedule: Schedule) -> None:
    assert (
        APIClient().get(f"/v1/schedules/{schedule.id}/explain?at=2026-01-05T08:00:00Z").status_code
        == 401
    )


def test_existing_routes_are_untouched(api: APIClient, schedule: Schedule) -> None:
    assert api.get(f"/v1/schedules/{schedule.id}").status_code == 200
    assert api.get(f"/v1/schedules/{schedule.id}/preview").status_code == 200


def test_the_openapi_document_lists_every_explainer_code_as_an_enum(client: Any) -> None:
    from dispatch.explain import CODES

    doc = client.get("/v1/openapi.json").json()
    answer = doc["paths"]["/v1/schedules/{id}/explain"]["get"]["responses"]["200"]
    ref = answer["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    code = doc["components"]["schemas"][ref]["properties"]["code"]
    if "$ref" in code or "allOf" in code:  # drf-spectacular names enums as components
        target = (code.get("$ref") or code["allOf"][0]["$ref"]).rsplit("/", 1)[-1]
        code = doc["components"]["schemas"][target]
    assert code["enum"] == list(CODES)
    assert {"dead", "failed", "skipped_quota", "ran"} <= set(code["enum"])
