"""The API answers what its document says: JSON errors everywhere under /v1/,
one route per action, and an OpenAPI document that describes the real answers."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from tenants.models import Tenant

pytestmark = pytest.mark.django_db


def assert_json_error(res: Any, status: int, code: str | None = None) -> None:
    assert res.status_code == status, (res.status_code, res.content[:300])
    assert res["Content-Type"].startswith("application/json"), res["Content-Type"]
    err = res.json()["error"]
    assert set(err) == {"code", "message", "detail"}
    if code:
        assert err["code"] == code, err


@pytest.mark.parametrize(
    "method,url",
    [
        ("get", "/v1/nope"),
        ("get", "/v1/schedules/"),
        ("post", "/v1/schedules/"),
        ("get", "/v1/executions/"),
        ("get", "/v1/schedules/abc:def"),
        ("get", "/v1/schedules/abc:def/preview"),
        ("post", "/v1/schedules/00000000-0000-0000-0000-000000000000:explode"),
        ("post", "/v1/schedules/00000000-0000-0000-0000-000000000000:pauseX"),
        ("post", "/v1/schedules/00000000-0000-0000-0000-000000000000:resume:pause"),
        ("get", "/v1/tokens/"),
        ("get", "/v1/tokens/x"),
        ("get", "/v1/"),
    ],
)
def test_unknown_api_paths_are_404_json(api: APIClient, method: str, url: str) -> None:
    assert_json_error(getattr(api, method)(url), 404, "not_found")


@pytest.mark.parametrize(
    ("url", "says"),
    [
        (
            "/v1/v1/schedules",
            "no such API path: /v1/v1/schedules (the base URL already ends in /v1",
        ),
        ("/v1/schedules/", "no such API path: /v1/schedules/ (API paths have no trailing slash)"),
        ("/v1/nothing", "no such API path: /v1/nothing"),
    ],
)
def test_an_unknown_api_path_says_what_is_wrong_with_it(
    api: APIClient, url: str, says: str
) -> None:
    message = api.get(url).json()["error"]["message"]
    assert message.startswith(says), message
    if url == "/v1/nothing":  # nothing else to blame: no hint that is not true
        assert message == says


def test_unauthenticated_unknown_path_is_404_json_too(client: Client) -> None:
    assert_json_error(client.get("/v1/does-not-exist"), 404, "not_found")


def test_a_client_error_is_not_a_warning_in_the_log(
    client: Client, api: APIClient, caplog: pytest.LogCaptureFixture
) -> None:
    """What `make run` shows (WARNING): no line for a 404 or a 400 — the client's
    mistakes; at INFO they are there."""
    with caplog.at_level(logging.WARNING):
        assert client.get("/no-such-page/").status_code == 404
        assert api.get("/v1/schedules", {"limit": "many"}).status_code == 400
    assert [r for r in caplog.records if r.name.startswith("django.")] == []
    caplog.clear()
    with caplog.at_level(logging.INFO):
        assert client.get("/no-such-page/").status_code == 404
    shown = [(r.name, r.levelname) for r in caplog.records if r.name == "django.request"]
    assert shown == [("django.request", "INFO")]


def test_the_favicon_is_the_consoles_icon_not_a_404(client: Client) -> None:
    answer = client.get("/favicon.ico")
    assert answer.status_code == 301 and answer["Location"].endswith(".svg")
    assert 'rel="icon"' in client.get("/login/").content.decode()


def test_console_404_stays_a_page(client: Client) -> None:
    res = client.get("/no-such-page/")
    assert res.status_code == 404 and res["Content-Type"].startswith("text/html")


def test_bad_host_is_400_json(api: APIClient) -> None:
    res = api.get("/v1/schedules", HTTP_HOST="evil.example")
    assert_json_error(res, 400, "bad_request")
    assert "Host" in res.json()["error"]["message"]


def test_signing_key_rotates_only_on_the_rotate_path(api: APIClient, tenant: Tenant) -> None:
    key = api.get("/v1/signing-key").json()["signing_key"]
    assert_json_error(api.post("/v1/signing-key"), 405, "method_not_allowed")
    assert_json_error(api.get("/v1/signing-key:rotate"), 405, "method_not_allowed")
    tenant.refresh_from_db()
    assert tenant.signing_key == key
    rotated = api.post("/v1/signing-key:rotate")
    assert rotated.status_code == 200 and rotated.json()["signing_key"] != key


def test_resume_and_trigger_refuse_a_pause_body(
    api: APIClient, seed_example: dict[str, Any]
) -> None:
    sid = api.post("/v1/schedules", seed_example, format="json").json()["id"]
    for action in ("resume", "trigger"):
        res = api.post(f"/v1/schedules/{sid}:{action}", {"reason": "x"}, format="json")
        assert_json_error(res, 400)
        assert "reason" in res.json()["error"]["detail"]


@pytest.fixture
def doc(client: Client) -> dict[str, Any]:
    res = client.get("/v1/openapi.json")
    assert res.status_code == 200
    body: dict[str, Any] = res.json()
    return body


def _schema(doc: dict[str, Any], ref_or_schema: dict[str, Any]) -> dict[str, Any]:
    ref = ref_or_schema.get("$ref")
    if ref:
        found: dict[str, Any] = doc["components"]["schemas"][ref.rsplit("/", 1)[1]]
        return found
    return ref_or_schema


def test_openapi_lists_are_documented_as_their_envelopes(doc: dict[str, Any]) -> None:
    for path in ("/v1/schedules", "/v1/executions"):
        ok = doc["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]
        schema = _schema(doc, ok["schema"])
        assert schema["type"] == "object", (path, schema)
        assert {"results", "next_cursor"} <= set(schema["properties"])
        assert schema["properties"]["results"]["type"] == "array"
    tokens = doc["paths"]["/v1/tokens"]["get"]["responses"]["200"]["content"]["application/json"]
    assert "results" in _schema(doc, tokens["schema"])["properties"]


def test_openapi_documents_error_answers(doc: dict[str, Any]) -> None:
    error = doc["components"]["schemas"]["Error"]
    assert error["properties"]["error"]["required"] == ["code", "message", "detail"]
    for path, operations in doc["paths"].items():
        for method, op in operations.items():
            codes = set(op["responses"])
            assert {"400", "401", "403", "429"} <= codes, (method, path, codes)
            if "{" in path:
                assert "404" in codes, (method, path)
    patch = doc["paths"]["/v1/schedules/{id}"]["patch"]["responses"]
    assert {"409", "428"} <= set(patch)
    assert "422" in doc["paths"]["/v1/schedules"]["post"]["responses"]


def test_openapi_actions_are_exact_paths_with_their_own_bodies(doc: dict[str, Any]) -> None:
    paths = doc["paths"]
    assert "/v1/schedules/{id}:{action}" not in paths
    assert "requestBody" in paths["/v1/schedules/{id}:pause"]["post"]
    for action in ("resume", "trigger"):
        assert "requestBody" not in paths[f"/v1/schedules/{{id}}:{action}"]["post"], action
    assert "post" not in paths["/v1/signing-key"]
    assert set(paths["/v1/signing-key:rotate"]) == {"post"}


def test_openapi_states_the_constraints(doc: dict[str, Any]) -> None:
    params = {p["name"]: p for p in doc["paths"]["/v1/schedules"]["get"]["parameters"]}
    assert params["limit"]["schema"]["minimum"] == 1
    assert params["limit"]["schema"]["maximum"] == 500
    ids = {p["name"]: p for p in doc["paths"]["/v1/schedules/{id}"]["get"]["parameters"]}
    assert ids["id"]["schema"]["format"] == "uuid"
    schedule_in = doc["components"]["schemas"]["ScheduleInRequest"]["properties"]
    assert "5-field cron" in schedule_in["cron"]["description"]
    assert schedule_in["target"]["properties"]["type"]["enum"] == ["http", "queue", "command"]
    assert "1970-01-01" in schedule_in["run_at"]["description"]
    token_in = doc["components"]["schemas"]["TokenInRequest"]["properties"]
    assert "future" in token_in["expires_at"]["description"]
