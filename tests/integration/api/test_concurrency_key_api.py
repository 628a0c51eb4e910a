"""Keyed concurrency in the API: the definition is checked and rendered at save time
(400 naming `concurrency_key.<part>`, nothing stored), shown back without the rendered
key, accepted by jobs, and merged field by field on PATCH."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from dispatch.models import Schedule

pytestmark = pytest.mark.django_db

TARGET = {"type": "http", "url": "https://billing.internal/x", "body": {"customer_id": 42}}


@pytest.mark.parametrize(
    ("value", "field", "fragment"),
    [
        ("customer-42", "concurrency_key", "object"),
        ({"limit": 1}, "concurrency_key.key", "required"),
        ({"key": ""}, "concurrency_key.key", "required"),
        ({"key": "c-{target.body.nope}"}, "concurrency_key.key", "target.body.nope"),
        ({"key": "c-{target.body}"}, "concurrency_key.key", "not a text"),
        ({"key": "c-{secret}"}, "concurrency_key.key", "unknown field"),
        ({"key": "c-{0}"}, "concurrency_key.key", "dotted field path"),
        ({"key": "c-{name!r}"}, "concurrency_key.key", "dotted field path"),
        ({"key": "c-{name:>300}"}, "concurrency_key.key", "dotted field path"),
        ({"key": "c-{name"}, "concurrency_key.key", "brace"),
        ({"key": "x" * 201}, "concurrency_key.key", "200"),
        ({"key": "c", "limit": 0}, "concurrency_key.limit", "1..1000"),
        ({"key": "c", "limit": True}, "concurrency_key.limit", "1..1000"),
        ({"key": "c", "limit": "1"}, "concurrency_key.limit", "1..1000"),
        ({"key": "c", "on_conflict": "wait"}, "concurrency_key.on_conflict", "queue"),
        ({"key": "c", "scope": "global"}, "concurrency_key.scope", "unknown"),
    ],
)
def test_bad_concurrency_key_is_400_naming_the_part(
    api: APIClient, seed_example: dict[str, Any], value: Any, field: str, fragment: str
) -> None:
    body = seed_example | {"target": TARGET, "concurrency_key": value}
    res = api.post("/v1/schedules", body, format="json")
    assert res.status_code == 400, res.content
    err = res.json()["error"]
    assert field in err["detail"], err
    assert fragment.lower() in json.dumps(err).lower(), err
    assert Schedule.objects.count() == 0


def test_a_key_rendering_too_long_is_400(api: APIClient, seed_example: dict[str, Any]) -> None:
    target = TARGET | {"body": {"customer_id": "9" * 190}}
    body = seed_example | {
        "target": target,
        "concurrency_key": {"key": "customer-{target.body.customer_id}-x"},
    }
    res = api.post("/v1/schedules", body, format="json")
    assert res.status_code == 400, res.content
    assert "renders to 201 characters" in res.json()["error"]["message"]
    assert Schedule.objects.count() == 0


def test_the_key_is_rendered_at_save_and_shown_as_defined(
    api: APIClient, seed_example: dict[str, Any]
) -> None:
    body = seed_example | {
        "target": TARGET,
        "concurrency_key": {"key": "customer-{target.body.customer_id}", "on_conflict": "skip"},
    }
    res = api.post("/v1/schedules", body, format="json")
    assert res.status_code == 201, res.content
    out = res.json()
    assert out["concurrency_key"] == {
        "key": "customer-{target.body.customer_id}",
        "limit": 1,
        "on_conflict": "skip",
    }
    stored = Schedule.objects.get(pk=out["id"]).concurrency_key
    assert stored["rendered"] == "customer-42"
    # PATCH the target: the key is rendered again from the new definition.
    res = api.patch(
        f"/v1/schedules/{out['id']}",
        {"version": out["version"], "target": TARGET | {"body": {"customer_id": 7}}},
        format="json",
    )
    assert res.status_code == 200, res.content
    assert Schedule.objects.get(pk=out["id"]).concurrency_key["rendered"] == "customer-7"
    # A target the template no longer fits: 400, nothing changed.
    res = api.patch(
        f"/v1/schedules/{out['id']}",
        {"version": out["version"] + 1, "target": TARGET | {"body": {"other": 1}}},
        format="json",
    )
    assert res.status_code == 400, res.content
    assert "concurrency_key.key" in res.json()["error"]["detail"]
    assert Schedule.objects.get(pk=out["id"]).concurrency_key["rendered"] == "customer-7"
    # null removes it.
    res = api.patch(
        f"/v1/schedules/{out['id']}",
        {"version": out["version"] + 1, "concurrency_key": None},
        format="json",
    )
    assert res.status_code == 200, res.content
    assert res.json()["concurrency_key"] is None
    assert Schedule.objects.get(pk=out["id"]).concurrency_key is None


def test_jobs_take_a_key_single_and_batch(api: APIClient) -> None:
    job = {
        "target": TARGET,
        "run_at": "2030-01-01T00:00:00Z",
        "concurrency_key": {"key": "{name}/{target.body.customer_id}", "limit": 2},
    }
    res = api.post("/v1/jobs", job | {"name": "one"}, format="json")
    assert res.status_code == 201, res.content
    assert res.json()["concurrency_key"]["limit"] == 2
    res = api.post(
        "/v1/jobs:batch",
        {
            "jobs": [
                job | {"name": "two", "idempotency_key": "k2"},
                job | {"name": "three", "idempotency_key": "k3"},
            ]
        },
        format="json",
    )
    assert res.status_code == 200, res.content
    assert [r["status"] for r in res.json()["results"]] == [201, 201]
    rendered = dict(Schedule.objects.values_list("name", "concurrency_key__rendered"))
    assert rendered == {"one": "one/42", "two": "two/42", "three": "three/42"}
    bad = {
        "jobs": [
            job | {"name": "four", "idempotency_key": "k4", "concurrency_key": {"key": "{args.x}"}}
        ]
    }
    res = api.post("/v1/jobs:batch", bad, format="json")
    assert "concurrency_key.key" in json.dumps(res.json()), res.content
    assert not Schedule.objects.filter(name="four").exists()
