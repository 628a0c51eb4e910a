"""Tenants can read and rotate the key that signs their callbacks (admin only)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from rest_framework.test import APIClient

from dispatch.targets.http import sign
from tenants.models import AuditEvent, Tenant
from tenants.roles import Role

pytestmark = pytest.mark.django_db


def test_admin_reads_and_rotates_the_signing_key(
    api_for: Callable[[Tenant, Role], APIClient], tenant: Tenant, other_tenant: Tenant
) -> None:
    admin = api_for(tenant, Role.ADMIN)
    first = admin.get("/v1/signing-key").json()["signing_key"]
    assert first == Tenant.objects.get(pk=tenant.pk).signing_key
    assert first != Tenant.objects.get(pk=other_tenant.pk).signing_key
    rotated = admin.post("/v1/signing-key:rotate").json()["signing_key"]
    assert rotated != first and rotated == Tenant.objects.get(pk=tenant.pk).signing_key
    assert sign(rotated, 1, "e", b"x") != sign(first, 1, "e", b"x")
    audit = AuditEvent.objects.get(action="tenant.signing_key_rotate")
    assert first not in str(audit.after) and rotated not in str(audit.after)
    for role in (Role.VIEWER, Role.OPERATOR):
        client = api_for(tenant, role)
        assert client.get("/v1/signing-key").status_code == 403
        assert client.post("/v1/signing-key:rotate").status_code == 403
