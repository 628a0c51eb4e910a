"""Invitations in Chromium (issue 35, defect 20): an admin invites someone on the
members page and copies the link, shown once; the invitee opens it in their own
browser, creates an account and lands in the tenant with the role; the link then
says it has been used. CSP-clean throughout (new_page fails on a violation)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest

from tenants import services as tenant_services
from tenants.models import Invitation, Membership, Tenant
from tenants.roles import Role
from tests.browser.conftest import login, shot
from tests.support.console_support import user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PW = "browser-pw-Секрет-2"
NEW_PW = "quiet-Harbour-lamp-93"


@pytest.fixture
def tenant(transactional_db: Any) -> Tenant:
    tenant = tenant_services.tenant_create(slug="billing", name="Billing")
    alice = user("alice", password=PW)
    tenant_services.membership_set(tenant=tenant, user=alice, role=Role.ADMIN, actor=None)
    return tenant


def test_an_invitee_joins_through_the_link_shown_once(new_page: Any, tenant: Tenant) -> None:
    admin = new_page()
    login(admin, "alice", PW)
    admin.goto("/members/")
    admin.get_by_label("Email or username").fill("nina@example.com")
    admin.locator("#id_invite-role").select_option("operator")
    admin.get_by_role("button", name="Invite").click()
    admin.wait_for_url("**/members/")
    link = admin.locator("#invite-link").inner_text()
    shot(admin, "invite-link-shown-once")
    path = urlsplit(link).path
    assert path.startswith("/invite/")
    admin.reload()
    assert admin.locator("#invite-link").count() == 0, "shown once"
    assert admin.locator(f"#invitation-{Invitation.objects.get().pk}").is_visible()

    invitee = new_page()
    opened = invitee.goto(path)
    assert opened is not None and opened.status == 200
    invitee.get_by_label("Username").fill("nina")
    invitee.get_by_label("Password:", exact=True).fill(NEW_PW)
    invitee.get_by_label("Password confirmation").fill(NEW_PW)
    shot(invitee, "invite-accept-form")
    invitee.get_by_role("button", name="Create account and join").click()
    invitee.wait_for_url("**/")
    assert "billing" in invitee.locator("header .who").inner_text()
    assert "(operator)" in invitee.locator("header .who").inner_text()
    assert Membership.objects.get(user__username="nina", tenant=tenant).role == "operator"

    again = new_page()
    used = again.goto(path)
    assert used is not None and used.status == 410
    assert "already been used" in again.locator("#invite-gone").inner_text()
    shot(again, "invite-used")
    # The admin's list no longer shows it as open.
    admin.reload()
    assert admin.locator("#invite-link").count() == 0
    assert "No open invitations:" in admin.content()
