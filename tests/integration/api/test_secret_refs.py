"""Secret references at save time: the strict grammar (docs/explanation/security.md,
"Secret references"). A reference that could leave the tenant's Vault folder — dot segments,
empty or encoded segments, a mount of the tenant's choosing — is a 400 naming the
field, on create and on update, through the API and the console, and nothing is stored.
(Run time, with a worker and a Vault speaking KV v2: test_worker_secrets.py.)"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from rest_framework.test import APIClient

from dispatch.models import ManagedCommand, Schedule
from tests.support.console_support import build_world, form_data

pytestmark = pytest.mark.django_db

BAD_REFS = [
    "vault:kv/billing/../outsider/db#password",
    "vault:kv/billing/x/../../outsider/db#password",
    "vault:kv/billing/./api#token",
    "vault:kv/billing//api#token",
    "vault:kv/billing/api/#token",
    "vault:kv/billing/api/..#token",
    "vault:kv/billing/%2e%2e/outsider/db#password",
    "vault:kv/billing/%2E%2E/outsider/db#password",
    "vault:kv/billing/..%2foutsider/db#password",
    "vault:kv/billing/api%23x#token",
    "vault:kv/billing/..\\outsider/db#password",
    "vault:kv/billing/.../outsider/db#password",
    "vault:kv/billing/.hidden#token",
    "vault:kv/billing/api.#token",
    "vault:kv/billing/api?version=1#token",
    "vault:kv/billing/\uff41pi#token",  # fullwidth letter
    "vault:kv/billing/api#token\n",
    "vault:kv/billing/api#",
    "vault:kv/billing#token",
    "vault:kv/../outsider/db#password",
    "vault:kv/outsider/db#password",  # someone else's folder, plainly
    "vault:other/billing/db#password",  # a mount of the tenant's choosing
    "vault:KV/billing/api#token",
    "vault:/kv/billing/api#token",
    "env:API__KEY",  # "__" separates tenant and name in the variable
    "env:api_key",
    "env:_API_KEY",
    "env:API_KEY\n",
    "env:" + "A" * 65,
    "file:/etc/passwd",
]


def http_target(ref: str) -> dict[str, Any]:
    return {
        "type": "http",
        "url": "https://billing.internal/x",
        "headers": {"Authorization": {"secret": ref}},
    }


def assert_400(res: Any, field: str) -> str:
    assert res.status_code == 400, res.content
    err = res.json()["error"]
    assert field in err["detail"], err
    assert field in err["message"], err
    return json.dumps(err)


@pytest.mark.parametrize("ref", BAD_REFS)
def test_bad_reference_is_400_naming_the_field_on_create_and_update(
    api: APIClient, seed_example: dict[str, Any], ref: str
) -> None:
    res = api.post("/v1/schedules", seed_example | {"target": http_target(ref)}, format="json")
    assert_400(res, "target.headers.Authorization")
    assert Schedule.objects.count() == 0

    created = api.post("/v1/schedules", seed_example, format="json")
    assert created.status_code == 201, created.content
    sid = created.json()["id"]
    version = created.json()["version"]
    res = api.patch(
        f"/v1/schedules/{sid}",
        {"target": http_target(ref), "version": version},
        format="json",
    )
    assert_400(res, "target.headers.Authorization")
    assert Schedule.objects.get(pk=sid).target["url"] == seed_example["target"]["url"]


def test_messages_say_what_is_wrong(api: APIClient, seed_example: dict[str, Any]) -> None:
    def message(ref: str) -> str:
        body = seed_example | {"target": http_target(ref)}
        return assert_400(
            api.post("/v1/schedules", body, format="json"), "target.headers.Authorization"
        )

    assert "'..'" in message("vault:kv/billing/../outsider/db#password")
    assert "encoded" in message("vault:kv/billing/%2e%2e/outsider/db#password")
    assert "mount" in message("vault:other/billing/db#password")
    assert "kv/billing/" in message("vault:kv/outsider/db#password")


def test_command_env_references_follow_the_same_grammar(
    api: APIClient, seed_example: dict[str, Any]
) -> None:
    ManagedCommand.objects.create(name="report", argv=["/bin/true"])
    target = {
        "type": "command",
        "command": "report",
        "env": {"TOKEN": {"secret": "vault:kv/billing/../outsider/db#password"}},
    }
    res = api.post("/v1/schedules", seed_example | {"target": target}, format="json")
    assert_400(res, "target.env.TOKEN")


@pytest.mark.parametrize(
    "ref",
    [
        "vault:kv/billing/api#token",
        "vault:kv/billing/team.a/db-1/v_2#pass.word",
        "env:API_KEY",
        "env:X",
        "env:DB_PASS_",
    ],
)
def test_good_references_are_stored_as_given(
    api: APIClient, seed_example: dict[str, Any], ref: str
) -> None:
    res = api.post("/v1/schedules", seed_example | {"target": http_target(ref)}, format="json")
    assert res.status_code == 201, res.content
    assert Schedule.objects.get().target["headers"]["Authorization"] == {"secret": ref}


def test_the_mount_is_the_platforms(
    api: APIClient, seed_example: dict[str, Any], settings: Any
) -> None:
    settings.VAULT_MOUNT = "team-secrets"
    res = api.post(
        "/v1/schedules",
        seed_example | {"target": http_target("vault:kv/billing/api#token")},
        format="json",
    )
    assert "vault:team-secrets/" in assert_400(res, "target.headers.Authorization")
    res = api.post(
        "/v1/schedules",
        seed_example | {"target": http_target("vault:team-secrets/billing/api#token")},
        format="json",
    )
    assert res.status_code == 201, res.content


def test_console_shows_a_traversal_inline(db: Any) -> None:
    world = build_world()
    target = json.dumps(http_target("vault:kv/billing/x/../../outsider/db#password"))
    before = Schedule.objects.count()
    response = world.client("operator").post(
        "/schedules/new", form_data(name="sneaky", target=target)
    )
    assert response.status_code == 400
    html = response.content.decode()
    block = re.search(r'<ul class="errorlist" id="id_target_error">(.*?)</ul>', html, re.S)
    assert block is not None, html[:3000]
    assert "target.headers.Authorization: " in block.group(1)
    assert Schedule.objects.count() == before
