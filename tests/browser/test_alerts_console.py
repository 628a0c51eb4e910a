"""Alerts in Chromium (issue 18): an admin configures a webhook channel pointing at
the loopback ledger and sends a test — the result shows inline and the ledger holds
the signed request; an operator gives a schedule its own policy and sees it saved."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

import pytest

from dispatch import services
from dispatch.models import AlertChannel, AlertPolicy
from tenants import services as tenant_services
from tenants.models import Tenant
from tenants.roles import Role
from tests.browser.conftest import login, shot
from tests.support.console_support import TARGET, principal_of, user
from tests.support.ledger import Ledger

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PW = "browser-pw-Секрет-18"


@pytest.fixture
def tenant(transactional_db: Any) -> Tenant:
    tenant = tenant_services.tenant_create(slug="billing", name="Billing")
    for name, role in (("alice", Role.ADMIN), ("olga", Role.OPERATOR)):
        member = user(name, password=PW)
        tenant_services.membership_set(tenant=tenant, user=member, role=role, actor=None)
    return tenant


def test_configure_a_webhook_channel_and_send_a_test(
    new_page: Any, tenant: Tenant, ledger: Ledger, settings: Any
) -> None:
    settings.TARGET_TEST_ALLOW = [ledger.allow_entry]  # the loopback receiver is allowed
    page = new_page()
    login(page, "alice", PW)
    page.get_by_role("link", name="Alerts", exact=True).click()
    page.get_by_text("Add a channel…").click()
    form = page.locator("#channel-form")
    form.get_by_label("Name", exact=True).fill("ops-hook")
    form.get_by_label("Kind").select_option("webhook")
    form.get_by_label("URL (slack, webhook)").fill(f"{ledger.url}/alerts")
    form.get_by_role("button", name="Create channel").click()
    page.get_by_role("status").get_by_text("Channel ops-hook created").wait_for()
    channel = AlertChannel.objects.get(tenant=tenant, name="ops-hook")

    page.get_by_role("button", name="Send a test over ops-hook").click()
    result = page.locator(f"#test-result-{channel.id}")
    result.get_by_text("Test sent: HTTP 200").wait_for()
    # Swapped in by htmx (its CSRF header from <body hx-headers>): the page did not navigate.
    assert page.url.endswith("/alerts/"), page.url
    shot(page, "alerts-test-sent")

    assert len(ledger.requests) == 1
    request = ledger.requests[0]
    headers = {k.lower(): v for k, v in request["headers"].items()}
    signed = f"{headers['x-signature-timestamp']}.{headers['x-alert-id']}.".encode()
    tenant.refresh_from_db()
    mac = hmac.new(
        tenant.signing_key.encode(), signed + request["body"].encode(), hashlib.sha256
    ).hexdigest()
    assert hmac.compare_digest(headers["x-signature"], f"sha256={mac}")
    event = json.loads(request["body"])
    assert event["event"] == "alert.test" and event["alert_id"] == headers["x-alert-id"]


def test_a_bad_channel_url_is_shown_next_to_the_field(new_page: Any, tenant: Tenant) -> None:
    page = new_page()
    login(page, "alice", PW)
    page.goto("/alerts/")
    page.get_by_text("Add a channel…").click()
    form = page.locator("#channel-form")
    form.get_by_label("Name", exact=True).fill("bad-hook")
    form.get_by_label("Kind").select_option("webhook")
    form.get_by_label("URL (slack, webhook)").fill("ftp://example.com/x")
    form.get_by_role("button", name="Create channel").click()
    page.locator("#channel-url-error").wait_for()
    assert page.locator("#channel-url").get_attribute("aria-invalid") == "true"
    assert not AlertChannel.objects.filter(tenant=tenant).exists()


def test_set_a_schedules_policy_override(new_page: Any, tenant: Tenant) -> None:
    admin_p = principal_of(user("alice", password=PW), tenant, Role.ADMIN)
    schedule = services.schedule_create(
        actor=admin_p, data={"name": "nightly", "cron": "0 0 * * *", "target": TARGET}
    )
    page = new_page()
    login(page, "olga", PW)
    page.goto(f"/schedules/{schedule.id}/")
    alerts = page.locator("#alerts")
    alerts.locator("#alert-policy-source").get_by_text("the built-in default").wait_for()
    alerts.get_by_text("Give this schedule its own alert policy…").click()
    form = alerts.locator("#schedule-policy-form")
    form.get_by_label("Alert after this many consecutive failures").fill("4")
    form.get_by_label("Auto-pause after this many consecutive failures (0 = never)").fill("9")
    form.get_by_role("button", name="Save this schedule's policy").click()
    page.get_by_role("status").get_by_text("Alert policy saved").wait_for()
    page.locator("#alert-policy-source").get_by_text("this schedule's own").wait_for()
    page.get_by_text("Edit this schedule's alert policy…").click()
    assert page.locator("#schedule-policy-failure_threshold").input_value() == "4"
    shot(page, "alerts-schedule-policy")
    own = AlertPolicy.objects.get(tenant=tenant, schedule=schedule)
    assert (own.failure_threshold, own.auto_pause_after) == (4, 9)
