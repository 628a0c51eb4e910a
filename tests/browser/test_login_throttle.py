"""The console's log-in form says, inline, when failed attempts locked a username."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.conftest import shot
from tests.support.console_support import user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PW = "browser-throttle-pw-1"


def test_locked_username_gets_an_inline_message(new_page: Any, settings: Any) -> None:
    settings.LOGIN_FAILURES_PER_USER = "3/15min"
    user("alice", password=PW)
    page = new_page()

    def log_in(password: str) -> str:
        page.goto("/login/")
        page.get_by_label("Username").fill("alice")
        page.get_by_label("Password").fill(password)
        page.get_by_role("button", name="Log in").click()
        page.wait_for_load_state()
        return str(page.get_by_role("alert").inner_text())

    for i in range(3):
        assert log_in(f"wrong-{i}") == "Your username and password didn't match."
    assert log_in(PW) == "Too many failed log-in attempts. Try again in 15 minutes."
    assert page.url.endswith("/login/"), "not logged in"
    shot(page, "login-throttled")
