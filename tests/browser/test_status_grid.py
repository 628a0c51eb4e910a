"""The status grid in a real browser: a schedule with a dead run shows that run as a
failed cell (symbol and label, not only a colour) on the schedule page and on the
dashboard's health block, and clicking the cell opens that execution's page."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest

from dispatch import services
from tenants import services as tenant_services
from tenants.roles import Role
from tests.browser.conftest import login, shot
from tests.support.console_support import TARGET, principal_of, user
from tests.support.rows import execution_row

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
expect = pytest.importorskip("playwright.sync_api").expect
PW = "browser-pw-grid-1"


@pytest.fixture
def failing(transactional_db: Any) -> dict[str, Any]:
    tenant = tenant_services.tenant_create(slug="billing", name="Billing")
    vera = user("vera", password=PW)
    tenant_services.membership_set(tenant=tenant, user=vera, role=Role.VIEWER, actor=None)
    admin = principal_of(vera, tenant, Role.ADMIN)
    s = services.schedule_create(
        actor=admin, data={"name": "nightly-export", "cron": "0 * * * *", "target": TARGET}
    )
    now = services.db_now()
    execution_row(s, now - timedelta(hours=3), state="succeeded")
    execution_row(s, now - timedelta(hours=2), state="skipped", reason="paused by ops-lead")
    dead = execution_row(
        s, now - timedelta(hours=1), state="dead", status_code=500, error="HTTP 500 from billing"
    )
    return {"schedule": s, "dead": dead}


def test_the_grid_shows_a_dead_run_and_links_to_it(new_page: Any, failing: dict[str, Any]) -> None:
    page = new_page()
    login(page, "vera", PW)
    dead = failing["dead"]

    # The dashboard's health block (loaded after the page) lists it as failing now.
    page.goto("/")
    board = page.locator("#health-board")
    expect(board.locator(f"#failing-{failing['schedule'].id}").locator("xpath=..")).to_contain_text(
        "1 consecutive failure"
    )
    expect(board.locator(f"#cell-{dead.id}")).to_have_attribute("data-outcome", "failed")

    page.goto(f"/schedules/{failing['schedule'].id}/")
    cell = page.locator(f"#cell-{dead.id}")
    expect(cell).to_be_visible()
    expect(cell).to_have_text("✗")
    expect(cell).to_have_attribute("aria-label", re.compile(r": failed \(HTTP 500\)$"))
    skipped = page.locator('.sg-cell[data-outcome="skipped"]').first
    expect(skipped).to_have_attribute("title", re.compile(r"skipped \(paused by ops-lead\)"))
    expect(page.locator('.sg-cell[data-outcome="upcoming"]')).to_have_count(6)
    shot(page, "status-grid")

    cell.click()
    page.wait_for_url(f"**/executions/{dead.id}/")
    expect(page.locator("body")).to_contain_text("HTTP 500 from billing")
