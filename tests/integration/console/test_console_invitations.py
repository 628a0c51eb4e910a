"""Invitations (issue 35, defect 20): a tenant admin makes a one-time link on the
members page; whoever opens it joins the tenant with the role, with a new account
or the one they are signed in with. Only the link's digest is stored, the link is
shown once, it works once and until it expires; the admin sees and revokes open
ones; only admins of the tenant can do any of it, and every step is audited."""

from __future__ import annotations

import hashlib
import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.utils import timezone

from tenants.models import AuditEvent, Invitation, Membership
from tests.support.console_support import World, text, user

pytestmark = pytest.mark.django_db

GOOD_PASSWORD = "plum-orbit-Lantern-42"


def invite(client: Client, invitee: str, role: str = "operator") -> Any:
    return client.post("/members/invite", {"invite-invitee": invitee, "invite-role": role})


def make_link(world: World, invitee: str = "newcomer@example.com", role: str = "operator") -> str:
    """The link's path, as the admin's page shows it once."""
    client = world.client("admin")
    assert invite(client, invitee, role).status_code == 302
    shown = re.search(
        r'<code id="invite-link">http://testserver(/invite/[^<]+/)</code>',
        text(client.get("/members/")),
    )
    assert shown is not None
    return shown.group(1)


def test_an_invitation_stores_only_a_digest_and_shows_the_link_once(world: World) -> None:
    client = world.client("admin")
    created = invite(client, "newcomer@example.com", "operator")
    assert created.status_code == 302 and created["Location"] == "/members/"
    invitation = Invitation.objects.get(tenant=world.tenant)
    assert invitation.email == "newcomer@example.com" and invitation.username == ""
    assert invitation.role == "operator" and invitation.created_by == "user:alice"
    ttl = invitation.expires_at - timezone.now()
    assert timedelta(days=6, hours=23) < ttl <= timedelta(days=7)
    page = client.get("/members/")
    assert page["Cache-Control"] == "no-store"
    link = re.search(
        r'<code id="invite-link">http://testserver/invite/([^/<]+)/</code>', text(page)
    )
    assert link is not None, text(page)[:3000]
    secret = link.group(1)
    assert invitation.digest == hashlib.sha256(secret.encode()).hexdigest()
    # The secret is nowhere in the database: not in any row of the invitation, the
    # audit log or the session (which holds it masked by the cookie's pad).
    with connection.cursor() as cur:
        cur.execute("SELECT t::text FROM tenants_invitation t")
        rows = [r[0] for r in cur.fetchall()]
        cur.execute("SELECT t::text FROM tenants_auditevent t")
        rows += [r[0] for r in cur.fetchall()]
        cur.execute("SELECT session_data FROM django_session")
        rows += [r[0] for r in cur.fetchall()]
    assert rows and not any(secret in r for r in rows)
    # Shown once: a reload has no link and made no other invitation; it is listed as pending.
    again = text(client.get("/members/"))
    assert 'id="invite-link"' not in again and secret not in again
    assert f'id="invitation-{invitation.pk}"' in again and "newcomer@example.com" in again
    assert Invitation.objects.filter(tenant=world.tenant).count() == 1
    audit = AuditEvent.objects.get(action="member.invite")
    assert audit.actor_label == "user:alice" and audit.tenant == world.tenant
    assert audit.after["invitee"] == "newcomer@example.com" and audit.after["role"] == "operator"


def test_a_new_user_accepts_with_a_username_and_a_checked_password(world: World) -> None:
    link = make_link(world, "newcomer@example.com", "operator")
    visitor = Client()
    form = visitor.get(link)
    assert form.status_code == 200 and "Create account and join" in text(form)
    # Django's password validators, inline on the field; nothing is created.
    weak = visitor.post(
        link, {"username": "nina", "password1": "password", "password2": "password"}
    )
    assert weak.status_code == 400
    html = text(weak)
    assert re.search(r'id="id_password2_error".*?This password is too common', html, re.S), html[
        :4000
    ]
    taken = visitor.post(
        link, {"username": "alice", "password1": GOOD_PASSWORD, "password2": GOOD_PASSWORD}
    )
    assert taken.status_code == 400 and "already exists" in text(taken)
    assert not User.objects.filter(username="nina").exists()
    joined = visitor.post(
        link, {"username": "nina", "password1": GOOD_PASSWORD, "password2": GOOD_PASSWORD}
    )
    assert joined.status_code == 302 and joined["Location"] == "/"
    nina = User.objects.get(username="nina")
    assert nina.email == "newcomer@example.com" and nina.check_password(GOOD_PASSWORD)
    assert not nina.is_staff
    assert Membership.objects.get(user=nina, tenant=world.tenant).role == "operator"
    # Signed in, in the tenant she joined.
    home = visitor.get("/")
    assert home.status_code == 200 and "<strong>billing</strong> (operator)" in text(home)
    invitation = Invitation.objects.get()
    assert invitation.accepted_by == nina and invitation.accepted_at is not None
    accept = AuditEvent.objects.get(action="member.invite_accept")
    assert accept.actor_label == "user:nina" and accept.after["new_account"] is True
    assert AuditEvent.objects.filter(action="member.add", object_id=str(nina.pk)).exists()
    # The link worked once.
    second = Client().post(
        link, {"username": "nora", "password1": GOOD_PASSWORD, "password2": GOOD_PASSWORD}
    )
    assert second.status_code == 410 and "already been used" in text(second)
    assert Client().get(link).status_code == 410
    assert not User.objects.filter(username="nora").exists()


def test_a_username_invitation_prefills_the_username(world: World) -> None:
    link = make_link(world, "nina", "viewer")
    html = text(Client().get(link))
    assert re.search(r'<input type="text" name="username" value="nina"', html), html[:4000]


def test_a_signed_in_user_joins_with_a_confirm_button(world: World) -> None:
    link = make_link(world, "newbie", "viewer")
    newbie = user("newbie")
    client = Client()
    client.force_login(newbie)
    page = client.get(link)
    assert page.status_code == 200 and 'id="accept-invite"' in text(page)
    assert "signed in as <strong>newbie</strong>" in text(page)
    assert not Membership.objects.filter(user=newbie).exists(), "opening the link joins nothing"
    joined = client.post(link)
    assert joined.status_code == 302 and joined["Location"] == "/"
    assert Membership.objects.get(user=newbie, tenant=world.tenant).role == "viewer"
    accept = AuditEvent.objects.get(action="member.invite_accept")
    assert accept.actor_label == "user:newbie" and accept.after["new_account"] is False
    # Used: another signed-in account gets the 410, and joins nothing.
    other = user("other")
    late = Client()
    late.force_login(other)
    assert late.post(link).status_code == 410
    assert not Membership.objects.filter(user=other).exists()


def test_staff_and_existing_members_are_told_why_and_the_link_stays_open(world: World) -> None:
    link = make_link(world)
    for who in ("staff", "viewer"):
        client = world.client(who)
        page = client.get(link)
        assert page.status_code == 200 and 'id="invite-refusal"' in text(page)
        assert 'id="accept-invite"' not in text(page)
        assert client.post(link).status_code == 400
    assert Invitation.objects.get().accepted_at is None
    assert Membership.objects.get(user=world.viewer, tenant=world.tenant).role == "viewer"
    assert not Membership.objects.filter(user=world.staff).exists()


def test_an_expired_invitation_is_refused(world: World) -> None:
    link = make_link(world)
    Invitation.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    page = Client().get(link)
    assert page.status_code == 410 and "has expired" in text(page)
    post = Client().post(
        link, {"username": "nina", "password1": GOOD_PASSWORD, "password2": GOOD_PASSWORD}
    )
    assert post.status_code == 410
    assert not User.objects.filter(username="nina").exists()
    assert "expired" in text(world.client("admin").get("/members/"))


@pytest.mark.parametrize("token", ["A" * 43, "not-a-token", "x" * 400])
def test_an_unknown_link_is_a_404_page(world: World, token: str) -> None:
    make_link(world)
    for res in (Client().get(f"/invite/{token}/"), Client().post(f"/invite/{token}/", {})):
        assert res.status_code == 404 and "not known" in text(res)


def test_the_admin_revokes_an_invitation_after_confirming(world: World) -> None:
    link = make_link(world)
    invitation = Invitation.objects.get()
    client = world.client("admin")
    confirm = client.get(f"/members/invitations/{invitation.pk}/revoke")
    assert confirm.status_code == 200 and "Revoke the invitation" in text(confirm)
    invitation.refresh_from_db()
    assert invitation.revoked_at is None, "asking to confirm revokes nothing"
    assert client.post(f"/members/invitations/{invitation.pk}/revoke").status_code == 302
    invitation.refresh_from_db()
    assert invitation.revoked_at is not None
    assert f'id="invitation-{invitation.pk}"' not in text(client.get("/members/"))
    gone = Client().get(link)
    assert gone.status_code == 410 and "withdrawn" in text(gone)
    assert AuditEvent.objects.filter(
        action="member.invite_revoke", object_id=str(invitation.pk)
    ).exists()


def test_revoking_needs_csrf(world: World) -> None:
    make_link(world)
    invitation = Invitation.objects.get()
    client = world.client("admin", csrf=True)
    assert client.post(f"/members/invitations/{invitation.pk}/revoke").status_code == 403
    invitation.refresh_from_db()
    assert invitation.revoked_at is None


@pytest.mark.parametrize("who", ["operator", "viewer"])
def test_only_admins_invite_and_revoke(world: World, who: str) -> None:
    make_link(world)
    invitation = Invitation.objects.get()
    client = world.client(who)
    assert invite(client, "someone@example.com").status_code == 403
    assert client.get(f"/members/invitations/{invitation.pk}/revoke").status_code == 403
    assert client.post(f"/members/invitations/{invitation.pk}/revoke").status_code == 403
    assert Invitation.objects.count() == 1
    invitation.refresh_from_db()
    assert invitation.revoked_at is None
    assert AuditEvent.objects.filter(
        action="denied.post", actor_label=f"user:{getattr(world, who).username}"
    ).exists()


def test_another_tenants_invitation_is_a_404(world: World) -> None:
    make_link(world)
    invitation = Invitation.objects.get()
    outsider = world.client("outsider")  # admin of the other tenant
    assert outsider.get(f"/members/invitations/{invitation.pk}/revoke").status_code == 404
    assert outsider.post(f"/members/invitations/{invitation.pk}/revoke").status_code == 404
    invitation.refresh_from_db()
    assert invitation.revoked_at is None
    assert "newcomer@example.com" not in text(outsider.get("/members/"))


@pytest.mark.parametrize(
    "invitee,message",
    [
        ("", "This field is required"),
        ("bad name!", "invitee: must be an email address or a username"),
        ("olga", "invitee: olga is already a member of billing"),
        ("ev\u202eil", "invitee: must not contain bidi controls"),
    ],
)
def test_a_bad_invitee_is_an_inline_error(world: World, invitee: str, message: str) -> None:
    res = invite(world.client("admin"), invitee)
    assert res.status_code == 400
    block = re.search(
        r'<ul class="errorlist" id="id_invite-invitee_error">(.*?)</ul>', text(res), re.S
    )
    assert block is not None and message in block.group(1), text(res)[:4000]
    assert not Invitation.objects.exists()


def test_accept_posts_are_limited_per_address(world: World, settings: Any) -> None:
    settings.INVITE_ATTEMPTS_PER_ADDRESS = "3/15min"
    link = make_link(world)
    bad = {"username": "nina", "password1": "x", "password2": "y"}
    for _ in range(3):
        assert Client(REMOTE_ADDR="192.0.2.44").post(link, bad).status_code == 400
    refused = Client(REMOTE_ADDR="192.0.2.44").post(
        link, {"username": "nina", "password1": GOOD_PASSWORD, "password2": GOOD_PASSWORD}
    )
    assert refused.status_code == 429 and "Too many attempts" in text(refused)
    assert int(refused["Retry-After"]) > 0
    assert not User.objects.filter(username="nina").exists()
    throttled = AuditEvent.objects.get(action="auth.invite_throttled")
    assert throttled.actor_label == "anonymous@192.0.2.44"
    # Another address is not affected.
    ok = Client(REMOTE_ADDR="192.0.2.45").post(
        link, {"username": "nina", "password1": GOOD_PASSWORD, "password2": GOOD_PASSWORD}
    )
    assert ok.status_code == 302
