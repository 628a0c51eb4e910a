"""Management commands used by scripts and CI."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from tenants.models import ServiceToken, Tenant

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_create_tenant_and_issue_token_prints_token_alone_on_last_line() -> None:
    assert "created tenant ops" in run("create_tenant", "ops", "--name", "Ops team")
    tenant = Tenant.objects.get(slug="ops")
    assert tenant.name == "Ops team" and tenant.quota.max_concurrent == 10
    out = run("issue_token", "ops", "--role", "operator", "--name", "deploy-bot")
    token = out.strip().splitlines()[-1]
    assert token.startswith("sched_") and " " not in token
    stored = ServiceToken.objects.get(tenant=tenant)
    assert (
        stored.role == "operator"
        and stored.name == "deploy-bot"
        and token.startswith(stored.prefix)
    )
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert client.get("/v1/schedules").status_code == 200


def test_commands_fail_clearly() -> None:
    run("create_tenant", "ops")
    with pytest.raises(CommandError, match="already exists"):
        run("create_tenant", "ops")
    with pytest.raises(CommandError, match="lower-case"):
        run("create_tenant", "Bad Slug")
    with pytest.raises(CommandError, match="no tenant"):
        run("issue_token", "nope", "--role", "admin", "--name", "x")


def test_bootstrap_demo_is_idempotent(settings: Any, tmp_path: Any) -> None:
    settings.DATA_DIR = tmp_path
    first = run("bootstrap_demo")
    second = run("bootstrap_demo")
    assert first == second and "console login: admin / " in first
    token = first.strip().splitlines()[-1].split(": ")[-1]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert client.get("/v1/schedules").status_code == 200
    assert Tenant.objects.filter(slug="demo").count() == 1
