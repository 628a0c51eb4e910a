"""Service tokens: digest-only storage, shown once, revocation and expiry at once, throttling."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from tenants import services
from tenants.models import ServiceToken, Tenant
from tenants.roles import Role

pytestmark = pytest.mark.django_db


def client_with(raw: str) -> APIClient:
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return c


def test_no_plaintext_token_anywhere_in_the_database(api: APIClient, tenant: Tenant) -> None:
    created = api.post("/v1/tokens", {"name": "ci", "role": "operator"}, format="json")
    assert created.status_code == 201
    raw = created.json()["token"]
    assert raw.startswith(created.json()["prefix"] + "_")
    secret_part = raw.split("_", 2)[2]
    with connection.cursor() as cur:
        cur.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = 'public' AND data_type IN ('text', 'character varying', 'jsonb')"
        )
        columns = cur.fetchall()
        for table, column in columns:
            cur.execute(
                f'SELECT count(*) FROM "{table}" WHERE "{column}"::text LIKE %s',  # noqa: S608
                [f"%{secret_part}%"],
            )
            assert cur.fetchone()[0] == 0, f"token secret found in {table}.{column}"
    # Listing never shows it again.
    listed = api.get("/v1/tokens").json()["results"]
    assert all("token" not in t for t in listed)
    assert client_with(raw).get("/v1/schedules").status_code == 200


def test_revocation_is_effective_on_the_next_request(tenant: Tenant) -> None:
    token, raw = services.token_issue(tenant=tenant, name="x", role=Role.VIEWER)
    c = client_with(raw)
    assert c.get("/v1/schedules").status_code == 200
    services.token_revoke(tenant=tenant, token_id=token.pk, actor=None)
    res = c.get("/v1/schedules")
    assert res.status_code == 401 and res.json()["error"]["code"] == "not_authenticated"


def test_expiry_is_effective_at_once(tenant: Tenant) -> None:
    token, raw = services.token_issue(
        tenant=tenant, name="x", role=Role.VIEWER, expires_at=timezone.now() + timedelta(hours=1)
    )
    assert client_with(raw).get("/v1/schedules").status_code == 200
    ServiceToken.objects.filter(pk=token.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert client_with(raw).get("/v1/schedules").status_code == 401


def test_inactive_tenant_tokens_stop_working(tenant: Tenant) -> None:
    _, raw = services.token_issue(tenant=tenant, name="x", role=Role.VIEWER)
    Tenant.objects.filter(pk=tenant.pk).update(active=False)
    assert client_with(raw).get("/v1/schedules").status_code == 401


@pytest.mark.parametrize(
    "header", ["Token abc", "Bearer", "Bearer sched_nothex_xx", "Basic dXNlcjpwYXNz"]
)
def test_malformed_authorization_is_401(db: Any, header: str) -> None:
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=header)
    assert c.get("/v1/schedules").status_code == 401


def test_last_used_is_recorded(tenant: Tenant) -> None:
    token, raw = services.token_issue(tenant=tenant, name="x", role=Role.VIEWER)
    assert token.last_used_at is None
    client_with(raw).get("/v1/schedules")
    token.refresh_from_db()
    assert token.last_used_at is not None


def test_throttling_is_per_token_with_retry_after(tenant: Tenant) -> None:
    _, raw_a = services.token_issue(tenant=tenant, name="a", role=Role.VIEWER)
    _, raw_b = services.token_issue(tenant=tenant, name="b", role=Role.VIEWER)
    with override_settings(API_RATE_LIMIT="3/min"):
        a = client_with(raw_a)
        codes = [a.get("/v1/schedules").status_code for _ in range(4)]
        assert codes == [200, 200, 200, 429]
        limited = a.get("/v1/schedules")
        assert limited.status_code == 429 and int(limited["Retry-After"]) >= 1
        assert limited.json()["error"]["code"] == "throttled"
        assert client_with(raw_b).get("/v1/schedules").status_code == 200
