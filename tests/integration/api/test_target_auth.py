"""`target.auth` at save time (workload identity, dispatch/identity): an HTTP target's
audience defaults to its URL's origin and is stored resolved; queue and command targets
must name theirs; anything else is a 400 naming the field, with nothing stored."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from dispatch.models import ManagedCommand, Schedule

pytestmark = pytest.mark.django_db


def post(api: APIClient, seed_example: dict[str, Any], target: dict[str, Any]) -> Any:
    return api.post("/v1/schedules", seed_example | {"target": target}, format="json")


def error_of(res: Any) -> tuple[str, str]:
    assert res.status_code == 400, res.content
    err = res.json()["error"]
    return str(err["detail"]), str(err["message"])


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("https://Billing.Internal/hook?x=1", "https://billing.internal"),
        ("https://billing.internal:443/hook", "https://billing.internal"),
        ("http://billing.internal:80/hook", "http://billing.internal"),
        ("https://billing.internal:8443/a/b", "https://billing.internal:8443"),
        ("https://[2606:4700:4700::1111]:8443/hook", "https://[2606:4700:4700::1111]:8443"),
    ],
)
def test_http_audience_defaults_to_the_origin_and_is_stored(
    api: APIClient, seed_example: dict[str, Any], url: str, origin: str
) -> None:
    res = post(api, seed_example, {"type": "http", "url": url, "auth": {"type": "oidc"}})
    assert res.status_code == 201, res.content
    assert res.json()["target"]["auth"] == {"type": "oidc", "audience": origin}
    assert Schedule.objects.get().target["auth"] == {"type": "oidc", "audience": origin}


def test_an_audience_given_is_kept(api: APIClient, seed_example: dict[str, Any]) -> None:
    auth = {"type": "oidc", "audience": "api://billing-reports"}
    res = post(api, seed_example, {"type": "http", "url": "https://b.internal/", "auth": auth})
    assert res.status_code == 201, res.content
    assert res.json()["target"]["auth"] == auth


@pytest.mark.parametrize(
    ("auth", "field", "reason"),
    [
        ("oidc", "target.auth", "must be an object"),
        ({"type": "hmac"}, "target.auth.type", "must be one of oidc"),
        ({}, "target.auth.type", "must be one of oidc"),
        ({"type": "oidc", "issuer": "me"}, "target.auth.issuer", "unknown field"),
        ({"type": "oidc", "audience": ""}, "target.auth.audience", "non-empty"),
        ({"type": "oidc", "audience": 7}, "target.auth.audience", "non-empty string"),
        ({"type": "oidc", "audience": "a\nb"}, "target.auth.audience", "control characters"),
        ({"type": "oidc", "audience": "a" * 513}, "target.auth.audience", "at most 512"),
    ],
)
def test_bad_auth_is_a_400_naming_the_field(
    api: APIClient, seed_example: dict[str, Any], auth: Any, field: str, reason: str
) -> None:
    res = post(api, seed_example, {"type": "http", "url": "https://b.internal/", "auth": auth})
    detail, message = error_of(res)
    assert field in detail and field in message and reason in message
    assert Schedule.objects.count() == 0


def test_an_authorization_header_and_auth_together_are_refused(
    api: APIClient, seed_example: dict[str, Any]
) -> None:
    target = {
        "type": "http",
        "url": "https://b.internal/",
        "headers": {"Authorization": {"secret": "vault:kv/billing/api#token"}},
        "auth": {"type": "oidc"},
    }
    detail, message = error_of(post(api, seed_example, target))
    assert "target.headers.Authorization" in detail and "remove one" in message
    assert Schedule.objects.count() == 0


def test_queue_and_command_targets_must_name_their_audience(
    api: APIClient, seed_example: dict[str, Any]
) -> None:
    queue = {"type": "queue", "routing_key": "billing.jobs", "auth": {"type": "oidc"}}
    detail, message = error_of(post(api, seed_example, queue))
    assert "target.auth.audience" in detail and "is required" in message
    ManagedCommand.objects.create(name="report", argv=["/bin/true"])
    command = {"type": "command", "command": "report", "auth": {"type": "oidc"}}
    detail, message = error_of(post(api, seed_example, command))
    assert "target.auth.audience" in detail and "is required" in message
    assert Schedule.objects.count() == 0

    named = {"type": "oidc", "audience": "billing-consumers"}
    res = post(api, seed_example, queue | {"auth": named})
    assert res.status_code == 201, res.content
    assert res.json()["target"]["auth"] == named
