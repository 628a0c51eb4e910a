"""The console in Chromium: a token's secret is shown once and a reload makes no
second token; revoking a token and removing a member ask first (without
JavaScript, CSRF on every form); the dashboard's and the execution page's
polling keep keyboard focus and scroll where the user left them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from dispatch import services
from dispatch.models import Execution, ExecutionState
from tenants import services as tenant_services
from tenants.models import Membership, ServiceToken, Tenant
from tenants.roles import Role
from tests.browser.conftest import login, shot
from tests.support.console_support import TARGET, principal_of, user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PW = "browser-pw-Секрет-2"

# Counts htmx swaps of one region, so a test can wait for "two refreshes later".
COUNT_SWAPS = """(id) => {
  window.__swaps = 0;
  document.body.addEventListener('htmx:afterSettle', (e) => {
    if (e.detail.elt && e.detail.elt.id === id) { window.__swaps += 1; }
  });
}"""


@pytest.fixture
def team(transactional_db: Any) -> dict[str, Any]:
    tenant = Tenant.objects.get(pk=tenant_services.tenant_create(slug="billing", name="B").pk)
    alice = user("alice", password=PW)
    vera = user("vera", password=PW)
    tenant_services.membership_set(tenant=tenant, user=alice, role=Role.ADMIN, actor=None)
    tenant_services.membership_set(tenant=tenant, user=vera, role=Role.VIEWER, actor=None)
    return {"tenant": tenant, "alice": alice, "vera": vera}


def _posts_carry_csrf(page: Any) -> bool:
    return bool(
        page.evaluate(
            """() => [...document.querySelectorAll('form[method=post]')].every(
                 f => f.querySelector('input[name=csrfmiddlewaretoken]'))"""
        )
    )


def test_new_token_secret_shows_once_and_a_reload_makes_no_second_token(
    new_page: Any, team: dict[str, Any]
) -> None:
    page = new_page()
    page.on("dialog", lambda d: d.accept())  # "resubmit the form?" would mean a second token
    login(page, "alice", PW)
    page.goto("/tokens/")
    page.get_by_label("Name").fill("deploy-bot")
    page.get_by_role("button", name="Create token").click()
    secret = page.locator("#token-secret").inner_text()
    assert secret.startswith("sched_")
    assert page.url.endswith("/tokens/")
    page.reload()
    page.get_by_role("heading", name="API tokens of billing").wait_for()
    assert ServiceToken.objects.filter(tenant=team["tenant"], name="deploy-bot").count() == 1
    assert secret not in page.content(), "the secret is shown exactly once"
    assert page.locator("#token-secret").count() == 0

    # Revoke asks first; Cancel changes nothing; Revoke on the confirmation page does it.
    page.get_by_role("link", name="Revoke deploy-bot…").click()
    page.get_by_role("heading", name="Revoke token deploy-bot?").wait_for()
    assert _posts_carry_csrf(page)
    page.get_by_role("link", name="Cancel").click()
    assert ServiceToken.objects.get(name="deploy-bot").revoked_at is None
    page.get_by_role("link", name="Revoke deploy-bot…").click()
    page.get_by_role("button", name="Revoke").click()
    page.locator("tr", has_text="deploy-bot").get_by_text("revoked").wait_for()
    assert ServiceToken.objects.get(name="deploy-bot").revoked_at is not None

    # Removing a member asks first too.
    page.goto("/members/")
    assert _posts_carry_csrf(page)
    page.get_by_role("link", name="Remove vera…").click()
    page.get_by_role("heading", name="Remove vera from billing?").wait_for()
    assert _posts_carry_csrf(page)
    assert Membership.objects.filter(user=team["vera"], tenant=team["tenant"]).exists()
    page.get_by_role("button", name="Remove").click()
    page.wait_for_url("**/members/")
    assert not Membership.objects.filter(user=team["vera"], tenant=team["tenant"]).exists()
    shot(page, "12-member-removed")


def test_dashboard_refresh_keeps_focus_and_scroll(new_page: Any, team: dict[str, Any]) -> None:
    actor = principal_of(team["alice"], team["tenant"], Role.ADMIN)
    # Twelve failures of the last hours: the live region (refreshed every 5 s) lists
    # them first, each with a link to its execution.
    now = services.db_now()
    for i in range(12):
        s = services.schedule_create(
            actor=actor, data={"name": f"every-5-{i:02d}", "cron": "*/5 * * * *", "target": TARGET}
        )
        at = now - timedelta(hours=1, minutes=i)
        Execution.objects.create(
            schedule=s, tenant=team["tenant"], scheduled_for=at, due_at=at, state="dead"
        )
    page = new_page(viewport={"width": 1000, "height": 500})
    login(page, "alice", PW)
    page.evaluate(COUNT_SWAPS, "live")
    link = page.locator("#live a[href^='/executions/']").nth(5)
    link.focus()
    page.evaluate("() => window.scrollTo(0, 300)")
    focused = "() => [document.activeElement.tagName, document.activeElement.href || '']"
    before = page.evaluate(focused)
    assert before[0] == "A", before
    page.wait_for_function("() => window.__swaps >= 2", timeout=20_000)
    after = page.evaluate(focused)
    assert after == before, f"focus moved to {after}"
    assert page.evaluate("() => document.activeElement.closest('#live') !== null")
    assert page.evaluate("() => window.scrollY") == 300


def test_execution_poll_keeps_focus_and_the_log_scroll(new_page: Any, team: dict[str, Any]) -> None:
    actor = principal_of(team["alice"], team["tenant"], Role.ADMIN)
    schedule = services.schedule_create(
        actor=actor, data={"name": "flaky", "cron": "0 0 * * *", "target": TARGET}
    )
    execution = services.schedule_trigger(actor=actor, schedule_id=schedule.id)
    # The first attempt failed with output; the retry is a minute away, so the
    # page keeps polling while the user reads the log.
    Execution.objects.filter(pk=execution.pk).update(
        state=ExecutionState.RETRY_SCHEDULED,
        error="HTTP 503",
        log_excerpt="".join(f"line {n}: upstream said no\n" for n in range(300)),
        next_attempt_at=services.db_now() + timedelta(minutes=1),
    )
    page = new_page()
    login(page, "alice", PW)
    page.goto(f"/executions/{execution.id}/")
    page.evaluate(COUNT_SWAPS, "execution-live")
    # A keyboard user tabs to the log (a scrollable region) and scrolls it.
    log = page.locator("#execution-live pre.log")
    log.evaluate("el => { el.focus(); el.scrollTop = 400; }")
    reading = "() => document.activeElement.matches('#execution-live pre.log')"
    assert page.evaluate(reading), "the log can take keyboard focus"
    page.wait_for_function("() => window.__swaps >= 2", timeout=20_000)
    assert page.evaluate(reading), "focus stayed on the log"
    assert page.evaluate("() => document.querySelector('#execution-live pre.log').scrollTop") == 400
