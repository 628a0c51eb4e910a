"""Calendars in Chromium: an operator creates a weekends calendar, gives a new
schedule "Not on the dates of: weekends" and watches the live preview leave the
weekend runs out (listing why), saves it, and the calendar page names its user."""

from __future__ import annotations

import re
from typing import Any

import pytest

from dispatch.models import Schedule
from tenants import services as tenant_services
from tenants.models import Tenant
from tenants.roles import Role
from tests.browser.conftest import login, shot
from tests.support.console_support import user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PW = "browser-pw-Секрет-20"


@pytest.fixture
def tenant(transactional_db: Any) -> Tenant:
    tenant = tenant_services.tenant_create(slug="billing", name="Billing")
    member = user("olga", password=PW)
    tenant_services.membership_set(tenant=tenant, user=member, role=Role.OPERATOR, actor=None)
    return tenant


def test_create_a_calendar_and_preview_a_schedule_that_skips_it(
    new_page: Any, tenant: Tenant
) -> None:
    page = new_page()
    login(page, "olga", PW)
    page.get_by_role("link", name="Calendars", exact=True).click()
    form = page.locator("#calendar-form")
    form.get_by_label("Name", exact=True).fill("weekends")
    # The JSON is folded away for the other kinds; the common ones are fields.
    assert not form.get_by_label("Sources (JSON)").is_visible()
    form.get_by_label("Days of the week").select_option("weekends")
    shot(page, "calendars-new-form")
    form.get_by_role("button", name="Create calendar").click()
    page.get_by_role("heading", name="Calendar weekends").wait_for()
    assert page.get_by_role("status").inner_text() == "Calendar weekends created."
    assert "Saturday" in page.locator("#calendar-dates").inner_text()
    assert page.get_by_role("link", name="← Calendars").is_visible()

    page.get_by_role("link", name="Schedules", exact=True).click()
    page.get_by_role("link", name="New schedule").click()
    page.get_by_label("Name").fill("daily-report")
    page.get_by_label("Cron").press_sequentially("0 9 * * *", delay=30)
    preview = page.locator("#preview")
    preview.get_by_text("At 09:00 AM").wait_for()
    assert preview.locator("tr.excluded").count() == 0
    page.get_by_label("Not on the dates of (calendars)").press_sequentially("weekends", delay=30)
    preview.get_by_text("Struck through").wait_for()
    struck = preview.locator("tr.excluded").first
    assert re.search(r"excluded by calendar 'weekends': \S+ (Saturday|Sunday)", struck.inner_text())
    # Drawn struck through, not only marked up so.
    line = struck.locator("s").first.evaluate("e => getComputedStyle(e).textDecorationLine")
    assert "line-through" in line
    shot(page, "calendars-schedule-preview")
    page.get_by_role("button", name="Create schedule").click()
    page.get_by_role("heading", name=re.compile("daily-report")).wait_for()
    s = Schedule.objects.get(name="daily-report")
    assert [link.calendar.name for link in s.calendar_links.all()] == ["weekends"]

    page.get_by_role("link", name="Calendars", exact=True).click()
    page.get_by_role("link", name="weekends").click()
    page.get_by_role("link", name="daily-report").wait_for()
    page.get_by_role("button", name="Delete calendar weekends").click()
    page.get_by_role("alert").get_by_text("is used by schedules 'daily-report'").wait_for()
