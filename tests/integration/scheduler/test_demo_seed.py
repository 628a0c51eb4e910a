"""The demo `make run` seeds: idempotent across restarts, moved with the
receiver's port, never resurrected after the user deletes one, and loopback
allowed only for the receiver's exact address."""

from __future__ import annotations

from typing import Any

import pytest

from dispatch import demo, services
from dispatch.exceptions import InvalidSchedule
from dispatch.models import Execution, Schedule
from tenants import services as tenant_services
from tenants.roles import Role
from tests.conftest import make_principal

NAMES = {"demo-heartbeat", "demo-report", "demo-failing"}


def live(tenant: Any) -> dict[str, Schedule]:
    return {s.name: s for s in Schedule.objects.filter(tenant=tenant, deleted_at__isnull=True)}


@pytest.mark.django_db
def test_seed_is_idempotent_follows_the_port_and_respects_deletes(settings: Any) -> None:
    tenant = tenant_services.tenant_create(slug="demo", name="Demo team")
    settings.TARGET_TEST_ALLOW = ["127.0.0.1:18001", "127.0.0.1:18002"]

    first = demo.seed(tenant, "http://127.0.0.1:18001")
    assert sorted(first) == sorted(f"created {n}" for n in NAMES)
    schedules = live(tenant)
    assert set(schedules) == NAMES
    assert schedules["demo-failing"].target["url"] == "http://127.0.0.1:18001/fail"
    # Each ran once on creation: something to see before the first cron minute.
    assert Execution.objects.filter(tenant=tenant, trigger="manual").count() == 3

    # A restart on the same port changes nothing.
    assert demo.seed(tenant, "http://127.0.0.1:18001") == []
    assert set(live(tenant)) == NAMES
    assert Schedule.objects.filter(tenant=tenant).count() == 3
    assert Execution.objects.filter(tenant=tenant).count() == 3
    assert demo.choose_port(tenant) == 18001  # the port used last time, being free

    # The receiver on another port: the same schedules move with it.
    moved = demo.seed(tenant, "http://127.0.0.1:18002")
    assert len(moved) == 3 and all("port 18002" in m for m in moved)
    assert {s.target["url"].rsplit("/", 1)[0] for s in live(tenant).values()} == {
        "http://127.0.0.1:18002"
    }
    assert Schedule.objects.filter(tenant=tenant).count() == 3

    # Deleted by the user: not brought back.
    services.schedule_delete(
        actor=make_principal(tenant, Role.ADMIN), schedule_id=live(tenant)["demo-report"].id
    )
    assert demo.seed(tenant, "http://127.0.0.1:18002") == []
    assert set(live(tenant)) == NAMES - {"demo-report"}


@pytest.mark.django_db
def test_loopback_stays_denied_without_the_receivers_exact_address(settings: Any) -> None:
    tenant = tenant_services.tenant_create(slug="demo", name="Demo team")
    settings.TARGET_TEST_ALLOW = ["127.0.0.1:18003"]
    with pytest.raises(InvalidSchedule) as exc:
        demo.seed(tenant, "http://127.0.0.1:18004")
    assert "target" in str(exc.value.detail)
    assert not Schedule.objects.filter(tenant=tenant).exists()
