"""Alert channels through the API: admins only, validated config (addresses and
secret references, webhook URLs past the SSRF guard), and `:test` delivering to a
real SMTP server and to the loopback receiver, which verifies the signature."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from tenants import services as tenant_services
from tenants.models import AuditEvent, Tenant
from tenants.roles import Role
from tests.integration.alerts.conftest import Mailbox
from tests.support.console_support import client_for, user
from tests.support.ledger import Ledger

pytestmark = pytest.mark.django_db

EMAIL = {"name": "ops-mail", "kind": "email", "config": {"to": ["ops@billing.test"]}}


def create(api: APIClient, body: dict[str, Any]) -> Any:
    return api.post("/v1/alert-channels", body, format="json")


def field_error(res: Any, field: str) -> str:
    assert res.status_code == 400, (res.status_code, res.content[:300])
    detail = res.json()["error"]["detail"]
    assert field in detail, detail
    return str(detail[field][0])


def test_channels_are_for_admins_only(
    api_for: Callable[[Tenant, Role], APIClient], api: APIClient, tenant: Tenant
) -> None:
    cid = create(api, EMAIL).json()["id"]
    for role in (Role.VIEWER, Role.OPERATOR):
        client = api_for(tenant, role)
        assert client.get("/v1/alert-channels").status_code == 403
        assert client.get(f"/v1/alert-channels/{cid}").status_code == 403
        assert create(client, EMAIL | {"name": "x"}).status_code == 403
        assert client.post(f"/v1/alert-channels/{cid}:test").status_code == 403


def test_create_read_edit_delete(api: APIClient, outsider_api: APIClient) -> None:
    res = create(api, EMAIL)
    assert res.status_code == 201, res.content
    channel = res.json()
    assert res["Location"] == f"/v1/alert-channels/{channel['id']}"
    assert (channel["kind"], channel["config"], channel["enabled"]) == (
        "email",
        {"to": ["ops@billing.test"]},
        True,
    )
    url = f"/v1/alert-channels/{channel['id']}"
    assert api.get("/v1/alert-channels").json()["results"] == [channel]
    assert api.get(url).json() == channel
    # Another tenant's channel is a 404, for every verb.
    assert outsider_api.get(url).status_code == 404
    assert outsider_api.patch(url, {"enabled": False}, format="json").status_code == 404
    assert outsider_api.post(f"{url}:test").status_code == 404
    assert outsider_api.delete(url).status_code == 404

    edited = api.patch(url, {"enabled": False, "config": {"to": ["a@b.test"]}}, format="json")
    assert edited.status_code == 200, edited.content
    assert (edited.json()["enabled"], edited.json()["config"]) == (False, {"to": ["a@b.test"]})
    assert "cannot change" in field_error(api.patch(url, {"kind": "slack"}, format="json"), "kind")
    actions = list(
        AuditEvent.objects.filter(object_type="alert_channel", object_id=channel["id"])
        .order_by("id")
        .values_list("action", flat=True)
    )
    assert actions == ["alert_channel.create", "alert_channel.update"]

    assert api.delete(url).status_code == 204
    assert api.get(url).status_code == 404


@pytest.mark.parametrize(
    "body,field,says",
    [
        ({"kind": "pager"}, "kind", ""),
        ({"config": {"to": []}}, "config.to", "1..20"),
        ({"config": {"to": ["not-an-address"]}}, "config.to", "not an email address"),
        ({"config": {"to": ["a@b.test"], "cc": ["x@y.test"]}}, "config.cc", "unknown field"),
        ({"name": ""}, "name", ""),
        (
            {"kind": "webhook", "config": {"url": "http://169.254.169.254/latest"}},
            "config.url",
            "metadata",
        ),
        ({"kind": "slack", "config": {"url": "ftp://hooks.example.com/x"}}, "config.url", "http"),
        (
            {"kind": "slack", "config": {"url": "https://u:p@hooks.example.com/x"}},
            "config.url",
            "credentials",
        ),
        (
            {"kind": "webhook", "config": {"url": {"secret": "hunter2"}}},
            "config.url",
            "secret reference",
        ),
        (
            {
                "kind": "webhook",
                "config": {
                    "url": "https://hooks.example.com/x",
                    "headers": {"Authorization": "Bearer hunter2"},
                },
            },
            "config.headers.Authorization",
            "secret reference",
        ),
        (
            {
                "kind": "webhook",
                "config": {
                    "url": "https://hooks.example.com/x",
                    "headers": {"X-Token": {"secret": "vault:kv/outsider/hook#token"}},
                },
            },
            "config.headers.X-Token",
            "billing",
        ),
    ],
)
def test_bad_config_is_a_400_naming_the_field(
    api: APIClient, body: dict[str, Any], field: str, says: str
) -> None:
    res = create(api, EMAIL | body)
    assert says in field_error(res, field)


def test_a_duplicate_name_is_a_400(api: APIClient) -> None:
    assert create(api, EMAIL).status_code == 201
    assert "already exists" in field_error(create(api, EMAIL), "name")


def test_test_email_arrives_at_a_real_smtp_server(api: APIClient, smtp_server: Mailbox) -> None:
    cid = create(api, EMAIL | {"config": {"to": ["ops@billing.test", "lead@billing.test"]}}).json()[
        "id"
    ]
    res = api.post(f"/v1/alert-channels/{cid}:test")
    assert res.status_code == 200
    assert res.json() == {"ok": True, "detail": "sent to 2 recipients"}
    [(recipients, message)] = smtp_server.received
    assert recipients == ["ops@billing.test", "lead@billing.test"]
    assert message["Subject"] == "[scheduler] test message for channel ops-mail"
    assert "tenant billing" in message.get_payload()


def test_test_email_to_an_smtp_server_that_is_down_says_so(api: APIClient, settings: Any) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", 9  # discard: nothing listens
    cid = create(api, EMAIL).json()["id"]
    res = api.post(f"/v1/alert-channels/{cid}:test").json()
    assert res["ok"] is False and "ConnectionRefused" in res["detail"], res
    audit = AuditEvent.objects.get(action="alert_channel.test", object_id=cid)
    assert audit.outcome == "failed" and audit.after["ok"] is False


def test_slack_test_posts_a_text_message(api: APIClient, ledger: Ledger, settings: Any) -> None:
    settings.TARGET_TEST_ALLOW = [ledger.allow_entry]
    res = create(api, {"name": "chat", "kind": "slack", "config": {"url": f"{ledger.url}/hook"}})
    assert res.status_code == 201, res.content
    answer = api.post(f"/v1/alert-channels/{res.json()['id']}:test").json()
    assert answer == {"ok": True, "detail": "HTTP 200"}
    [request] = ledger.requests
    assert request["path"] == "/hook"
    body = json.loads(request["body"])
    assert set(body) == {"text"} and "test message for channel chat" in body["text"]


def test_webhook_test_is_signed_with_the_tenant_key(
    api: APIClient, ledger: Ledger, settings: Any, tenant: Tenant, monkeypatch: Any
) -> None:
    settings.TARGET_TEST_ALLOW = [ledger.allow_entry]
    monkeypatch.setenv("SCHED_SECRET_BILLING__HOOK_TOKEN", "t0ken-value")
    res = create(
        api,
        {
            "name": "hook",
            "kind": "webhook",
            "config": {
                "url": f"{ledger.url}/alerts",
                "headers": {"X-Token": {"secret": "env:HOOK_TOKEN"}, "X-Team": "billing"},
            },
        },
    )
    assert res.status_code == 201, res.content
    # Stored as the reference, never the value.
    assert res.json()["config"]["headers"]["X-Token"] == {"secret": "env:HOOK_TOKEN"}
    assert api.post(f"/v1/alert-channels/{res.json()['id']}:test").json()["ok"] is True
    [request] = ledger.requests
    headers = {k.lower(): v for k, v in request["headers"].items()}
    assert (headers["x-token"], headers["x-team"]) == ("t0ken-value", "billing")
    # The receiver's check, as a tenant would write it.
    timestamp, alert_id = headers["x-signature-timestamp"], headers["x-alert-id"]
    message = f"{timestamp}.{alert_id}.".encode() + request["body"].encode()
    expected = hmac.new(tenant.signing_key.encode(), message, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(headers["x-signature"], f"sha256={expected}")
    event = json.loads(request["body"])
    assert (event["event"], event["alert_id"], event["tenant"]) == (
        "alert.test",
        alert_id,
        "billing",
    )


def test_a_secret_url_is_guarded_when_sent(
    api: APIClient, ledger: Ledger, monkeypatch: Any
) -> None:
    # Saved as a reference (nothing to check then); its value points at loopback,
    # which the guard refuses at send time (no test allow-list here).
    monkeypatch.setenv("SCHED_SECRET_BILLING__HOOK_URL", f"{ledger.url}/x")
    res = create(api, {"name": "h", "kind": "slack", "config": {"url": {"secret": "env:HOOK_URL"}}})
    assert res.status_code == 201, res.content
    answer = api.post(f"/v1/alert-channels/{res.json()['id']}:test").json()
    assert answer["ok"] is False and "loopback" in answer["detail"], answer
    assert ledger.requests == []


def test_a_receiver_error_is_the_tests_answer(
    api: APIClient, ledger: Ledger, settings: Any
) -> None:
    settings.TARGET_TEST_ALLOW = [ledger.allow_entry]
    ledger.respond = lambda req: (500, {}, b"boom")
    cid = create(api, {"name": "h", "kind": "webhook", "config": {"url": ledger.url}}).json()["id"]
    assert api.post(f"/v1/alert-channels/{cid}:test").json() == {"ok": False, "detail": "HTTP 500"}
    assert api.post(f"/v1/alert-channels/{cid}:test", {"x": 1}, format="json").status_code == 400


def test_channels_are_in_the_openapi_document(api: APIClient) -> None:
    paths = api.get("/v1/openapi.json").json()["paths"]
    assert set(paths["/v1/alert-channels"]) == {"get", "post"}
    assert set(paths["/v1/alert-channels/{id}"]) == {"get", "patch", "delete"}
    test_op = paths["/v1/alert-channels/{id}:test"]["post"]
    assert {"200", "400", "403", "404"} <= set(test_op["responses"])


def test_a_new_channel_joins_a_default_policy_that_names_its_channels(
    api: APIClient, tenant: Tenant
) -> None:
    """A default policy naming its channels sends nowhere else: a channel made later
    joins it unless told not to, and one that no policy uses says so (API and page)."""
    first = create(api, EMAIL).json()
    assert first["used_by"] == {"default_policy": True, "schedule_policies": 0}
    assert (
        api.put("/v1/alert-policy", {"channels": [first["id"]]}, format="json").status_code == 200
    )

    second = create(api, EMAIL | {"name": "ops-mail-2"}).json()
    assert second["used_by"] == {"default_policy": True, "schedule_policies": 0}
    policy = api.get("/v1/alert-policy").json()
    assert sorted(policy["channels"]) == sorted([first["id"], second["id"]])

    aside = create(api, EMAIL | {"name": "aside", "use_in_default_policy": False}).json()
    assert aside["used_by"] == {"default_policy": False, "schedule_policies": 0}
    assert aside["id"] not in api.get("/v1/alert-policy").json()["channels"]
    bad = create(api, EMAIL | {"name": "bad", "use_in_default_policy": "yes"})
    assert field_error(bad, "use_in_default_policy") == "must be true or false"

    listed = {c["name"]: c["used_by"] for c in api.get("/v1/alert-channels").json()["results"]}
    assert listed["aside"] == {"default_policy": False, "schedule_policies": 0}
    admin = user("ada")
    tenant_services.membership_set(tenant=tenant, user=admin, role=Role.ADMIN, actor=None)
    page = client_for(admin).get("/alerts/").content.decode()
    row = page[page.index(f'id="channel-use-{aside["id"]}"') :][:400]
    assert "not used by any policy" in row
    used = page[page.index(f'id="channel-use-{second["id"]}"') :][:200]
    assert "the default policy" in used and "not used" not in used
