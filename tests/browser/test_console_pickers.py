"""The schedule pickers in a real browser, with more schedules than the old
500-name dropdowns could list: edit a schedule without losing its upstream,
add an upstream by searching with the keyboard only, and explain a schedule
found by search. Without JavaScript both are plain text fields."""

from __future__ import annotations

from typing import Any

import pytest

from dispatch import services
from tenants import services as tenant_services
from tenants.models import Tenant
from tenants.roles import Principal, Role
from tests.browser.conftest import login, shot
from tests.support.console_support import TARGET, bulk_schedules, principal_of, user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
# Skipped with the others (conftest) when Playwright is not installed.
expect = pytest.importorskip("playwright.sync_api").expect
PW = "browser-pw-picker-1"
MANY = 510


class Crowd:
    def __init__(self) -> None:
        self.tenant: Tenant = tenant_services.tenant_create(slug="billing", name="Billing")
        self.alice = user("alice", password=PW)
        tenant_services.membership_set(
            tenant=self.tenant, user=self.alice, role=Role.ADMIN, actor=None
        )
        self.p: Principal = principal_of(self.alice, self.tenant, Role.ADMIN)
        bulk_schedules(self.tenant, MANY, prefix="aaa")
        self.upstream = services.schedule_create(
            actor=self.p, data={"name": "zz-export", "cron": "0 0 * * *", "target": TARGET}
        )
        self.child = services.schedule_create(
            actor=self.p,
            data={
                "name": "zz-report",
                "cron": "0 1 * * *",
                "target": TARGET,
                "depends_on": [str(self.upstream.id)],
            },
        )


@pytest.fixture
def crowd(transactional_db: Any) -> Crowd:
    return Crowd()


def test_edit_keeps_the_upstream_and_adds_one_found_by_keyboard_search(
    new_page: Any, crowd: Crowd
) -> None:
    page = new_page()
    login(page, "alice", PW)
    page.goto(f"/schedules/{crowd.child.id}/edit")
    deps = page.get_by_label("Runs after (upstream schedules)")
    assert deps.input_value() == "zz-export"
    search = page.get_by_label("Find a schedule to add")
    search.press_sequentially("aaa-0507", delay=30)
    results = page.locator("#id_depends_on-results button.pick")
    expect(results).to_have_count(1)
    # Keyboard only: down to the match, Enter picks it.
    search.press("ArrowDown")
    assert page.evaluate("document.activeElement.dataset.pickValue") == "aaa-0507"
    page.keyboard.press("Enter")
    assert deps.input_value() == "zz-export\naaa-0507"
    assert page.evaluate("document.activeElement.id") == "dep-search"
    # Enter in the search box adds the first match and does not submit the form.
    search.press_sequentially("aaa-050", delay=30)
    expect(results).to_have_count(10)
    search.press("Enter")
    assert deps.input_value() == "zz-export\naaa-0507\naaa-0500"
    assert "/edit" in page.url
    shot(page, "20-schedule-form-upstream-picker")
    page.get_by_role("button", name="Save changes").click()
    page.get_by_role("heading", name="zz-report").wait_for()
    names = set(crowd.child.depends_on.values_list("name", flat=True))
    assert names == {"zz-export", "aaa-0507", "aaa-0500"}


def test_without_javascript_the_upstreams_are_a_text_field_and_nothing_is_dropped(
    new_page: Any, crowd: Crowd
) -> None:
    page = new_page(java_script_enabled=False)
    login(page, "alice", PW)
    page.goto(f"/schedules/{crowd.child.id}/edit")
    assert not page.get_by_label("Find a schedule to add").is_visible()
    deps = page.get_by_label("Runs after (upstream schedules)")
    assert deps.input_value() == "zz-export"
    page.get_by_label("Jitter (s)").fill("7")
    page.get_by_role("button", name="Save changes").click()
    page.get_by_role("heading", name="zz-report").wait_for()
    crowd.child.refresh_from_db()
    assert crowd.child.jitter_s == 7
    assert list(crowd.child.depends_on.values_list("id", flat=True)) == [crowd.upstream.id]
    # A name that matches nothing is an inline error, and nothing is saved.
    page.goto(f"/schedules/{crowd.child.id}/edit")
    page.get_by_label("Runs after (upstream schedules)").fill("zz-export\nnot-a-schedule")
    page.get_by_role("button", name="Save changes").click()
    page.get_by_text("depends_on: no schedule with the name or id 'not-a-schedule'").wait_for()
    assert list(crowd.child.depends_on.values_list("id", flat=True)) == [crowd.upstream.id]


def test_the_explainer_finds_a_schedule_past_the_first_500_by_search(
    new_page: Any, crowd: Crowd
) -> None:
    page = new_page()
    login(page, "alice", PW)
    page.goto("/explain")
    field = page.get_by_label("Schedule", exact=True)
    field.press_sequentially("aaa-0509", delay=30)
    expect(page.locator("#ex-schedule-results button.pick")).to_have_count(1)
    field.press("ArrowDown")
    page.keyboard.press("Enter")
    assert field.input_value() == "aaa-0509"
    page.locator("#ex-at").fill("2026-01-05T00:00")
    page.get_by_role("button", name="Explain").click()
    page.locator("#answer-code").wait_for()
    assert page.get_by_label("Schedule", exact=True).input_value() == "aaa-0509"
    shot(page, "21-explainer-picker")
