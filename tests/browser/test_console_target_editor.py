"""The schedule form's target editor in a real browser: choosing a target type shows
that type's fields only (CSS :has, so also without JavaScript), and an HTTP schedule
is created through the fields alone — method, URL, a plain header, a secret
reference, a JSON body — with the JSON view left closed."""

from __future__ import annotations

import re
from typing import Any

import pytest

from dispatch.models import Schedule
from tenants import services as tenant_services
from tenants.roles import Role
from tests.browser.conftest import login, shot
from tests.support.console_support import principal_of, user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PW = "browser-pw-target-1"


@pytest.fixture
def alice(transactional_db: Any) -> Any:
    tenant = tenant_services.tenant_create(slug="billing", name="Billing")
    u = user("alice", password=PW)
    tenant_services.membership_set(tenant=tenant, user=u, role=Role.OPERATOR, actor=None)
    return principal_of(u, tenant, Role.OPERATOR)


def field(page: Any, label: str) -> Any:
    """The control labelled exactly `label` (Django's labels end in a colon)."""
    return page.get_by_label(re.compile(rf"^{re.escape(label)}:?$"))


@pytest.mark.parametrize("js", [True, False])
def test_the_type_shows_its_fields_and_an_http_schedule_is_made_from_them(
    new_page: Any, alice: Any, js: bool
) -> None:
    page = new_page(java_script_enabled=js)
    login(page, "alice", PW)
    page.goto("/schedules/new")
    url, routing, command = (
        field(page, "URL"),
        field(page, "Routing key"),
        field(page, "Command"),
    )
    body = field(page, "Body")
    json_box = page.get_by_label("Target (JSON)")
    # http is proposed; the JSON view is closed.
    assert url.is_visible() and body.is_visible()
    assert not routing.is_visible() and not command.is_visible() and not json_box.is_visible()
    kind = field(page, "Type")
    kind.select_option("queue")
    assert routing.is_visible() and body.is_visible()
    assert not url.is_visible() and not command.is_visible()
    kind.select_option("command")
    assert command.is_visible() and page.get_by_label("Environment").is_visible()
    assert not url.is_visible() and not routing.is_visible() and not body.is_visible()
    kind.select_option("http")
    assert url.is_visible() and not routing.is_visible()

    page.get_by_label("Name").fill(f"hook-call-{js}")
    page.get_by_label("Cron").press_sequentially("0 9 * * *", delay=20)
    field(page, "Method").select_option("PUT")
    url.fill("https://billing.internal/hook")
    field(page, "Header 1").fill("X-Tenant")
    field(page, "Header 1 value").fill("acme")
    field(page, "Header 2").fill("Authorization")
    field(page, "Header 2 value is").select_option("secret")
    field(page, "Header 2 value").fill("vault:kv/billing/hook#token")
    body.fill('{"customer": 7}')
    if js:
        # The live preview reads the structured fields too.
        body.press("Tab")  # leaving the field sends it (change), the latest answer shows
        page.locator("#preview").get_by_text("At 09:00 AM").wait_for()
        assert "Not valid yet" not in page.locator("#preview").inner_text()
    shot(page, f"target-editor-http-{'js' if js else 'nojs'}")
    page.get_by_role("button", name="Create schedule").click()
    page.get_by_role("heading", name=re.compile(f"hook-call-{js}")).wait_for()
    assert Schedule.objects.get(name=f"hook-call-{js}").target == {
        "type": "http",
        "url": "https://billing.internal/hook",
        "method": "PUT",
        "headers": {
            "X-Tenant": "acme",
            "Authorization": {"secret": "vault:kv/billing/hook#token"},
        },
        "body": {"customer": 7},
        "timeout_s": 300,
    }
