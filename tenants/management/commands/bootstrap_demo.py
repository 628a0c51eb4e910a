"""A demo tenant, an admin user and an admin token for `make run` (idempotent)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from tenants import services
from tenants.models import Membership, Tenant
from tenants.roles import Role


@dataclass
class DemoAccess:
    tenant: Tenant
    username: str
    password: str
    cred_file: Path
    token: str
    token_file: Path


def ensure_demo() -> DemoAccess:
    """The demo tenant, its admin user and token, created if missing."""
    tenant = Tenant.objects.filter(slug="demo").first() or services.tenant_create(
        slug="demo", name="Demo team"
    )
    cred_file = settings.DATA_DIR / "admin-credentials"
    user_model = get_user_model()
    if not user_model.objects.filter(username="admin").exists() or not cred_file.exists():
        password = secrets.token_urlsafe(12)
        user = services.user_ensure(username="admin", password=password, is_staff=True)
        cred_file.parent.mkdir(parents=True, exist_ok=True)
        cred_file.write_text(f"admin {password}\n")
        cred_file.chmod(0o600)
    else:
        user = user_model.objects.get(username="admin")
    if not Membership.objects.filter(user=user, tenant=tenant).exists():
        services.membership_set(tenant=tenant, user=user, role=Role.ADMIN, actor=None)
    token_file = settings.DATA_DIR / "demo-token"
    if not token_file.exists():
        _, raw = services.token_issue(tenant=tenant, name="demo (make run)", role=Role.ADMIN)
        token_file.write_text(raw + "\n")
        token_file.chmod(0o600)
    username, password = cred_file.read_text().split()
    return DemoAccess(
        tenant=tenant,
        username=username,
        password=password,
        cred_file=cred_file,
        token=token_file.read_text().strip(),
        token_file=token_file,
    )


class Command(BaseCommand):
    help = "Create the demo tenant and admin user if missing, and print how to log in."

    def handle(self, *args: Any, **opts: Any) -> None:
        demo = ensure_demo()
        self.stdout.write(
            f"console login: {demo.username} / {demo.password}   (kept in {demo.cred_file})"
        )
        self.stdout.write(f"demo API token (tenant demo, admin): {demo.token}")
