"""POST /v1/jobs: run-now and delayed one-offs with idempotency keys."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from dispatch.models import Schedule
from tests.support.concurrency import at_once

TARGET = {"type": "http", "url": "https://notify.internal/remind"}


@pytest.mark.django_db
def test_delayed_job_and_same_key_same_body_returns_same_job(api: APIClient) -> None:
    body = {
        "run_at": "2030-09-26T09:00:00Z",
        "target": TARGET,
        "idempotency_key": "remind-u42-2026-09-26",
    }
    first = api.post("/v1/jobs", body, format="json")
    assert first.status_code == 201, first.content
    job = first.json()
    assert job["kind"] == "once" and job["next_run_at"] == "2030-09-26T09:00:00Z"
    assert job["idempotency_key"] == "remind-u42-2026-09-26"
    again = api.post("/v1/jobs", body, format="json")
    assert again.status_code == 200 and again.json()["id"] == job["id"]
    assert Schedule.objects.count() == 1


@pytest.mark.django_db
def test_same_key_different_body_is_409(api: APIClient) -> None:
    body = {"run_at": "2030-09-26T09:00:00Z", "target": TARGET, "idempotency_key": "k1"}
    assert api.post("/v1/jobs", body, format="json").status_code == 201
    res = api.post("/v1/jobs", body | {"run_at": "2030-09-27T09:00:00Z"}, format="json")
    assert res.status_code == 409
    assert res.json()["error"]["code"] == "idempotency_conflict"
    assert "idempotency_key" in res.json()["error"]["detail"]
    assert Schedule.objects.count() == 1


@pytest.mark.django_db
def test_run_now_when_run_at_is_absent(api: APIClient) -> None:
    before = datetime.now(UTC) - timedelta(seconds=5)
    res = api.post("/v1/jobs", {"target": TARGET}, format="json")
    assert res.status_code == 201, res.content
    nxt = datetime.fromisoformat(res.json()["next_run_at"].replace("Z", "+00:00"))
    assert before <= nxt <= datetime.now(UTC) + timedelta(seconds=5)


@pytest.mark.django_db
def test_keys_are_per_tenant(api: APIClient, outsider_api: APIClient) -> None:
    body = {"run_at": "2030-09-26T09:00:00Z", "target": TARGET, "idempotency_key": "shared"}
    a = api.post("/v1/jobs", body, format="json")
    b = outsider_api.post("/v1/jobs", body, format="json")
    assert a.status_code == 201 and b.status_code == 201 and a.json()["id"] != b.json()["id"]


@pytest.mark.django_db
def test_job_errors_name_the_field(api: APIClient) -> None:
    res = api.post("/v1/jobs", {"target": TARGET, "run_at": "soon"}, format="json")
    assert res.status_code == 400 and "run_at" in res.json()["error"]["detail"]
    res = api.post("/v1/jobs", {"run_at": "2030-01-01T00:00:00Z"}, format="json")
    assert res.status_code == 400 and "target" in res.json()["error"]["detail"]


@pytest.mark.django_db(transaction=True)
def test_concurrent_requests_with_one_key_create_one_job(api_for: Any, tenant: Any) -> None:
    from tenants.roles import Role

    body = {"run_at": "2030-09-26T09:00:00Z", "target": TARGET, "idempotency_key": "race"}
    clients = [api_for(tenant, Role.OPERATOR) for _ in range(6)]

    def post(client: APIClient) -> tuple[int, str]:
        res = client.post("/v1/jobs", body, format="json")
        return res.status_code, res.json()["id"]

    results = at_once(clients, post)
    codes = sorted(code for code, _ in results)
    assert codes.count(201) == 1 and codes.count(200) == len(clients) - 1, codes
    assert len({job_id for _, job_id in results}) == 1
    assert Schedule.objects.filter(idempotency_key="race").count() == 1
