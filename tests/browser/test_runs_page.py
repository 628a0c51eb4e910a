"""The runs page in a real browser: pick a schedule by searching (among more
than a dropdown could list), filter by state, page on with the keyset link
(every run once), search the error text, and a bad value in the URL is an
inline error on the page."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dispatch import services
from dispatch.models import Execution, Schedule
from tenants import services as tenant_services
from tenants.roles import Role
from tests.browser.conftest import login, shot
from tests.support.console_support import TARGET, bulk_schedules, principal_of, user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
expect = pytest.importorskip("playwright.sync_api").expect
PW = "browser-pw-runs-1"
BASE = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
DEAD = 60


def runs(schedule: Schedule, n: int, *, state: str, start: int = 0, error: str = "") -> None:
    Execution.objects.bulk_create(
        Execution(
            schedule=schedule,
            tenant=schedule.tenant,
            partition=schedule.partition,
            scheduled_for=BASE - timedelta(minutes=start + i),
            due_at=BASE - timedelta(minutes=start + i),
            state=state,
            error=error,
        )
        for i in range(n)
    )


@pytest.fixture
def history(transactional_db: Any) -> dict[str, Any]:
    tenant = tenant_services.tenant_create(slug="billing", name="Billing")
    alice = user("alice", password=PW)
    tenant_services.membership_set(tenant=tenant, user=alice, role=Role.VIEWER, actor=None)
    admin = principal_of(alice, tenant, Role.ADMIN)
    bulk_schedules(tenant, 510, prefix="aaa")
    export = services.schedule_create(
        actor=admin, data={"name": "zz-export", "cron": "0 0 * * *", "target": TARGET}
    )
    report = services.schedule_create(
        actor=admin, data={"name": "zz-report", "cron": "0 1 * * *", "target": TARGET}
    )
    runs(export, DEAD, state="dead", error="HTTP 503 Service Unavailable")
    runs(export, 30, state="succeeded", start=DEAD)
    runs(report, 20, state="dead", error="connection refused")
    Execution.objects.filter(schedule=export, scheduled_for=BASE - timedelta(minutes=7)).update(
        error="disk quota exceeded on /var/lib/batch"
    )
    return {"export": export, "report": report}


def row_ids(page: Any) -> list[str]:
    return [
        str(x)
        for x in page.locator("#runs-table tr[data-execution-id]").evaluate_all(
            "rows => rows.map(r => r.dataset.executionId)"
        )
    ]


def test_filter_by_picked_schedule_and_state_then_page_on(
    new_page: Any, history: dict[str, Any]
) -> None:
    page = new_page()
    login(page, "alice", PW)
    page.get_by_role("link", name="Runs", exact=True).click()
    page.wait_for_url("**/runs/")
    expect(page.locator("#runs-total")).to_contain_text("Matching runs: 110")

    search = page.get_by_label("Schedule")
    search.press_sequentially("zz-exp", delay=30)
    results = page.locator("#f-schedule-results button.pick")
    expect(results).to_have_count(1)
    # The picker's own request leaves the address bar alone: it is the filter's to set.
    assert page.url.endswith("/runs/"), page.url
    search.press("ArrowDown")
    page.keyboard.press("Enter")
    assert search.input_value() == "zz-export"
    page.get_by_label("State").select_option("dead")
    page.get_by_role("button", name="Filter").click()
    # htmx replaced the table and put the filter in the address bar.
    page.wait_for_url(re.compile(r".*state=dead.*schedule=zz-export.*"))
    expect(page.locator("#runs-total")).to_contain_text(f"Matching runs: {DEAD}")
    first = row_ids(page)
    assert len(first) == 50
    shot(page, "30-runs-filtered")

    page.locator("#runs-next").click()
    page.wait_for_url(re.compile(r".*cursor=.*"))
    second = row_ids(page)
    assert len(second) == DEAD - 50 and not set(first) & set(second)
    expect(page.locator("#runs-next")).to_have_count(0)
    # The filter survived the page change: the form shows it, the rows are its rows.
    assert page.get_by_label("Schedule").input_value() == "zz-export"
    assert page.get_by_label("State").input_value() == "dead"
    dead = Execution.objects.filter(schedule=history["export"], state="dead")
    assert set(first + second) == {str(pk) for pk in dead.values_list("id", flat=True)}

    # Error text, any case: the one run with it.
    page.get_by_label("Error text").fill("DISK QUOTA")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("#runs-table tr[data-execution-id]")).to_have_count(1)
    expect(page.locator("#runs-table")).to_contain_text("disk quota exceeded")
    # Its "why?" link opens the explainer for that schedule and time.
    page.locator("#runs-table").get_by_role("link", name="why?").click()
    page.wait_for_url("**/explain?**")
    expect(page.locator("#answer")).to_be_visible()


def test_a_bad_filter_in_the_url_is_an_inline_error(new_page: Any, history: dict[str, Any]) -> None:
    page = new_page()
    login(page, "alice", PW)
    response = page.goto("/runs/?state=dead,bogus&schedule=zz-report")
    assert response is not None and response.status == 400
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("state: unknown state 'bogus'")
    expect(page.locator("#runs-table tr[data-execution-id]")).to_have_count(0)
    # Fixing it in the form shows the rows.
    page.get_by_label("State").select_option("dead")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("#runs-table tr[data-execution-id]")).to_have_count(20)
    expect(page.get_by_role("alert")).to_have_count(0)
    # A schedule that is not one of the tenant's, typed into the form (htmx): the
    # error replaces the table in place.
    page.get_by_label("Schedule").fill("no-such-schedule")
    page.get_by_role("button", name="Filter").click()
    expect(page.get_by_role("alert")).to_contain_text("schedule: no schedule 'no-such-schedule'")
    expect(page.locator("#runs-table tr[data-execution-id]")).to_have_count(0)
