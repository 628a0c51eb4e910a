"""The calendar page's month grid in Chromium: at 1440 and 390 px wide the page is
no wider than the window (seven compact columns fit a phone), and an excluded day is
drawn struck through and says why (the CSP forbids inline styles: none are used)."""

from __future__ import annotations

from typing import Any

import pytest

from dispatch.services import calendars as calendar_writes
from tenants import services as tenant_services
from tenants.roles import Role
from tests.browser.conftest import login, shot
from tests.support.console_support import principal_of, user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PW = "browser-pw-grid-26"


@pytest.fixture
def calendar_id(transactional_db: Any) -> str:
    tenant = tenant_services.tenant_create(slug="billing", name="Billing")
    member = user("olga", password=PW)
    tenant_services.membership_set(tenant=tenant, user=member, role=Role.OPERATOR, actor=None)
    calendar = calendar_writes.calendar_create(
        actor=principal_of(member, tenant, Role.OPERATOR),
        data={
            "name": "office",
            "sources": [
                {"type": "dates", "dates": ["2027-01-01"], "name": "New Year's Day"},
                {"type": "preset", "preset": "weekends"},
            ],
        },
    )
    return str(calendar.id)


@pytest.mark.parametrize("width", [1440, 390])
def test_month_grid_fits_the_window_and_says_why(
    new_page: Any, calendar_id: str, width: int
) -> None:
    page = new_page(viewport={"width": width, "height": 900})
    login(page, "olga", PW)
    page.goto(f"/calendars/{calendar_id}/?month=2027-01")
    grid = page.locator("#cal-month-2027-01")
    grid.wait_for()
    assert page.locator("table.cal-month").count() == 3
    assert int(page.evaluate("document.documentElement.scrollWidth")) <= width
    # The grid itself is not cut off or scrolled inside a box either.
    box = grid.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width
    new_year = grid.locator('td[data-date="2027-01-01"]')
    assert new_year.get_attribute("data-excluded") == "true"
    assert new_year.get_attribute("title") == "Excluded: New Year's Day"
    assert "excluded: New Year's Day" in (new_year.text_content() or "")  # sr-only
    line = new_year.locator("s").evaluate("e => getComputedStyle(e).textDecorationLine")
    assert "line-through" in line
    assert grid.locator('td[data-date="2027-01-05"]').get_attribute("data-excluded") == "false"
    page.locator("#cal-grid-h").scroll_into_view_if_needed()
    shot(page, f"calendar-month-grid-{width}")
