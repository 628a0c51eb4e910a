"""Layout in a real browser: a 200-character name (allowed) wraps instead of
widening the pages, and the schedule form shows only the fields of the kind
and misfire policy chosen — with CSS alone, so also without JavaScript."""

from __future__ import annotations

from typing import Any

import pytest

from dispatch import services
from tenants import services as tenant_services
from tenants.roles import Role
from tests.browser.conftest import login, shot
from tests.support.console_support import TARGET, principal_of, user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PW = "browser-pw-layout-1"
WIDTH = 1280


@pytest.fixture
def alice(transactional_db: Any) -> Any:
    tenant = tenant_services.tenant_create(slug="billing", name="Billing")
    u = user("alice", password=PW)
    tenant_services.membership_set(tenant=tenant, user=u, role=Role.ADMIN, actor=None)
    return principal_of(u, tenant, Role.ADMIN)


def page_width(page: Any) -> int:
    return int(page.evaluate("document.documentElement.scrollWidth"))


def test_a_200_character_name_wraps_on_every_page(new_page: Any, alice: Any) -> None:
    name = "n" * 200
    s = services.schedule_create(
        actor=alice, data={"name": name, "cron": "* * * * *", "target": TARGET}
    )
    page = new_page(viewport={"width": WIDTH, "height": 900})
    login(page, "alice", PW)
    for url in (
        "/",
        "/schedules/",
        f"/schedules/{s.id}/",
        f"/schedules/{s.id}/edit",
        f"/explain?schedule={s.id}&at=2026-01-05T00:00",
        "/upcoming",
    ):
        page.goto(url)
        assert page_width(page) <= WIDTH, url
    page.goto(f"/schedules/{s.id}/")
    shot(page, "22-long-name-wraps")


@pytest.mark.parametrize("js", [True, False])
def test_the_form_shows_the_fields_of_the_kind_and_policy_chosen(
    new_page: Any, alice: Any, js: bool
) -> None:
    page = new_page(java_script_enabled=js)
    login(page, "alice", PW)
    page.goto("/schedules/new")
    cron, run_at = page.get_by_label("Cron"), page.get_by_label("Run at")
    limit = page.get_by_label("Catch-up limit")
    assert cron.is_visible() and not run_at.is_visible() and not limit.is_visible()
    assert page.get_by_label("Timeout (s)").is_visible()
    page.get_by_label("Kind").select_option("once")
    assert run_at.is_visible() and not cron.is_visible()
    page.locator("#id_misfire").select_option("catch_up")
    assert limit.is_visible()
    if not js:
        # Submitted without JS: a one-off ignores the cron left in the hidden field.
        page.get_by_label("Name").fill("once-nojs")
        run_at.fill("2031-03-01T10:00:00")
        page.get_by_role("button", name="Create schedule").click()
        page.get_by_role("heading", name="once-nojs").wait_for()
