"""The schedule model in Chromium: an operator types two specs (a cron and an interval)
into the schedule form and watches the live preview show their union, gets an inline
error naming the bad line, then saves the schedule with an end, a max_runs and a
concurrency key, and the detail page shows them back."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from core.db import db_now
from dispatch.models import Schedule
from tenants import services as tenant_services
from tenants.models import Tenant
from tenants.roles import Role
from tests.browser.conftest import login, shot
from tests.support.console_support import user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PW = "browser-pw-Секрет-21"
TARGET = '{"type": "http", "url": "https://billing.internal/sync", "body": {"customer_id": 42}}'


@pytest.fixture
def tenant(transactional_db: Any) -> Tenant:
    tenant = tenant_services.tenant_create(slug="billing", name="Billing")
    member = user("olga", password=PW)
    tenant_services.membership_set(tenant=tenant, user=member, role=Role.OPERATOR, actor=None)
    return tenant


def test_specs_bounds_max_runs_and_a_key_through_the_form(new_page: Any, tenant: Tenant) -> None:
    page = new_page()
    login(page, "olga", PW)
    page.get_by_role("link", name="Schedules", exact=True).click()
    page.get_by_role("link", name="New schedule").click()
    page.get_by_label("Name").fill("billing-sync")
    page.get_by_label("Timezone").fill("UTC")
    specs = page.get_by_label("Cron / specs (one per line)")
    specs.press_sequentially("0 6 * * *", delay=20)
    preview = page.locator("#preview")
    preview.get_by_text("06:00").first.wait_for()
    # A second line: an interval every 7 hours from a midnight; the union shows both.
    specs.press("End")
    specs.press_sequentially("\nevery 7h from 2026-01-01T00:00", delay=20)
    preview.get_by_text(re.compile(r"\d{2}:00:00 UTC")).first.wait_for()
    page.wait_for_function(
        "() => [...document.querySelectorAll('#preview tbody tr')].some("
        "r => !r.innerText.includes('06:00:00') && /\\d{2}:00:00/.test(r.innerText))"
    )
    shown = {
        datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
        for m in re.finditer(r"(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) UTC", preview.inner_text())
    }
    origin = datetime(2026, 1, 1, tzinfo=UTC)
    daily = {t for t in shown if (t.hour, t.minute, t.second) == (6, 0, 0)}
    interval = {t for t in shown if (t - origin).total_seconds() % (7 * 3600) == 0}
    # The union: both specs' runs, and nothing else.
    assert daily and interval - daily and shown == daily | interval, sorted(shown)
    # The target as JSON: the expert view below the structured fields.
    page.get_by_text("Edit as JSON").click()
    page.get_by_label("Target").fill(TARGET)
    page.get_by_label("At most this many runs").fill("0")
    page.get_by_role("button", name="Create schedule").click()
    page.locator("#id_max_runs_error").get_by_text("must be a whole number in 1..").wait_for()
    assert Schedule.objects.filter(name="billing-sync").count() == 0

    end = (db_now() + timedelta(days=30)).astimezone(ZoneInfo("UTC")).strftime("%Y-%m-%dT%H:%M")
    page.get_by_label("End (optional)").fill(end)
    page.get_by_label("At most this many runs").fill("500")
    page.get_by_label("Concurrency key").fill("customer-{target.body.customer_id}")
    page.get_by_label("When the key is taken").select_option("skip")
    shot(page, "schedule-model-form")
    page.get_by_role("button", name="Create schedule").click()
    page.get_by_role("heading", name=re.compile("billing-sync")).wait_for()
    saved = Schedule.objects.get(name="billing-sync")
    assert saved.max_runs == 500
    assert saved.concurrency_key is not None
    assert saved.concurrency_key["rendered"] == "customer-42"
    assert saved.concurrency_key["on_conflict"] == "skip"
    assert "every 7h from 2026-01-01T00:00:00" in saved.cron and "end_at" in saved.cron
    body = page.locator("main").inner_text()
    assert "customer-42 (from customer-{target.body.customer_id}): at most 1 at once" in body
    assert "when taken: skip" in body
    assert "at most 500 successful runs (0 so far)" in body
    assert "every 7h from 2026-01-01T00:00:00" in body and "end_at" in body
