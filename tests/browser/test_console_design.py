"""The console's design in a real browser (issue 35): every page of the sidebar, plus a
schedule, an execution and the new-schedule form, at desktop (1440 px) and phone (390 px)
widths, in the light and the dark theme: no page wider than the viewport, exactly one
menu item marked as the current page (the right one), and a screenshot of each saved in
test-artifacts/screenshots/ (design-<page>-<width>-<theme>.png). The theme follows the
system's choice until a toggle pins one, and the pin survives a reload."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from playwright.sync_api import expect

from console import nav
from dispatch import services
from dispatch.models import Execution
from tenants import services as tenant_services
from tenants.roles import Role
from tests.browser.conftest import login, shot
from tests.support.console_support import TARGET, principal_of, user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PW = "browser-pw-design-1"
WIDTHS = (1440, 390)
# The page background's relative luminance: under this it is a dark theme.
DARK = 0.1

WIDEST = """() => { const out = []; for (const el of document.querySelectorAll('body *')) { const r = el.getBoundingClientRect(); if (r.right > window.innerWidth + 1 && !el.closest('.side') && !(el.closest('table') && el.tagName !== 'TABLE')) out.push([el.tagName + '.' + el.className + '#' + el.id, Math.round(r.right)]); } return out.slice(0, 12); }"""
LUMINANCE = """() => {
  const m = getComputedStyle(document.documentElement).backgroundColor.match(/\\d+(\\.\\d+)?/g).map(Number);
  const c = m.slice(0, 3).map(v => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
  return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2];
}"""


@pytest.fixture
def world(transactional_db: Any) -> dict[str, Any]:
    tenant = tenant_services.tenant_create(slug="billing", name="Billing")
    u = user("dora", password=PW, staff=True)
    tenant_services.membership_set(tenant=tenant, user=u, role=Role.ADMIN, actor=None)
    p = principal_of(u, tenant, Role.ADMIN)
    s = services.schedule_create(
        actor=p,
        data={
            "name": "nightly-invoices",
            "cron": "0 2 * * *",
            "timezone": "Europe/Amsterdam",
            "target": TARGET,
        },
    )
    services.schedule_create(
        actor=p, data={"name": "every-minute-sync", "cron": "* * * * *", "target": TARGET}
    )
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    last = None
    # A day of history for the charts: successes each hour, a failure every fifth.
    for h in range(1, 24):
        at = now - timedelta(hours=h)
        failed = h % 5 == 0
        last = Execution.objects.create(
            schedule=s,
            tenant=tenant,
            scheduled_for=at,
            due_at=at,
            state="dead" if failed else "succeeded",
            started_at=at + timedelta(milliseconds=150 + 40 * h),
            finished_at=at + timedelta(milliseconds=900 + 120 * h),
            error="HTTP 500 from billing" if failed else "",
        )
    return {"schedule": s, "execution": last}


def pages(world: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(name, path, the menu label that must be current) for each page to draw."""
    out = []
    for group in nav.NAV:
        for item in group.items:
            path = nav.reverse(item.url_name)
            out.append((item.icon, path, item.label))
    s, e = world["schedule"], world["execution"]
    out += [
        ("schedule", f"/schedules/{s.id}/", "Schedules"),
        ("schedule-new", "/schedules/new", "Schedules"),
        ("execution", f"/executions/{e.id}/", "Runs"),
    ]
    return out


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_every_page_fits_marks_its_menu_item_and_is_drawn(
    new_page: Any, world: dict[str, Any], theme: str
) -> None:
    for width in WIDTHS:
        page = new_page(viewport={"width": width, "height": 900}, color_scheme=theme)
        login(page, "dora", PW)
        for name, path, label in pages(world):
            page.goto(path)
            page.wait_for_load_state("networkidle")
            wide = page.evaluate("document.documentElement.scrollWidth")
            assert wide <= width, (f"{path} is {wide} px wide at {width} px", page.evaluate(WIDEST))
            current = page.locator('nav[aria-label="Main"] a[aria-current="page"]')
            expect(current).to_have_count(1)
            expect(current).to_have_text(label)
            dark = page.evaluate(LUMINANCE) < DARK
            assert dark == (theme == "dark"), (path, theme)
            shot(page, f"design-{name}-{width}-{theme}")


def test_the_theme_toggle_pins_a_theme_over_the_systems(
    new_page: Any, world: dict[str, Any]
) -> None:
    page = new_page(color_scheme="dark")
    login(page, "dora", PW)
    assert page.evaluate(LUMINANCE) < DARK
    page.get_by_role("button", name="Light theme").click()
    page.wait_for_load_state()
    expect(page.locator("html")).to_have_attribute("data-theme", "light")
    assert page.evaluate(LUMINANCE) > 0.5
    expect(page.get_by_role("button", name="Light theme")).to_have_attribute("aria-pressed", "true")
    page.reload()
    assert page.evaluate(LUMINANCE) > 0.5, "the pinned theme survives a reload"
    page.get_by_role("button", name="System theme").click()
    page.wait_for_load_state()
    expect(page.locator("html")).to_have_attribute("data-theme", "auto")
    assert page.evaluate(LUMINANCE) < DARK


def test_the_dashboard_and_a_schedule_draw_the_days_runs_as_charts(
    new_page: Any, world: dict[str, Any]
) -> None:
    page = new_page(viewport={"width": 1440, "height": 900})
    login(page, "dora", PW)
    chart = page.locator("#tenant-activity svg.chart")
    expect(chart).to_be_visible()
    # 23 hours with a run: 19 succeeded, 4 dead (hours 5, 10, 15, 20 ago).
    expect(chart.locator("rect.bar-ok")).to_have_count(19)
    expect(chart.locator("rect.bar-bad")).to_have_count(4)
    page.locator("#tenant-activity summary").click()
    rows = page.locator("#tenant-activity details tbody tr")
    expect(rows).to_have_count(23)
    shot(page, "design-dashboard-chart")
    # The schedule's own chart: the same day, of this schedule only.
    page.goto(f"/schedules/{world['schedule'].id}/")
    mine = page.locator("#schedule-activity svg.chart")
    expect(mine.locator("rect.bar-ok")).to_have_count(19)
    expect(mine.locator("rect.bar-bad")).to_have_count(4)
