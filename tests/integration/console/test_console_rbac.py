"""Every console route x persona: the least role allowed, 403 below it (audited),
404 for another tenant's objects, 404 for operator views unless platform staff,
and a login redirect for anonymous visitors."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from dispatch.models import Execution, Schedule
from tenants import services as tenant_services
from tenants.models import AuditEvent, Membership, ServiceToken
from tenants.roles import Role
from tests.support.console_support import World, form_data, user

pytestmark = pytest.mark.django_db

Route = tuple[str, str, dict[str, Any] | None, Role]


def routes(w: World) -> list[Route]:
    """(method, url, form data, least role allowed); object routes name the tenant's own objects."""
    sid, eid = w.schedule.id, w.execution.id
    token, _ = tenant_services.token_issue(tenant=w.tenant, name="spare", role=Role.VIEWER)
    spare = user("spare-user")
    tenant_services.membership_set(tenant=w.tenant, user=spare, role=Role.VIEWER, actor=None)
    user("newbie")
    return [
        ("get", "/", None, Role.VIEWER),
        ("get", "/dashboard/live", None, Role.VIEWER),
        ("get", "/schedules/", None, Role.VIEWER),
        ("get", "/schedules/new", None, Role.OPERATOR),
        ("post", "/schedules/new", form_data(name="made-here"), Role.OPERATOR),
        ("post", "/schedules/preview", form_data(), Role.VIEWER),
        ("get", f"/schedules/{sid}/", None, Role.VIEWER),
        ("get", f"/schedules/{sid}/edit", None, Role.OPERATOR),
        (
            "post",
            f"/schedules/{sid}/edit",
            form_data(name="nightly", cron="5 0 * * *", version="1"),
            Role.OPERATOR,
        ),
        ("post", f"/schedules/{sid}/preview", form_data(name="nightly"), Role.VIEWER),
        ("post", f"/schedules/{sid}/pause", {"reason": "freeze"}, Role.OPERATOR),
        ("post", f"/schedules/{sid}/resume", {}, Role.OPERATOR),
        ("post", f"/schedules/{sid}/trigger", {}, Role.OPERATOR),
        ("get", f"/schedules/{sid}/delete", None, Role.OPERATOR),
        ("get", f"/executions/{eid}/", None, Role.VIEWER),
        ("get", f"/explain?schedule={sid}&at=2026-01-05T09:00", None, Role.VIEWER),
        ("get", "/tokens/", None, Role.ADMIN),
        ("post", "/tokens/", {"name": "ci", "role": "viewer"}, Role.ADMIN),
        ("get", f"/tokens/{token.pk}/revoke", None, Role.ADMIN),
        ("post", f"/tokens/{token.pk}/revoke", {}, Role.ADMIN),
        ("get", "/members/", None, Role.ADMIN),
        # (Adding an account is for platform staff only, whatever the tenant role:
        # test_console_pages.py::test_tenant_admins_cannot_attach_accounts_nor_learn_which_exist.)
        ("post", f"/members/{spare.pk}/role", {"role": "operator"}, Role.ADMIN),
        ("get", f"/members/{spare.pk}/remove", None, Role.ADMIN),
        ("post", f"/members/{spare.pk}/remove", {}, Role.ADMIN),
        ("post", f"/schedules/{sid}/delete", {}, Role.OPERATOR),
    ]


def _call(client: Client, method: str, url: str, data: dict[str, Any] | None) -> Any:
    return client.post(url, data or {}) if method == "post" else client.get(url)


@pytest.mark.parametrize(
    "who,role", [("viewer", Role.VIEWER), ("operator", Role.OPERATOR), ("admin", Role.ADMIN)]
)
def test_role_matrix_allows_the_least_role_and_forbids_below_it(
    world: World, who: str, role: Role
) -> None:
    client = world.client(who)
    for method, url, data, least in routes(world):
        response = _call(client, method, url, data)
        if role >= least:
            assert response.status_code in (200, 302), (who, method, url, response.status_code)
        else:
            assert response.status_code == 403, (who, method, url, response.status_code)
            assert b"this needs" in response.content


def test_denied_console_requests_are_audited(world: World) -> None:
    response = world.client("viewer").post(f"/schedules/{world.schedule.id}/trigger")
    assert response.status_code == 403
    denied = AuditEvent.objects.filter(outcome="denied", action="denied.post").first()
    assert denied is not None and denied.actor_label == "user:vera"
    assert denied.after == {"needed": "operator", "had": "viewer"}
    assert Execution.objects.filter(schedule=world.schedule).count() == 1


def test_viewer_does_not_see_the_operator_buttons(world: World) -> None:
    page = world.client("viewer").get(f"/schedules/{world.schedule.id}/").content.decode()
    assert "Trigger now" not in page and "Pause" not in page and "Delete" not in page
    page = world.client("operator").get(f"/schedules/{world.schedule.id}/").content.decode()
    assert "Trigger now" in page and "Pause" in page


def test_tokens_and_members_links_only_for_admins(world: World) -> None:
    assert "/tokens/" not in world.client("operator").get("/").content.decode()
    assert "/tokens/" in world.client("admin").get("/").content.decode()


@pytest.mark.parametrize("who", ["outsider", "admin"])
def test_another_tenants_objects_are_404_and_unchanged(world: World, who: str) -> None:
    """The outsider (admin of their own tenant) cannot reach billing's objects, and
    billing's admin cannot reach the outsider's: 404, exactly like a missing id."""
    client = world.client(who)
    theirs = world.schedule if who == "outsider" else world.other_schedule
    execution = world.execution if who == "outsider" else world.other_execution
    tenant = world.tenant if who == "outsider" else world.other
    token, _ = tenant_services.token_issue(tenant=tenant, name="theirs", role=Role.VIEWER)
    member = world.viewer if who == "outsider" else world.outsider
    urls: list[tuple[str, str, dict[str, Any] | None]] = [
        ("get", f"/schedules/{theirs.id}/", None),
        ("get", f"/schedules/{theirs.id}/edit", None),
        ("post", f"/schedules/{theirs.id}/edit", form_data(name="stolen")),
        ("post", f"/schedules/{theirs.id}/preview", form_data()),
        ("post", f"/schedules/{theirs.id}/pause", {"reason": "x"}),
        ("post", f"/schedules/{theirs.id}/resume", {}),
        ("post", f"/schedules/{theirs.id}/trigger", {}),
        ("get", f"/schedules/{theirs.id}/delete", None),
        ("post", f"/schedules/{theirs.id}/delete", {}),
        ("get", f"/executions/{execution.id}/", None),
        ("get", f"/explain?schedule={theirs.id}&at=2026-01-05T09:00", None),
        ("get", f"/tokens/{token.pk}/revoke", None),
        ("post", f"/tokens/{token.pk}/revoke", {}),
        ("post", f"/members/{member.pk}/role", {"role": "viewer"}),
        ("get", f"/members/{member.pk}/remove", None),
        ("post", f"/members/{member.pk}/remove", {}),
        ("get", "/schedules/00000000-0000-0000-0000-00000000abcd/", None),
    ]
    before = Execution.objects.filter(schedule=theirs).count()
    for method, url, data in urls:
        response = _call(client, method, url, data)
        assert response.status_code == 404, (method, url, response.status_code)
    theirs.refresh_from_db()
    assert theirs.paused is False and theirs.deleted_at is None and theirs.name != "stolen"
    assert Execution.objects.filter(schedule=theirs).count() == before
    token.refresh_from_db()
    assert token.revoked_at is None
    assert Membership.objects.filter(user=member, tenant=tenant).exists()


def test_lists_show_only_the_current_tenants_objects(world: World) -> None:
    page = world.client("outsider").get("/schedules/").content.decode()
    assert "theirs" in page and "nightly" not in page
    page = world.client("admin").get("/").content.decode()
    assert "theirs" not in page
    tokens_page = world.client("outsider").get("/tokens/").content.decode()
    assert "spare" not in tokens_page
    assert not ServiceToken.objects.filter(tenant=world.other, name="spare").exists()


def test_switching_to_a_tenant_without_membership_is_404(world: World) -> None:
    client = world.client("admin")
    assert client.post("/tenant", {"tenant": "outsider"}).status_code == 404
    page = client.get("/schedules/").content.decode()
    assert "nightly" in page and "theirs" not in page


def test_user_in_two_tenants_switches_and_role_follows(world: World) -> None:
    tenant_services.membership_set(
        tenant=world.other, user=world.viewer, role=Role.OPERATOR, actor=None
    )
    client = world.client("viewer")
    assert client.get("/").status_code == 200
    assert b'id="tenant-switch"' in client.get("/").content
    # In billing she is a viewer: another tenant's schedule is not found, and the
    # role check answers before any lookup (a missing id gets the same 403).
    assert client.get(f"/schedules/{world.other_schedule.id}/").status_code == 404
    assert client.post(f"/schedules/{world.other_schedule.id}/trigger").status_code == 403
    assert client.post("/schedules/00000000-0000-0000-0000-00000000abcd/trigger").status_code == 403
    assert client.post("/tenant", {"tenant": "outsider"}).status_code == 302
    assert client.post(f"/schedules/{world.other_schedule.id}/trigger").status_code == 302
    assert client.post(f"/schedules/{world.schedule.id}/trigger").status_code == 404


@pytest.mark.parametrize("url", ["/ops/", "/ops/audit"])
def test_operator_views_are_404_except_for_platform_staff(world: World, url: str) -> None:
    for who in ("viewer", "operator", "admin", "outsider"):
        assert world.client(who).get(url).status_code == 404, who
    assert world.client("staff").get(url).status_code == 200


def test_platform_staff_act_as_admin_in_every_tenant(world: World) -> None:
    client = world.client("staff")
    assert client.get("/tokens/").status_code == 200
    assert client.post("/tenant", {"tenant": "outsider"}).status_code == 302
    assert client.get(f"/schedules/{world.other_schedule.id}/").status_code == 200


def test_user_without_any_tenant_gets_404(world: World) -> None:
    lonely = user("lonely")
    client = Client()
    client.force_login(lonely)
    assert client.get("/").status_code == 404


@pytest.mark.parametrize("url", ["/", "/schedules/", "/tokens/", "/explain", "/ops/"])
def test_anonymous_visitors_are_sent_to_log_in(db: Any, url: str) -> None:
    response = Client().get(url)
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_post_only_routes_refuse_get(world: World) -> None:
    client = world.client("admin")
    sid = world.schedule.id
    for url in (
        f"/schedules/{sid}/pause",
        f"/schedules/{sid}/resume",
        f"/schedules/{sid}/trigger",
        "/schedules/preview",
        "/tenant",
        "/prefs/tz",
    ):
        assert client.get(url).status_code == 405, url
    assert Schedule.objects.get(pk=sid).paused is False
    assert Execution.objects.filter(schedule_id=sid).count() == 1
