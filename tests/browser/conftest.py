"""Browser tests: Playwright (sync API) driving Debian's Chromium against
pytest-django's live server. Skipped, with the reason, when Chromium or
Playwright is not installed (CI installs the `chromium` package in .ci/run)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "test-artifacts" / "screenshots"


def _why_not() -> str | None:
    if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
        return f"Chromium not found at {CHROMIUM} (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install '.[dev]')"
    return None


def pytest_collection_modifyitems(config: Any, items: list[pytest.Item]) -> None:
    reason = _why_not()
    for item in items:
        if "tests/browser/" in str(item.fspath):
            item.add_marker(pytest.mark.browser)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop in the test thread while it is
    # open; the tests' own ORM calls are still plain synchronous code, so allow
    # them — for these modules only: the variable must not leak into other
    # tests or their subprocesses (`check --deploy` rejects it).
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            yield browser
            browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def new_page(browser: Any, live_server: Any) -> Iterator[Any]:
    """`new_page()` opens a fresh browser context (own cookies) in Amsterdam time;
    every page fails the test on a Content-Security-Policy violation."""
    contexts: list[Any] = []
    violations: list[str] = []

    def make(**kwargs: Any) -> Any:
        context = browser.new_context(
            base_url=live_server.url,
            timezone_id=kwargs.pop("timezone_id", "Europe/Amsterdam"),
            viewport=kwargs.pop("viewport", {"width": 1280, "height": 900}),
            **kwargs,
        )
        context.set_default_timeout(15_000)
        contexts.append(context)
        page = context.new_page()
        page.on(
            "console",
            lambda msg: (
                violations.append(msg.text)
                if "Content Security Policy" in msg.text or "Refused to" in msg.text
                else None
            ),
        )
        return page

    yield make
    for context in contexts:
        context.close()
    assert not violations, f"CSP violations: {violations}"


def shot(page: Any, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def login(page: Any, username: str, password: str) -> None:
    page.goto("/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/")
