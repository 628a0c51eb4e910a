"""Personas and objects for the console tests: a tenant with an admin, an
operator and a viewer; an outsider tenant with its own admin and schedule;
platform staff. Each persona gets a logged-in Django test client."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.db import connection
from django.test import Client

from dispatch import services
from dispatch.models import Execution, Schedule
from dispatch.partitioning import partition_for
from dispatch.timing import cron
from tenants import services as tenant_services
from tenants.models import Tenant
from tenants.roles import Principal, Role

TARGET = {"type": "http", "url": "https://billing.internal/hook", "method": "POST"}
PASSWORD = "console-test-pw-1"


def user(username: str, *, staff: bool = False, password: str | None = None) -> User:
    """A user; with no password an unusable one (hashing costs ~0.3 s; tests log in with force_login)."""
    if password is not None:
        return tenant_services.user_ensure(username=username, password=password, is_staff=staff)
    u, _ = User.objects.update_or_create(
        username=username, defaults={"is_staff": staff, "is_superuser": staff}
    )
    u.set_unusable_password()
    u.save(update_fields=["password"])
    return u


def principal_of(u: User, tenant: Tenant, role: Role) -> Principal:
    return Principal(
        tenant=tenant,
        role=role,
        actor_kind="user",
        actor_id=str(u.pk),
        label=f"user:{u.get_username()}",
    )


def client_for(u: User, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(u)
    return client


def text(response: Any) -> str:
    """A test client response's body as text."""
    return str(response.content.decode())


def db_now() -> datetime:
    with connection.cursor() as cur:
        cur.execute("SELECT now()")
        value: datetime = cur.fetchone()[0]
    return value


def bulk_schedules(
    tenant: Tenant,
    count: int,
    *,
    prefix: str,
    expr: str = "0 0 * * *",
    next_run_after: datetime | None = None,
) -> None:
    """`count` UTC cron schedules named `{prefix}-0000`... written in one INSERT (past any
    per-tenant quota); with `next_run_after`, each has its next run after that instant."""
    rows = []
    for i in range(count):
        sid = uuid.uuid4()
        extra: dict[str, Any] = {}
        if next_run_after is not None:
            extra["next_run_at"] = cron.next_after(expr, "UTC", after=next_run_after, seed=str(sid))
        rows.append(
            Schedule(
                id=sid,
                tenant=tenant,
                partition=partition_for(sid),
                name=f"{prefix}-{i:04d}",
                kind="cron",
                cron=expr,
                timezone="UTC",
                target=TARGET,
                created_by="test",
                **extra,
            )
        )
    Schedule.objects.bulk_create(rows)


def form_data(**overrides: Any) -> dict[str, Any]:
    """A valid schedule form submission."""
    data: dict[str, Any] = {
        "name": "nightly-export",
        "kind": "cron",
        "cron": "0 9 * * 1-5",
        "run_at": "",
        "timezone": "Europe/Amsterdam",
        "target": '{"type": "http", "url": "https://billing.internal/hook", "method": "POST"}',
        "retry_max_attempts": "3",
        "retry_backoff": "exponential",
        "retry_initial_s": "10",
        "retry_max_s": "3600",
        "priority": "default",
        "duration": "short",
        "concurrency": "forbid",
        "misfire": "skip",
        "misfire_grace_s": "60",
        "catch_up_limit": "10",
        "jitter_s": "0",
        "version": "",
        "preview_seed": "",
    }
    data.update(overrides)
    return data


@dataclass
class World:
    tenant: Tenant
    other: Tenant
    admin: User
    operator: User
    viewer: User
    outsider: User
    staff: User
    admin_p: Principal
    outsider_p: Principal
    schedule: Schedule
    other_schedule: Schedule
    execution: Execution
    other_execution: Execution

    def client(self, who: str, *, csrf: bool = False) -> Client:
        return client_for(getattr(self, who), csrf=csrf)


def build_world() -> World:
    tenant = tenant_services.tenant_create(slug="billing", name="Billing")
    other = tenant_services.tenant_create(slug="outsider", name="Outsider")
    admin, operator, viewer = user("alice"), user("olga"), user("vera")
    outsider, staff = user("oscar"), user("root", staff=True)
    for u, role in ((admin, Role.ADMIN), (operator, Role.OPERATOR), (viewer, Role.VIEWER)):
        tenant_services.membership_set(tenant=tenant, user=u, role=role, actor=None)
    tenant_services.membership_set(tenant=other, user=outsider, role=Role.ADMIN, actor=None)
    admin_p = principal_of(admin, tenant, Role.ADMIN)
    outsider_p = principal_of(outsider, other, Role.ADMIN)
    schedule = services.schedule_create(
        actor=admin_p,
        data={
            "name": "nightly",
            "cron": "0 0 * * *",
            "timezone": "Europe/Amsterdam",
            "target": TARGET,
        },
    )
    other_schedule = services.schedule_create(
        actor=outsider_p, data={"name": "theirs", "cron": "0 0 * * *", "target": TARGET}
    )
    execution = services.schedule_trigger(actor=admin_p, schedule_id=schedule.id)
    other_execution = services.schedule_trigger(actor=outsider_p, schedule_id=other_schedule.id)
    return World(
        tenant=tenant,
        other=other,
        admin=admin,
        operator=operator,
        viewer=viewer,
        outsider=outsider,
        staff=staff,
        admin_p=admin_p,
        outsider_p=outsider_p,
        schedule=schedule,
        other_schedule=other_schedule,
        execution=execution,
        other_execution=other_execution,
    )
