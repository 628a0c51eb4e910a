from __future__ import annotations

from typing import Any

import pytest
from django.test import Client


@pytest.mark.django_db
def test_healthz_and_readyz_report_db_broker_and_migrations(client: Client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200, ready.content
    assert ready.json() == {
        "status": "ready",
        "reasons": [],
        "checks": {"database": "ok", "migrations": "ok", "broker": "ok"},
    }


@pytest.mark.django_db
def test_openapi_document_lists_the_seed_contract(client: Client) -> None:
    res = client.get("/v1/openapi.json")
    assert res.status_code == 200
    doc: dict[str, Any] = res.json()
    assert doc["openapi"].startswith("3.")
    paths = set(doc["paths"])
    for p in [
        "/v1/schedules",
        "/v1/schedules/{id}",
        "/v1/schedules/{id}:pause",
        "/v1/schedules/{id}:resume",
        "/v1/schedules/{id}:trigger",
        "/v1/jobs",
        "/v1/executions",
        "/v1/executions/{id}",
        "/v1/schedules/{id}/preview",
    ]:
        assert p in paths, (p, sorted(paths))
    assert "at-least-once" in doc["info"]["description"].lower()
    assert "spring forward" in doc["info"]["description"]  # the DST policy is in the API docs
    docs_page = client.get("/v1/docs")
    assert docs_page.status_code == 200 and b"swagger" in docs_page.content.lower()
