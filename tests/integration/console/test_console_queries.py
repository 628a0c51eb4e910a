"""List pages cost a bounded number of queries however many rows they show (no N+1)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dispatch import services
from dispatch.models import Execution, ExecutionEvent, Schedule
from tenants import services as tenant_services
from tenants.models import AuditEvent
from tenants.roles import Role
from tests.support.console_support import TARGET, World, build_world, user

pytestmark = pytest.mark.django_db


_seq = iter(range(10_000))


def grow(world: World, n: int) -> None:
    """n more schedules (each with an upstream link and executions in every state), tokens, members, audit rows."""
    now = datetime.now(UTC)
    states = ["succeeded", "running", "dead", "failed", "retry_scheduled", "skipped", "queued"]
    for _ in range(n):
        i = next(_seq)
        s = services.schedule_create(
            actor=world.admin_p,
            data={
                "name": f"s-{i}",
                "cron": "* * * * *",
                "target": TARGET,
                "depends_on": [str(world.schedule.id)],
            },
        )
        Schedule.objects.filter(pk=s.pk).update(next_run_at=now + timedelta(seconds=30))
        for j, state in enumerate(states):
            at = now - timedelta(minutes=10 * j + i)
            e = Execution.objects.create(
                schedule=s,
                tenant=world.tenant,
                scheduled_for=at,
                due_at=at,
                state=state,
                started_at=at,
                error="boom" if state != "succeeded" else "",
                lease_owner="w",
            )
            ExecutionEvent.objects.create(
                tenant=world.tenant, schedule=s, execution=e, kind="claimed", message="c"
            )
        tenant_services.token_issue(tenant=world.tenant, name=f"t-{i}", role=Role.VIEWER)
        tenant_services.membership_set(
            tenant=world.tenant, user=user(f"u-{i}"), role=Role.VIEWER, actor=None
        )
        AuditEvent.objects.create(
            tenant=world.tenant, actor_kind="user", actor_label="user:x", action="x.y"
        )


PAGES = ["/", "/dashboard/live", "/schedules/", "/tokens/", "/members/", "/ops/", "/ops/audit"]


@pytest.mark.parametrize("url", PAGES)
def test_list_pages_have_a_bounded_query_count(
    db: Any, url: str, django_assert_max_num_queries: Any
) -> None:
    world = build_world()
    client = world.client("staff" if url.startswith("/ops") else "admin")
    client.get(url)  # warm the session
    grow(world, 3)
    with django_assert_max_num_queries(20) as small:
        assert client.get(url).status_code == 200
    grow(world, 12)
    with django_assert_max_num_queries(len(small.captured_queries)) as big:
        assert client.get(url).status_code == 200
    assert len(big.captured_queries) == len(small.captured_queries), (
        url,
        len(small.captured_queries),
        len(big.captured_queries),
    )


def test_schedule_detail_and_execution_pages_are_bounded(
    db: Any, django_assert_max_num_queries: Any
) -> None:
    world = build_world()
    client = world.client("admin")
    grow(world, 2)
    url = f"/schedules/{world.schedule.id}/"
    # 31: the runs-per-hour chart is one statement of its own; the schedule's health
    # runs under generic_plans (its two settings, and the savepoint it takes inside the
    # test's transaction); the held days are looked up once a minute per process.
    with django_assert_max_num_queries(31):
        assert client.get(url).status_code == 200
    eid = Execution.objects.filter(tenant=world.tenant).first().id  # type: ignore[union-attr]
    with django_assert_max_num_queries(15):
        assert client.get(f"/executions/{eid}/").status_code == 200
