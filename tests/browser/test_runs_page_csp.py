"""The runs page's htmx interactions under the console's CSP (defect 19): filtering,
paging, the schedule picker and the bulk selection, as an operator (who has the bulk
bar). `new_page` fails the test on any Content-Security-Policy violation, so an inline
style set by anything swapped in (or by htmx around a swap) fails it: htmx's settle
step copied the `style` attribute of a replaced element onto the new one, refused
by `style-src 'self'` whenever the old one had one (static/console/console.js)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from dispatch import services
from tenants import services as tenant_services
from tenants.roles import Role
from tests.browser.conftest import login
from tests.browser.test_runs_page import DEAD, runs
from tests.support.console_support import TARGET, principal_of, user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
expect = pytest.importorskip("playwright.sync_api").expect
PW = "browser-pw-runs-csp-1"
# Besides the console messages `new_page` reads: the page's own violation events, which
# name the directive and where (a swap's settle setting a style attribute, a <style>).
WATCH = """
window.cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => window.cspViolations.push(
  `${e.violatedDirective} ${e.sourceFile}:${e.lineNumber} ${e.sample}`));
"""


@pytest.fixture
def operator_history(transactional_db: Any) -> None:
    tenant = tenant_services.tenant_create(slug="billing", name="Billing")
    bob = user("bob", password=PW)
    tenant_services.membership_set(tenant=tenant, user=bob, role=Role.OPERATOR, actor=None)
    admin = principal_of(bob, tenant, Role.ADMIN)
    export = services.schedule_create(
        actor=admin, data={"name": "zz-export", "cron": "0 0 * * *", "target": TARGET}
    )
    report = services.schedule_create(
        actor=admin, data={"name": "zz-report", "cron": "0 1 * * *", "target": TARGET}
    )
    runs(export, DEAD, state="dead", error="HTTP 503 Service Unavailable")
    runs(export, 30, state="succeeded", start=DEAD)
    runs(report, 20, state="dead", error="connection refused")


def test_runs_page_htmx_swaps_set_no_inline_style(new_page: Any, operator_history: None) -> None:
    page = new_page()
    page.add_init_script(WATCH)
    # A slower server keeps htmx's request and settling classes on long enough for a
    # second request (the picker, a repeated filter) to overlap a swap.
    page.route(
        re.compile(r".*/(runs|schedules/pick)/?\?.*"),
        lambda route: (page.wait_for_timeout(300), route.continue_()),
    )
    login(page, "bob", PW)

    def styled() -> None:
        page.evaluate(
            """() => ["runs-total", "runs-select-all", "runs-next"].forEach((id) => {
                 const el = document.getElementById(id);
                 if (el) { el.style.outline = "1px dotted gray"; }
               })"""
        )

    page.goto("/runs/")
    expect(page.locator("#runs-total")).to_contain_text("Matching runs: 110")

    # Bulk selection before any swap: select all.
    page.locator("#runs-select-all").check()
    expect(page.locator("#runs-bulk-selected")).to_have_text("50")
    # Elements of the table given an inline style through the CSSOM, which the CSP
    # allows, as browser extensions (dark modes, password managers) and the browser
    # itself (a resized field) do. htmx's settle used to copy an old element's style
    # attribute onto its swapped-in twin with setAttribute, which the CSP refuses.
    styled()

    # The schedule picker (its own htmx request), picked with the keyboard.
    search = page.get_by_label("Schedule")
    search.press_sequentially("zz-exp", delay=30)
    expect(page.locator("#f-schedule-results button.pick")).to_have_count(1)
    search.press("ArrowDown")
    page.keyboard.press("Enter")
    assert search.input_value() == "zz-export"

    # Filtering swaps the table; the selection count follows the new table.
    page.get_by_label("State").select_option("dead")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url(re.compile(r".*state=dead.*schedule=zz-export.*"))
    expect(page.locator("#runs-total")).to_contain_text(f"Matching runs: {DEAD}")
    expect(page.locator("#runs-bulk-selected")).to_have_text("0")
    page.locator("#runs-table tr[data-execution-id] input[name=ids]").first.check()
    expect(page.locator("#runs-bulk-selected")).to_have_text("1")
    styled()

    # Paging (a link in the swapped table), then back to the newest.
    page.locator("#runs-next").click()
    page.wait_for_url(re.compile(r".*cursor=.*"))
    expect(page.locator("#runs-table tr[data-execution-id]")).to_have_count(DEAD - 50)
    page.locator("#runs-select-all").check()
    expect(page.locator("#runs-bulk-selected")).to_have_text(str(DEAD - 50))
    page.locator("#runs-first").click()
    expect(page.locator("#runs-table tr[data-execution-id]")).to_have_count(50)

    # Browser history over the swapped pages (htmx restores on back).
    page.go_back()
    expect(page.locator("#runs-table tr[data-execution-id]")).to_have_count(DEAD - 50)

    # A filter the server refuses: the error replaces the table in place; then the
    # error text search, submitted with Enter; then Clear.
    page.get_by_label("Schedule").fill("no-such-schedule")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("#runs-error")).to_contain_text("no schedule 'no-such-schedule'")
    page.get_by_label("Schedule").fill("")
    page.get_by_label("Error text").fill("refused")
    page.get_by_label("Error text").press("Enter")
    expect(page.locator("#runs-table tr[data-execution-id]")).to_have_count(20)
    page.locator("#f-clear").click()
    expect(page.locator("#runs-total")).to_contain_text("Matching runs: 110")
    # Let any settle/transition run out before the violations are read.
    page.wait_for_timeout(500)
    assert page.evaluate("window.cspViolations") == []
