"""The API docs page (Swagger UI) works in Chromium under its Content-Security-Policy."""

from __future__ import annotations

import urllib.request
from typing import Any
from urllib.parse import urljoin, urlparse

import pytest

from tests.browser.conftest import shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_swagger_ui_renders_under_a_csp_with_same_origin_scripts(
    new_page: Any, live_server: Any
) -> None:
    with urllib.request.urlopen(f"{live_server.url}/v1/docs", timeout=10) as res:
        policy = res.headers["Content-Security-Policy"]
        html = res.read().decode()
    assert (
        policy
        and "script-src 'self'" in policy
        and "unsafe-inline" not in policy.split("script-src", 1)[1].split(";", 1)[0]
    )
    page = new_page()  # fails the test on any CSP violation report in the console
    scripts: list[str] = []
    page.on("request", lambda r: scripts.append(r.url) if r.resource_type == "script" else None)
    page.goto("/v1/docs")
    # Swagger UI fetched the OpenAPI document and rendered its title and operations.
    page.locator(".swagger-ui .info .title").filter(has_text="Scheduler platform API").wait_for()
    page.locator(".opblock").first.wait_for()
    shot(page, "api-docs")
    origin = urlparse(live_server.url).netloc
    assert scripts and all(urlparse(urljoin(live_server.url, s)).netloc == origin for s in scripts)
    assert "<script>" not in html, "no inline script: the init script is a same-origin file"
