"""Bad input: a clear error naming the field, never a 500, nothing stored."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from rest_framework.test import APIClient

from dispatch.models import Schedule
from tenants.models import AuditEvent

pytestmark = pytest.mark.django_db


def assert_error(
    res: Any, status: int, field: str | None = None, code: str | None = None
) -> dict[str, Any]:
    assert res.status_code == status, res.content
    err = res.json()["error"]
    assert set(err) == {"code", "message", "detail"}
    if code:
        assert err["code"] == code
    if field:
        assert field in err["detail"], err
        assert field in err["message"], err
    return err


def post(api: APIClient, body: dict[str, Any]) -> Any:
    return api.post("/v1/schedules", body, format="json")


@pytest.mark.parametrize(
    ("change", "field", "fragment"),
    [
        ({"cron": "61 * * * *"}, "cron", ""),
        ({"cron": "0 0 31 2 *"}, "cron", ""),
        ({"cron": "@reboot"}, "cron", "reboot"),
        ({"cron": "* * * *"}, "cron", ""),
        ({"cron": "0 0 * * * 2026"}, "cron", ""),
        ({"timezone": "Mars/Olympus"}, "timezone", ""),
        ({"cron": None}, "cron", "exactly one"),
        ({"run_at": "2030-01-01T00:00:00Z"}, "cron", "exactly one"),
        ({"bogus": 1}, "bogus", "unknown"),
        ({"id": "x"}, "id", "read-only"),
        ({"version": 3}, "version", "read-only"),
        ({"next_run_at": "2030-01-01T00:00:00Z"}, "next_run_at", "read-only"),
        ({"tenant": "outsider"}, "tenant", ""),
        ({"concurrency": "sometimes"}, "concurrency", ""),
        ({"misfire": "whenever"}, "misfire", ""),
        ({"jitter_s": -1}, "jitter_s", ""),
        ({"jitter_s": "lots"}, "jitter_s", ""),
        ({"retry": {"max_attempts": 0}}, "retry.max_attempts", ""),
        ({"retry": {"backoff": "random"}}, "retry.backoff", ""),
        ({"retry": {"foo": 1}}, "retry.foo", "unknown"),
        ({"name": ""}, "name", ""),
        ({"target": {"type": "ftp"}}, "target.type", ""),
        ({"target": "https://x"}, "target", ""),
        ({"target": {"type": "http", "url": "file:///etc/passwd"}}, "target.url", "scheme"),
        (
            {"target": {"type": "http", "url": "https://user:pw@billing.internal/x"}},
            "target.url",
            "credentials",
        ),
        (
            {"target": {"type": "http", "url": "http://127.0.0.1:8000/admin"}},
            "target.url",
            "loopback",
        ),
        (
            {"target": {"type": "http", "url": "http://169.254.169.254/latest/meta-data"}},
            "target.url",
            "metadata",
        ),
        (
            {"target": {"type": "http", "url": "http://[::ffff:127.0.0.1]/"}},
            "target.url",
            "loopback",
        ),
        ({"target": {"type": "http", "url": "http://0x7f.1/"}}, "target.url", "loopback"),
        ({"target": {"type": "http", "url": "http://10.0.0.5/"}}, "target.url", "allow-list"),
        ({"target": {"type": "http", "url": "http://localhost:5432/"}}, "target.url", "loopback"),
        (
            {"target": {"type": "http", "url": "https://billing.internal/x?api_key=abc"}},
            "target.url",
            "credential",
        ),
        (
            {
                "target": {
                    "type": "http",
                    "url": "https://billing.internal/x",
                    "headers": {"Host": "evil"},
                }
            },
            "target.headers.Host",
            "platform",
        ),
        (
            {
                "target": {
                    "type": "http",
                    "url": "https://billing.internal/x",
                    "headers": {"X-Fencing-Token": "1"},
                }
            },
            "target.headers.X-Fencing-Token",
            "platform",
        ),
        (
            {
                "target": {
                    "type": "http",
                    "url": "https://billing.internal/x",
                    "headers": {"Authorization": "Bearer hunter2"},
                }
            },
            "target.headers.Authorization",
            "secret reference",
        ),
        (
            {
                "target": {
                    "type": "http",
                    "url": "https://billing.internal/x",
                    "headers": {"Authorization": {"secret": "vault:kv/outsider/api#token"}},
                }
            },
            "target.headers.Authorization",
            "billing",
        ),
        (
            {"target": {"type": "http", "url": "https://billing.internal/x", "timeout_s": 0}},
            "target.timeout_s",
            "",
        ),
        (
            {"target": {"type": "http", "url": "https://billing.internal/x", "method": "TRACE"}},
            "target.method",
            "",
        ),
        (
            {"target": {"type": "http", "url": "https://billing.internal/x", "extra": 1}},
            "target.extra",
            "unknown",
        ),
        (
            {"target": {"type": "queue", "routing_key": "someone-else.jobs"}},
            "target.routing_key",
            "billing.",
        ),
        ({"target": {"type": "command", "command": "rm"}}, "target.command", "registered"),
        ({"depends_on": ["not-a-uuid"]}, "depends_on", ""),
        ({"depends_on": ["00000000-0000-0000-0000-000000000001"]}, "depends_on", "no such"),
    ],
)
def test_invalid_schedule_is_400_naming_the_field_and_stores_nothing(
    api: APIClient, seed_example: dict[str, Any], change: dict[str, Any], field: str, fragment: str
) -> None:
    body = seed_example | change
    if "run_at" in change and "cron" not in change:
        pass  # both cron and run_at given
    err = assert_error(post(api, body), 400, field)
    assert fragment.lower() in json.dumps(err).lower()
    assert Schedule.objects.count() == 0


def test_every_wrong_field_is_named_at_once(api: APIClient, seed_example: dict[str, Any]) -> None:
    """A bad cron, a bad zone and a negative jitter: one answer naming all three (the
    first alone sent the user back three times), nothing stored."""
    body = seed_example | {"cron": "61 * * * *", "timezone": "Mars/Olympus", "jitter_s": -5}
    err = assert_error(post(api, body), 400, "timezone", code="invalid")
    assert set(err["detail"]) == {"cron", "timezone", "jitter_s"}, err
    for field in ("cron", "timezone", "jitter_s"):
        assert f"{field}: " in err["message"], err["message"]
    assert err["detail"]["jitter_s"] == ["must be a whole number in 0..3600"]
    assert Schedule.objects.count() == 0
    # A field that needs another one is not judged while that one is wrong: no error
    # that would only repeat the first.
    both = seed_example | {"run_at": "2030-01-01T00:00:00Z", "max_runs": 0}
    err = assert_error(post(api, both), 400, "cron")
    assert set(err["detail"]) == {"cron"}, err


def test_secret_reference_in_header_is_accepted_and_stored_as_reference(
    api: APIClient, seed_example: dict[str, Any]
) -> None:
    ref = {"secret": "vault:kv/billing/api#token"}
    body = seed_example | {
        "target": {
            "type": "http",
            "url": "https://billing.internal/x",
            "headers": {"Authorization": ref, "X-Team": "billing"},
        }
    }
    res = post(api, body)
    assert res.status_code == 201, res.content
    assert Schedule.objects.get().target["headers"]["Authorization"] == ref


def test_nul_bytes_are_rejected(api: APIClient, seed_example: dict[str, Any]) -> None:
    raw = json.dumps(seed_example | {"name": "evil\u0000name"})
    res = api.post("/v1/schedules", raw, content_type="application/json")
    assert_error(res, 400, code="invalid")
    assert Schedule.objects.count() == 0


def test_oversized_body_is_413(api: APIClient, seed_example: dict[str, Any]) -> None:
    body = seed_example | {"name": "x" * 100_000}
    res = api.post("/v1/schedules", body, format="json")
    assert_error(res, 413, code="payload_too_large")


def test_wrong_content_type_is_415(api: APIClient) -> None:
    res = api.post("/v1/schedules", "name=x", content_type="application/x-www-form-urlencoded")
    assert_error(res, 415, code="unsupported_media_type")


def test_malformed_json_is_400(api: APIClient) -> None:
    res = api.post("/v1/schedules", "{not json", content_type="application/json")
    assert_error(res, 400, code="malformed")


def test_non_object_json_is_400(api: APIClient) -> None:
    res = api.post("/v1/schedules", "[1,2]", content_type="application/json")
    assert_error(res, 400)


def test_duplicate_name_is_400_naming_name(api: APIClient, seed_example: dict[str, Any]) -> None:
    assert post(api, seed_example).status_code == 201
    assert_error(post(api, seed_example), 400, "name")
    assert Schedule.objects.count() == 1


def test_schedule_quota_is_enforced(
    api: APIClient, seed_example: dict[str, Any], tenant: Any
) -> None:
    tenant.quota.max_schedules = 2
    tenant.quota.save()
    for i in range(2):
        assert post(api, seed_example | {"name": f"q{i}"}).status_code == 201
    assert_error(post(api, seed_example | {"name": "q2"}), 422, code="quota_exceeded")


def test_failed_update_leaves_the_stored_definition_untouched(
    api: APIClient, seed_example: dict[str, Any]
) -> None:
    sid = post(api, seed_example).json()["id"]
    audit_before = AuditEvent.objects.count()
    res = api.patch(
        f"/v1/schedules/{sid}", {"cron": "bogus", "jitter_s": 7}, format="json", HTTP_IF_MATCH='"1"'
    )
    assert_error(res, 400, "cron")
    stored = Schedule.objects.get(pk=sid)
    assert stored.cron == "0 0 * * *" and stored.jitter_s == 120 and stored.version == 1
    assert AuditEvent.objects.count() == audit_before


def test_bad_ids_and_unknown_routes_are_404_json(api: APIClient) -> None:
    for url in [
        "/v1/schedules/not-a-uuid",
        "/v1/schedules/00000000-0000-0000-0000-000000000000",
        "/v1/executions/nope",
    ]:
        assert_error(api.get(url), 404, code="not_found")
    assert_error(api.post("/v1/schedules/00000000-0000-0000-0000-000000000000:trigger"), 404)


def test_bad_if_match_is_400(api: APIClient, seed_example: dict[str, Any]) -> None:
    sid = post(api, seed_example).json()["id"]
    assert_error(
        api.patch(f"/v1/schedules/{sid}", {"jitter_s": 1}, format="json", HTTP_IF_MATCH="abc"),
        400,
        "If-Match",
    )


def test_bad_cursor_and_limit_are_400(api: APIClient) -> None:
    assert_error(api.get("/v1/schedules?cursor=@@@"), 400, "cursor")
    assert_error(api.get("/v1/executions?limit=100000"), 400, "limit")


def test_bulk_endpoints_take_ten_thousand_ids_and_others_keep_their_limit(
    api: APIClient, settings: Any
) -> None:
    """10,000 ids (~400 KB) fit the bulk endpoints' own body limit; the same bytes
    sent to any other endpoint are still a 413."""
    ids = [str(uuid.uuid4()) for _ in range(10_000)]
    body = json.dumps({"action": "cancel", "ids": ids})
    assert settings.API_MAX_BODY_BYTES < len(body) < settings.API_BULK_MAX_BODY_BYTES
    res = api.post("/v1/executions:bulk", body, content_type="application/json")
    assert res.status_code == 202, res.content
    assert res.json()["total"] == 10_000
    res = api.post("/v1/schedules", body, content_type="application/json")
    assert_error(res, 413, code="payload_too_large")
