"""axe-core (the engine browsers' accessibility tools use) finds nothing on any page of
the console, in the light and the dark theme, at desktop and phone widths (issue 35).
axe is injected through the DevTools protocol (Playwright's evaluate), which the page's
Content-Security-Policy does not govern: the page itself stays as strict as served."""

from __future__ import annotations

from typing import Any

import pytest
from axe_playwright_python.sync_playwright import Axe

from tests.browser.conftest import login
from tests.browser.test_console_design import PW, pages
from tests.browser.test_console_design import world as world

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def summary(violations: list[dict[str, Any]]) -> list[str]:
    return [
        f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes'][:3]]}"
        for v in violations
    ]


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize("width", [1440, 390])
def test_no_page_has_an_axe_violation(
    new_page: Any, world: dict[str, Any], theme: str, width: int
) -> None:
    axe = Axe()
    page = new_page(viewport={"width": width, "height": 900}, color_scheme=theme)
    login(page, "dora", PW)
    found = {}
    for name, path, _label in [*pages(world), ("login", "/login/", "")]:
        if name == "login":
            page.context.clear_cookies()
        page.goto(path)
        page.wait_for_load_state("networkidle")
        results = axe.run(page)
        if results.response["violations"]:
            found[path] = summary(results.response["violations"])
    assert not found, found
