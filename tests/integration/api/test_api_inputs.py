"""Total input validation: every hostile input is a 4xx naming its field, never a
500, and nothing is written (core/api/inputs.py, the input guard middleware)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from dispatch.models import Schedule
from tenants.models import AuditEvent, ServiceToken
from tests.support.console_support import World, form_data

pytestmark = pytest.mark.django_db


def assert_error(res: Any, status: int, field: str | None = None) -> dict[str, Any]:
    assert res.status_code == status, res.content
    assert res["Content-Type"].startswith("application/json"), res["Content-Type"]
    err: dict[str, Any] = res.json()["error"]
    assert set(err) == {"code", "message", "detail"}
    if field is not None:
        assert field in err["detail"], err
        assert err["message"].startswith(f"{field}:"), err
    return err


def raw_post(api: APIClient, url: str, text: str) -> Any:
    return api.post(url, text, content_type="application/json")


def schedule_json(seed: dict[str, Any], **replace: str) -> str:
    """The seed example as JSON text, with raw JSON snippets spliced in for some fields."""
    body = dict(seed)
    marks = {}
    for i, (key, snippet) in enumerate(replace.items()):
        marks[f"@@{i}@@"] = snippet
        body[key] = f"@@{i}@@"
    text = json.dumps(body)
    for mark, snippet in marks.items():
        text = text.replace(f'"{mark}"', snippet)
    return text


# --- query parameters -------------------------------------------------------------------


@pytest.mark.parametrize(
    "url,field",
    [
        ("/v1/schedules?search=%00", "search"),
        ("/v1/schedules?kind=cron%00", "kind"),
        ("/v1/executions?status=%00", "status"),
        ("/v1/schedules?cursor=a%00b", "cursor"),
    ],
)
def test_nul_in_a_query_parameter_is_400_json_naming_it(
    api: APIClient, url: str, field: str
) -> None:
    assert_error(api.get(url), 400, field)


def test_nul_in_console_search_and_staff_audit_filters_is_400(world: World) -> None:
    res = world.client("viewer").get("/schedules/?q=%00")
    assert res.status_code == 400 and b"q: contains a NUL" in res.content
    staff = world.client("staff")
    for name in ("actor", "tenant", "action", "since"):
        res = staff.get(f"/ops/audit?{name}=x%00y")
        assert res.status_code == 400, (name, res.status_code)
        assert f"{name}: contains a NUL".encode() in res.content


def test_nul_in_a_console_form_field_is_400_and_nothing_is_written(world: World) -> None:
    before = ServiceToken.objects.count()
    res = world.client("admin").post("/tokens/", {"name": "ci\x00", "role": "viewer"})
    assert res.status_code == 400 and b"name: contains a NUL" in res.content
    assert ServiceToken.objects.count() == before


# --- JSON bodies ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "snippet,field",
    [
        ('"evil\\u0000name"', "name"),
        ('"\\ud800"', "name"),
        ('"a\\udc00b"', "name"),
    ],
)
def test_unstorable_text_in_json_is_400_naming_the_field(
    api: APIClient, seed_example: dict[str, Any], snippet: str, field: str
) -> None:
    assert_error(
        raw_post(api, "/v1/schedules", schedule_json(seed_example, name=snippet)), 400, field
    )
    assert Schedule.objects.count() == 0


def test_unstorable_text_deep_in_a_target_names_its_path(
    api: APIClient, seed_example: dict[str, Any]
) -> None:
    target = '{"type": "http", "url": "https://billing.internal/x", "headers": {"X-A": "\\ud83d"}}'
    err = assert_error(
        raw_post(api, "/v1/schedules", schedule_json(seed_example, target=target)),
        400,
        "target.headers.X-A",
    )
    assert "surrogate" in err["message"]
    key = '{"type": "http", "url": "https://billing.internal/x", "headers": {"X-\\u0000": "1"}}'
    assert_error(
        raw_post(api, "/v1/schedules", schedule_json(seed_example, target=key)),
        400,
        "target.headers.X-\x00",
    )
    assert Schedule.objects.count() == 0


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_numbers_are_400(
    api: APIClient, seed_example: dict[str, Any], number: str
) -> None:
    res = raw_post(api, "/v1/schedules", schedule_json(seed_example, jitter_s=number))
    assert_error(res, 400)
    assert Schedule.objects.count() == 0


def test_json_nested_30000_deep_is_400_not_a_recursion_error(
    api: APIClient, seed_example: dict[str, Any]
) -> None:
    deep = "[" * 30000 + "]" * 30000
    err = assert_error(
        raw_post(api, "/v1/schedules", schedule_json(seed_example, target=deep)), 400
    )
    assert "nested deeper than 32" in err["message"]
    # Right at the limit is fine as far as parsing goes (the target is then checked).
    ok_depth = "[" * 30 + "]" * 30
    err = assert_error(
        raw_post(api, "/v1/schedules", schedule_json(seed_example, target=ok_depth)),
        400,
        "target",
    )
    assert Schedule.objects.count() == 0


def test_token_name_with_nul_is_400_naming_name(api: APIClient) -> None:
    assert_error(
        raw_post(api, "/v1/tokens", '{"name": "ci\\u0000", "role": "viewer"}'), 400, "name"
    )


# --- instants ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "9999-12-31T23:59:00-14:00",
        "9999-12-31T00:00:00Z",
        "1899-01-01T00:00:00Z",
        "0001-01-01T00:00:00+01:00",
    ],
)
def test_instants_outside_the_range_are_400_naming_the_field(
    api: APIClient, seed_example: dict[str, Any], value: str
) -> None:
    body = {"target": seed_example["target"], "run_at": value}
    err = assert_error(api.post("/v1/jobs", body, format="json"), 400, "run_at")
    assert "1970-01-01T00:00:00Z" in err["message"]
    assert_error(
        api.post("/v1/tokens", {"name": "t", "role": "viewer", "expires_at": value}, format="json"),
        400,
        "expires_at",
    )
    sid = api.post("/v1/schedules", seed_example, format="json").json()["id"]
    assert_error(api.get(f"/v1/schedules/{sid}/preview?from={value}"), 400, "from")
    assert_error(
        api.post(f"/v1/schedules/{sid}:pause", {"until": value}, format="json"), 400, "until"
    )
    assert_error(api.get(f"/v1/executions?from={value}"), 400, "from")
    assert Schedule.objects.count() == 1


def test_preview_near_the_end_of_the_range_answers(
    api: APIClient, seed_example: dict[str, Any]
) -> None:
    sid = api.post("/v1/schedules", seed_example | {"cron": "@yearly"}, format="json").json()["id"]
    res = api.get(f"/v1/schedules/{sid}/preview?from=8999-12-31T23:00:00Z&count=1000")
    # Past the instants the API takes (the preview's window would leave datetime's range).
    assert res.status_code == 400, res.content
    assert res.json()["error"]["detail"] == {
        "from": ["scheduled_for must be between the years 1900 and 9000"]
    }
    assert res["Content-Type"].startswith("application/json")


def test_naive_run_at_is_400_naming_run_at(api: APIClient, seed_example: dict[str, Any]) -> None:
    body = {"target": seed_example["target"], "run_at": "2026-12-01T10:00:00"}
    err = assert_error(api.post("/v1/jobs", body, format="json"), 400, "run_at")
    assert "offset" in err["message"]
    once = {k: v for k, v in seed_example.items() if k != "cron"} | {
        "run_at": "2026-12-01T10:00:00"
    }
    assert_error(api.post("/v1/schedules", once, format="json"), 400, "run_at")
    assert Schedule.objects.count() == 0


def test_console_token_expiry_out_of_range_is_inline(world: World) -> None:
    before = ServiceToken.objects.count()
    res = world.client("admin").post(
        "/tokens/", {"name": "ci", "role": "viewer", "expires_at": "9999-12-31T23:59-14:00"}
    )
    assert res.status_code == 400
    assert b"expires_at: is not a date and time in range" in res.content
    assert ServiceToken.objects.count() == before


# --- console JSON -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "target,fragment",
    [
        ('{"type": "http", "url": "https://billing.internal/\\u0000"}', "NUL"),
        ('{"type": "http", "url": "https://billing.internal/\\ud800"}', "surrogate"),
        (
            '{"type": "http", "url": "https://billing.internal/", "timeout_s": NaN}',
            "not valid JSON",
        ),
        (
            '{"type": "http", "url": "https://billing.internal/", "timeout_s": Infinity}',
            "not valid JSON",
        ),
        (
            '{"type": "http", "url": "https://billing.internal/", "timeout_s": 1e999}',
            "out of range",
        ),
        ("[" * 5000 + "]" * 5000, "nested deeper"),
    ],
)
def test_console_target_json_is_checked_like_the_api(
    world: World, target: str, fragment: str
) -> None:
    before = Schedule.objects.count()
    res = world.client("operator").post("/schedules/new", form_data(name="hostile", target=target))
    assert res.status_code == 400
    assert fragment in res.content.decode()
    assert Schedule.objects.count() == before


# --- headers, ETags, keys ---------------------------------------------------------------------


def test_if_match_with_5000_digits_is_400(api: APIClient, seed_example: dict[str, Any]) -> None:
    sid = api.post("/v1/schedules", seed_example, format="json").json()["id"]
    res = api.patch(
        f"/v1/schedules/{sid}", {"jitter_s": 1}, format="json", HTTP_IF_MATCH='"' + "9" * 5000 + '"'
    )
    assert_error(res, 400, "If-Match")
    big_version = api.patch(
        f"/v1/schedules/{sid}", {"jitter_s": 1, "version": 10**40}, format="json"
    )
    assert_error(big_version, 400, "version")
    assert Schedule.objects.get(pk=sid).version == 1


@pytest.mark.parametrize("value", ["Zürich ✓", "日本"])
def test_header_values_that_are_not_latin1_are_rejected_at_save(
    api: APIClient, seed_example: dict[str, Any], value: str
) -> None:
    target = seed_example["target"] | {"headers": {"X-City": value}}
    res = api.post("/v1/schedules", seed_example | {"target": target}, format="json")
    assert_error(res, 400, "target.headers.X-City")
    assert Schedule.objects.count() == 0


def test_latin1_header_values_are_accepted(api: APIClient, seed_example: dict[str, Any]) -> None:
    target = seed_example["target"] | {"headers": {"X-City": "Zürich"}}
    res = api.post("/v1/schedules", seed_example | {"target": target}, format="json")
    assert res.status_code == 201, res.content


def test_non_ascii_url_path_is_rejected_at_save(
    api: APIClient, seed_example: dict[str, Any]
) -> None:
    target = seed_example["target"] | {"url": "https://billing.internal/jobs/zürich"}
    assert_error(
        api.post("/v1/schedules", seed_example | {"target": target}, format="json"),
        400,
        "target.url",
    )


def test_long_idempotency_key_gets_a_job_not_an_error_about_name(
    api: APIClient, seed_example: dict[str, Any]
) -> None:
    key = "k" * 200
    res = api.post(
        "/v1/jobs", {"target": seed_example["target"], "idempotency_key": key}, format="json"
    )
    assert res.status_code == 201, res.content
    assert res.json()["idempotency_key"] == key
    again = api.post(
        "/v1/jobs", {"target": seed_example["target"], "idempotency_key": key}, format="json"
    )
    assert again.status_code == 200 and again.json()["id"] == res.json()["id"]
    too_long = api.post(
        "/v1/jobs", {"target": seed_example["target"], "idempotency_key": "k" * 201}, format="json"
    )
    assert_error(too_long, 400, "idempotency_key")


def test_control_characters_in_idempotency_key_are_400_naming_it(
    api: APIClient, seed_example: dict[str, Any]
) -> None:
    body = {"target": seed_example["target"], "idempotency_key": "a\x01b"}
    assert_error(api.post("/v1/jobs", body, format="json"), 400, "idempotency_key")
    assert Schedule.objects.count() == 0


# --- 428 --------------------------------------------------------------------------------------


def test_patch_without_if_match_or_version_is_428_and_changes_nothing(
    api: APIClient, seed_example: dict[str, Any]
) -> None:
    sid = api.post("/v1/schedules", seed_example, format="json").json()["id"]
    audit_before = AuditEvent.objects.count()
    res = api.patch(f"/v1/schedules/{sid}", {"jitter_s": 7}, format="json")
    err = assert_error(res, 428, "If-Match")
    assert err["code"] == "precondition_required"
    stored = Schedule.objects.get(pk=sid)
    assert stored.jitter_s == 120 and stored.version == 1
    assert AuditEvent.objects.count() == audit_before
    by_header = api.patch(
        f"/v1/schedules/{sid}", {"jitter_s": 7}, format="json", HTTP_IF_MATCH='"1"'
    )
    assert by_header.status_code == 200 and by_header.json()["version"] == 2
    by_body = api.patch(f"/v1/schedules/{sid}", {"jitter_s": 8, "version": 2}, format="json")
    assert by_body.status_code == 200 and by_body.json()["version"] == 3


def test_console_edit_form_carries_the_version_and_needs_it(world: World) -> None:
    sid = world.schedule.id
    client = world.client("operator")
    page = client.get(f"/schedules/{sid}/edit").content.decode()
    assert f'name="version" value="{world.schedule.version}"' in page
    missing = client.post(f"/schedules/{sid}/edit", form_data(name="nightly", jitter_s="5"))
    assert missing.status_code == 400 and b"version: missing" in missing.content
    assert Schedule.objects.get(pk=sid).jitter_s == world.schedule.jitter_s


@pytest.mark.parametrize(
    "url,field",
    [
        ("/v1/executions?to=", "to"),
        ("/v1/executions?from=", "from"),
        ("/v1/executions?schedule_id=", "schedule_id"),
        ("/v1/schedules?kind=", "kind"),
        ("/v1/schedules?limit=", "limit"),
        ("/v1/schedules?paused=", "paused"),
    ],
)
def test_a_typed_query_parameter_given_empty_is_400_not_ignored(
    api: APIClient, url: str, field: str
) -> None:
    # Found by schemathesis: "" is not a date-time, uuid, enum value or integer.
    assert_error(api.get(url), 400, field)


def test_unknown_query_parameters_are_400_naming_them(api: APIClient) -> None:
    # Found by schemathesis: `?staus=failed` silently returned everything.
    assert_error(api.get("/v1/executions?staus=failed"), 400, "staus")
    assert_error(api.get("/v1/tokens?limit=3"), 400, "limit")
    assert_error(api.post("/v1/jobs?limit=3", {}, format="json"), 400, "limit")
