"""HTTP target definitions at save time: credential-looking headers and query
parameters must not carry literal values, and IP addresses in look-alike spellings
are refused when saved, not only when called. Each is a 400 naming the field."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from dispatch.models import Schedule

pytestmark = pytest.mark.django_db
URL = "https://billing.internal/hook"


def post(api: APIClient, seed_example: dict[str, Any], target: dict[str, Any]) -> Any:
    return api.post("/v1/schedules", seed_example | {"target": target}, format="json")


def assert_400(res: Any, field: str) -> str:
    assert res.status_code == 400, res.content
    err = res.json()["error"]
    assert field in err["detail"], err
    assert field in err["message"], err
    return str(err["message"])


@pytest.mark.parametrize(
    "header",
    [
        "X-Auth",
        "X-Auth-User",
        "X-Key",
        "X-Hub-Signature",
        "X-Hub-Signature-256",
        "Proxy-Authorization",
        "X-Amz-Security-Token",
        "X-JWT",
        "X-Csrf-Token",
        "X-Private-Key",
        "PrivateKey",
        "X-Client-Secret",
        "X-Passphrase",
        "X-Pwd",
        "Ocp-Apim-Subscription-Key",
        "X-Hmac",
        "Api-Key",
        "Cookie",
    ],
)
def test_credential_headers_need_a_secret_reference(
    api: APIClient, seed_example: dict[str, Any], header: str
) -> None:
    res = post(api, seed_example, {"type": "http", "url": URL, "headers": {header: "hunter2"}})
    assert "secret reference" in assert_400(res, f"target.headers.{header}")
    assert Schedule.objects.count() == 0
    # The same header as a reference is fine.
    ref = {"secret": "vault:kv/billing/api#token"}
    res = post(api, seed_example, {"type": "http", "url": URL, "headers": {header: ref}})
    assert res.status_code == 201, res.content


@pytest.mark.parametrize(
    "param",
    [
        "private_key",
        "privateKey",
        "jwt",
        "X-Amz-Signature",
        "X-Amz-Credential",
        "X-Amz-Security-Token",
        "client_secret",
        "access_token",
        "sessionid",
        "sig",
        "key",
        "api-key",
        "auth",
        "pwd",
        "passphrase",
        "hmac",
        "subscription-key",
    ],
)
def test_credential_query_parameters_are_refused(
    api: APIClient, seed_example: dict[str, Any], param: str
) -> None:
    res = post(api, seed_example, {"type": "http", "url": f"{URL}?a=1&{param}=abc"})
    assert "credential" in assert_400(res, "target.url")
    assert Schedule.objects.count() == 0


def test_ordinary_headers_and_parameters_are_accepted(
    api: APIClient, seed_example: dict[str, Any]
) -> None:
    headers = {
        "X-Team": "billing",
        "X-Request-Source": "scheduler",
        "Accept": "application/json",
        "Idempotency-Key": "nightly",
        "X-Author": "ops",
    }
    url = f"{URL}?page=2&sort_key=name&keyword=invoice&monkey=1&region=eu"
    res = post(api, seed_example, {"type": "http", "url": url, "headers": headers})
    assert res.status_code == 201, res.content


@pytest.mark.parametrize(
    "host",
    [
        "\uff11\uff12\uff17.\uff10.\uff10.\uff11",
        "127\u30020\u30020\u30021",
        "127\uff0e0\uff0e0\uff0e1",
        "127.0.0.1.",
        "\uff18.\uff18.\uff18.\uff18",
    ],
)
def test_ip_look_alikes_are_refused_when_saved(
    api: APIClient, seed_example: dict[str, Any], host: str
) -> None:
    res = post(api, seed_example, {"type": "http", "url": f"http://{host}/hook"})
    assert "look-alike" in assert_400(res, "target.url")
    assert Schedule.objects.count() == 0


@pytest.mark.parametrize("host", ["[::ffff:0:127.0.0.1]", "[::ffff:0:a9fe:a9fe]", "[2001:2::1]"])
def test_siit_and_benchmarking_addresses_are_refused_when_saved(
    api: APIClient, seed_example: dict[str, Any], host: str
) -> None:
    res = post(api, seed_example, {"type": "http", "url": f"http://{host}/hook"})
    assert_400(res, "target.url")
