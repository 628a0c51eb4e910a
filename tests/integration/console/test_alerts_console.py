"""The console's Alerts page and a schedule's alerts part, through the Django test
client: who may change what, CSRF on every form (htmx's "Send test" too), another
tenant's channel / schedule is a 404, and a service's 400 is shown next to the field."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest

from dispatch import services
from dispatch.models import AlertChannel, AlertPolicy, MaintenanceWindow, Schedule
from tenants.models import AuditEvent
from tests.support.console_support import World, db_now
from tests.support.ledger import Ledger

pytestmark = pytest.mark.django_db

EMAIL = {
    "name": "ops",
    "kind": "email",
    "to": "ops@example.com, oncall@example.com",
    "enabled": "on",
}
POLICY = {
    "failure_threshold": "3",
    "realert_s": "3600",
    "auto_pause_after": "5",
    "late_after_s": "0",
    "max_duration_s": "600",
    "recovery": "on",
}


def _channel(world: World, name: str = "ops", *, other: bool = False) -> AlertChannel:
    return services.alert_channel_create(
        actor=world.outsider_p if other else world.admin_p,
        data={"name": name, "kind": "email", "config": {"to": ["a@example.com"]}},
    )


def _errors_near(page: str, input_id: str) -> str:
    match = re.search(rf'<ul class="errorlist" id="{input_id}-error"[^>]*>(.*?)</ul>', page, re.S)
    assert match, f"no errors shown for {input_id}"
    return match.group(1)


def test_admin_creates_edits_disables_and_deletes_a_channel(world: World) -> None:
    client = world.client("admin")
    page = client.get("/alerts/")
    assert page.status_code == 200 and 'id="channel-form"' in page.content.decode()
    done = client.post("/alerts/channels/new", EMAIL)
    assert done.status_code == 302
    channel = AlertChannel.objects.get(tenant=world.tenant, name="ops")
    assert channel.config == {"to": ["ops@example.com", "oncall@example.com"]} and channel.enabled
    assert "oncall@example.com" in client.get("/alerts/").content.decode()

    edit = client.get(f"/alerts/channels/{channel.id}/").content.decode()
    assert "ops@example.com\noncall@example.com" in edit
    saved = client.post(
        f"/alerts/channels/{channel.id}/", {"name": "ops-2", "to": "x@example.com", "enabled": "on"}
    )
    assert saved.status_code == 302
    channel.refresh_from_db()
    assert (channel.name, channel.config) == ("ops-2", {"to": ["x@example.com"]})

    assert client.post(f"/alerts/channels/{channel.id}/toggle").status_code == 302
    channel.refresh_from_db()
    assert channel.enabled is False
    assert client.post(f"/alerts/channels/{channel.id}/delete").status_code == 302
    assert not AlertChannel.objects.filter(pk=channel.pk).exists()
    actions = set(
        AuditEvent.objects.filter(object_type="alert_channel").values_list("action", flat=True)
    )
    assert {"alert_channel.create", "alert_channel.update", "alert_channel.delete"} <= actions


def test_bad_channel_input_is_shown_next_to_the_field(world: World) -> None:
    client = world.client("admin")
    bad = client.post("/alerts/channels/new", EMAIL | {"to": "not-an-address"})
    assert bad.status_code == 400
    page = bad.content.decode()
    assert "is not an email address" in _errors_near(page, "channel-to")
    assert "not-an-address" in page  # what was sent is kept in the form
    hook = client.post("/alerts/channels/new", {"name": "h", "kind": "webhook", "url": "ftp://x"})
    assert hook.status_code == 400
    assert _errors_near(hook.content.decode(), "channel-url")
    unnamed = client.post("/alerts/channels/new", EMAIL | {"name": ""})
    assert unnamed.status_code == 400
    assert "characters" in _errors_near(unnamed.content.decode(), "channel-name")
    _channel(world, "taken")
    twice = client.post("/alerts/channels/new", EMAIL | {"name": "taken"})
    assert "already exists" in _errors_near(twice.content.decode(), "channel-name")
    channel = AlertChannel.objects.get(name="taken")
    edit = client.post(f"/alerts/channels/{channel.id}/", {"name": "taken", "to": "nope"})
    assert edit.status_code == 400
    assert "is not an email address" in _errors_near(edit.content.decode(), "channel-to")
    assert AlertChannel.objects.filter(tenant=world.tenant).count() == 1


def test_only_admins_manage_channels(world: World) -> None:
    channel = _channel(world)
    for who in ("operator", "viewer"):
        client = world.client(who)
        page = client.get("/alerts/").content.decode()
        assert 'id="channel-form"' not in page and "managed by the tenant's admins" in page
        assert "a@example.com" not in page  # a channel's config is the admins' to see
        assert client.post("/alerts/channels/new", EMAIL).status_code == 403
        for suffix in ("", "toggle", "delete", "test"):
            assert client.post(f"/alerts/channels/{channel.id}/{suffix}").status_code == 403
    channel.refresh_from_db()
    assert channel.enabled and AlertChannel.objects.filter(tenant=world.tenant).count() == 1


def test_another_tenants_channel_is_a_404(world: World) -> None:
    theirs = _channel(world, "theirs", other=True)
    client = world.client("admin")
    assert client.get(f"/alerts/channels/{theirs.id}/").status_code == 404
    for suffix in ("", "toggle", "delete", "test"):
        assert client.post(f"/alerts/channels/{theirs.id}/{suffix}").status_code == 404
    theirs.refresh_from_db()
    assert theirs.enabled and theirs.name == "theirs"
    assert "theirs" not in client.get("/alerts/").content.decode()


def test_send_test_over_htmx_answers_the_result_inline(world: World, settings: Any) -> None:
    with Ledger() as ledger:
        settings.TARGET_TEST_ALLOW = [ledger.allow_entry]
        channel = services.alert_channel_create(
            actor=world.admin_p,
            data={"name": "hook", "kind": "webhook", "config": {"url": f"{ledger.url}/a"}},
        )
        answer = world.client("admin").post(
            f"/alerts/channels/{channel.id}/test", HTTP_HX_REQUEST="true"
        )
        assert answer.status_code == 200
        body = answer.content.decode()
        assert body.startswith('<span class="test-result ok"') and "Test sent: HTTP 200" in body
        assert len(ledger.requests) == 1


def test_a_failed_test_is_shown_as_failed_not_an_error(world: World, settings: Any) -> None:
    with Ledger(lambda request: (500, {}, b"down")) as ledger:
        settings.TARGET_TEST_ALLOW = [ledger.allow_entry]
        channel = services.alert_channel_create(
            actor=world.admin_p,
            data={"name": "hook", "kind": "webhook", "config": {"url": f"{ledger.url}/a"}},
        )
        answer = world.client("admin").post(f"/alerts/channels/{channel.id}/test")
        assert answer.status_code == 200  # without htmx: the whole page, the result in its row
        assert "Test failed: HTTP 500" in answer.content.decode()


def test_operator_sets_the_default_policy_viewer_cannot(world: World) -> None:
    channel = _channel(world)
    viewer = world.client("viewer")
    page = viewer.get("/alerts/").content.decode()
    assert 'id="policy-readonly"' in page and 'id="save-policy"' not in page
    assert viewer.post("/alerts/policy", POLICY).status_code == 403
    assert not AlertPolicy.objects.filter(tenant=world.tenant).exists()

    operator = world.client("operator")
    done = operator.post("/alerts/policy", POLICY | {"channels": [str(channel.id)]})
    assert done.status_code == 302
    policy = AlertPolicy.objects.get(tenant=world.tenant, schedule__isnull=True)
    assert (policy.failure_threshold, policy.realert_s, policy.auto_pause_after) == (3, 3600, 5)
    assert (policy.max_duration_s, policy.recovery) == (600, True)
    assert list(policy.channels.values_list("id", flat=True)) == [channel.id]
    page = operator.get("/alerts/").content.decode()
    assert 'name="failure_threshold" value="3"' in page


def test_bad_policy_input_is_shown_next_to_the_field(world: World) -> None:
    client = world.client("operator")
    for name, value in (("failure_threshold", "0"), ("realert_s", "soon"), ("late_after_s", "-1")):
        answer = client.post("/alerts/policy", POLICY | {name: value})
        assert answer.status_code == 400
        assert "must be a whole number" in _errors_near(answer.content.decode(), f"policy-{name}")
    theirs = _channel(world, "theirs", other=True)
    answer = client.post("/alerts/policy", POLICY | {"channels": [str(theirs.id)]})
    assert answer.status_code == 400
    assert "no alert channel" in _errors_near(answer.content.decode(), "policy-channels")
    assert not AlertPolicy.objects.filter(tenant=world.tenant).exists()


def test_maintenance_windows_create_delete_and_errors(world: World) -> None:
    client = world.client("operator")
    start = (db_now() + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    end = (db_now() + timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M")
    assert (
        client.post(
            "/alerts/windows/new", {"name": "upgrade", "starts_at": start, "ends_at": end}
        ).status_code
        == 302
    )
    assert (
        client.post(
            "/alerts/windows/new",
            {"name": "weekly", "cron": "0 2 * * SUN", "timezone": "UTC", "duration_s": "3600"},
        ).status_code
        == 302
    )
    assert set(MaintenanceWindow.objects.values_list("name", flat=True)) == {"upgrade", "weekly"}
    bad = client.post("/alerts/windows/new", {"name": "w", "starts_at": end, "ends_at": start})
    assert bad.status_code == 400
    assert "must be after starts_at" in _errors_near(bad.content.decode(), "window-ends_at")
    junk = client.post("/alerts/windows/new", {"name": "w", "starts_at": "x", "ends_at": end})
    assert junk.status_code == 400 and _errors_near(junk.content.decode(), "window-starts_at")
    cron = client.post("/alerts/windows/new", {"name": "w", "cron": "0 2 * *", "duration_s": "60"})
    assert cron.status_code == 400 and _errors_near(cron.content.decode(), "window-cron")
    short = client.post(
        "/alerts/windows/new", {"name": "w", "cron": "0 2 * * *", "duration_s": "5"}
    )
    assert "60.." in _errors_near(short.content.decode(), "window-duration_s")

    viewer = world.client("viewer")
    window = MaintenanceWindow.objects.get(name="upgrade")
    assert 'id="window-form"' not in viewer.get("/alerts/").content.decode()
    assert viewer.post(f"/alerts/windows/{window.id}/delete").status_code == 403
    assert client.post(f"/alerts/windows/{window.id}/delete").status_code == 302
    assert not MaintenanceWindow.objects.filter(pk=window.pk).exists()
    theirs = services.maintenance_window_create(
        actor=world.outsider_p, data={"name": "theirs", "cron": "0 2 * * *", "duration_s": 600}
    )
    assert client.post(f"/alerts/windows/{theirs.id}/delete").status_code == 404
    assert MaintenanceWindow.objects.filter(pk=theirs.pk).exists()


def test_schedule_page_sets_its_policy_and_snooze(world: World) -> None:
    sid = world.schedule.id
    client = world.client("operator")
    page = client.get(f"/schedules/{sid}/").content.decode()
    assert 'id="schedule-policy-form"' in page and "the built-in default" in page
    done = client.post(f"/schedules/{sid}/alerts/policy", POLICY | {"failure_threshold": "7"})
    assert done.status_code == 302 and done["Location"].endswith("#alerts")
    own = AlertPolicy.objects.get(tenant=world.tenant, schedule_id=sid)
    assert own.failure_threshold == 7
    page = client.get(f"/schedules/{sid}/").content.decode()
    assert "this schedule&#x27;s own" in page or "this schedule's own" in page

    until = (db_now() + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    assert client.post(f"/schedules/{sid}/alerts/snooze", {"until": until}).status_code == 302
    schedule = Schedule.objects.get(pk=sid)
    assert schedule.alert_snoozed_until is not None
    assert 'id="end-snooze"' in client.get(f"/schedules/{sid}/").content.decode()
    assert client.post(f"/schedules/{sid}/alerts/snooze", {"until": ""}).status_code == 302
    assert Schedule.objects.get(pk=sid).alert_snoozed_until is None

    past = (db_now() - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    bad = client.post(f"/schedules/{sid}/alerts/snooze", {"until": past})
    assert bad.status_code == 400
    assert "must be in the future" in _errors_near(bad.content.decode(), "snooze-until")
    bad = client.post(f"/schedules/{sid}/alerts/policy", POLICY | {"auto_pause_after": "x"})
    assert bad.status_code == 400
    assert "whole number" in _errors_near(bad.content.decode(), "schedule-policy-auto_pause_after")

    assert client.post(f"/schedules/{sid}/alerts/policy/delete").status_code == 302
    assert not AlertPolicy.objects.filter(schedule_id=sid).exists()


def test_viewer_sees_the_schedules_alerts_read_only(world: World) -> None:
    sid = world.schedule.id
    viewer = world.client("viewer")
    page = viewer.get(f"/schedules/{sid}/").content.decode()
    assert 'id="alert-state"' in page
    assert 'id="save-schedule-policy"' not in page and 'id="snooze-form"' not in page
    assert viewer.post(f"/schedules/{sid}/alerts/policy", POLICY).status_code == 403
    assert viewer.post(f"/schedules/{sid}/alerts/snooze", {"until": ""}).status_code == 403
    assert not AlertPolicy.objects.filter(schedule_id=sid).exists()


def test_another_tenants_schedule_is_a_404(world: World) -> None:
    sid = world.other_schedule.id
    client = world.client("admin")
    for suffix in ("policy", "policy/delete", "snooze"):
        assert client.post(f"/schedules/{sid}/alerts/{suffix}", POLICY).status_code == 404
    assert not AlertPolicy.objects.filter(schedule_id=sid).exists()


def test_every_alerts_form_needs_the_csrf_token(world: World) -> None:
    channel = _channel(world)
    sid = world.schedule.id
    client = world.client("admin", csrf=True)
    posts = [
        "/alerts/channels/new",
        f"/alerts/channels/{channel.id}/",
        f"/alerts/channels/{channel.id}/toggle",
        f"/alerts/channels/{channel.id}/delete",
        f"/alerts/channels/{channel.id}/test",
        "/alerts/policy",
        "/alerts/windows/new",
        f"/schedules/{sid}/alerts/policy",
        f"/schedules/{sid}/alerts/policy/delete",
        f"/schedules/{sid}/alerts/snooze",
    ]
    for url in posts:
        assert client.post(url, POLICY | EMAIL, HTTP_HX_REQUEST="true").status_code == 403, url
    channel.refresh_from_db()
    assert channel.enabled and not AlertPolicy.objects.exists()
    # The page carries the token for its forms and, on <body hx-headers>, for htmx.
    page = client.get("/alerts/").content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token and "X-CSRFToken" in page
    ok = client.post("/alerts/policy", POLICY | {"csrfmiddlewaretoken": token.group(1)})
    assert ok.status_code == 302


def test_schedule_page_shows_failing_and_auto_paused(world: World) -> None:
    sid = world.schedule.id
    client = world.client("viewer")
    page = client.get(f"/schedules/{sid}/").content.decode()
    assert 'id="auto-paused"' not in page and "a failure alert went out" not in page
    # What the alert decision (dispatch/sql/alerts.sql) leaves after tripping the breaker.
    Schedule.objects.filter(pk=sid).update(
        alert_failing=True, paused=True, paused_by="alerts (auto-pause)"
    )
    page = client.get(f"/schedules/{sid}/").content.decode()
    assert "a failure alert went out" in page and 'id="auto-paused"' in page


def test_editing_a_webhooks_url_keeps_its_headers(world: World, settings: Any) -> None:
    with Ledger() as ledger:
        settings.TARGET_TEST_ALLOW = [ledger.allow_entry]
        channel = services.alert_channel_create(
            actor=world.admin_p,
            data={
                "name": "hook",
                "kind": "webhook",
                "config": {"url": f"{ledger.url}/a", "headers": {"X-Team": "billing"}},
            },
        )
        saved = world.client("admin").post(
            f"/alerts/channels/{channel.id}/", {"name": "hook", "url": f"{ledger.url}/b"}
        )
        assert saved.status_code == 302
        channel.refresh_from_db()
        assert channel.config["url"] == f"{ledger.url}/b"
        assert channel.config["headers"] == {"X-Team": "billing"} and channel.enabled is False
