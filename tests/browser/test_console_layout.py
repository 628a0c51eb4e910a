"""Layout in a real browser: a 200-character name (allowed) wraps instead of
widening the pages, and the schedule form shows only the fields of the kind
and misfire policy chosen — with CSS alone, so also without JavaScript."""

from __future__ import annotations

from typing import Any

import pytest

from dispatch import services
from tenants import services as tenant_services
from tenants.roles import Role
from tests.browser.conftest import login, shot
from tests.support.console_support import TARGET, principal_of, user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PW = "browser-pw-layout-1"
WIDTH = 1280


@pytest.fixture
def alice(transactional_db: Any) -> Any:
    tenant = tenant_services.tenant_create(slug="billing", name="Billing")
    u = user("alice", password=PW)
    tenant_services.membership_set(tenant=tenant, user=u, role=Role.ADMIN, actor=None)
    return principal_of(u, tenant, Role.ADMIN)


def page_width(page: Any) -> int:
    return int(page.evaluate("document.documentElement.scrollWidth"))


def test_a_200_character_name_wraps_on_every_page(new_page: Any, alice: Any) -> None:
    name = "n" * 200
    s = services.schedule_create(
        actor=alice, data={"name": name, "cron": "* * * * *", "target": TARGET}
    )
    page = new_page(viewport={"width": WIDTH, "height": 900})
    login(page, "alice", PW)
    for url in (
        "/",
        "/schedules/",
        f"/schedules/{s.id}/",
        f"/schedules/{s.id}/edit",
        f"/explain?schedule={s.id}&at=2026-01-05T00:00",
        "/upcoming",
    ):
        page.goto(url)
        assert page_width(page) <= WIDTH, url
    page.goto(f"/schedules/{s.id}/")
    shot(page, "22-long-name-wraps")


@pytest.mark.parametrize("js", [True, False])
def test_the_form_shows_the_fields_of_the_kind_and_policy_chosen(
    new_page: Any, alice: Any, js: bool
) -> None:
    page = new_page(java_script_enabled=js)
    login(page, "alice", PW)
    page.goto("/schedules/new")
    cron, run_at = page.get_by_label("Cron"), page.get_by_label("Run at")
    limit = page.get_by_label("Catch-up limit")
    assert cron.is_visible() and not run_at.is_visible() and not limit.is_visible()
    assert page.get_by_label("Timeout (s)").is_visible()
    page.get_by_label("Kind").select_option("once")
    assert run_at.is_visible() and not cron.is_visible()
    page.locator("#id_misfire").select_option("catch_up")
    assert limit.is_visible()
    if not js:
        # Submitted without JS: a one-off ignores the cron left in the hidden field.
        page.get_by_label("Name").fill("once-nojs")
        run_at.fill("2031-03-01T10:00:00")
        page.get_by_role("button", name="Create schedule").click()
        page.get_by_role("heading", name="once-nojs").wait_for()


# Every word-sized text of a table (a zone, a state, a date's parts, a header) on one
# line: the number of line boxes each single-token text node of a cell takes.
BROKEN_WORDS = """() => {
  const broken = [];
  for (const cell of document.querySelectorAll("main table th, main table td")) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const word of node.textContent.split(/\\s+/)) {
        if (word.length < 2 || word.length > 40) continue;
        const at = node.textContent.indexOf(word);
        const range = document.createRange();
        range.setStart(node, at);
        range.setEnd(node, at + word.length);
        const lines = new Set(Array.from(range.getClientRects()).map(r => Math.round(r.top)));
        if (lines.size > 1) broken.push(word);
      }
    }
  }
  // Nor does a table reach past the card (or section) it is in.
  for (const table of document.querySelectorAll("main table")) {
    const box = table.closest(".card, section, main").getBoundingClientRect();
    if (table.getBoundingClientRect().right > box.right + 1) broken.push("table past its card");
  }
  return broken;
}"""


def test_tables_never_break_a_word_in_half(new_page: Any, alice: Any) -> None:
    """At desktop width, no table breaks a zone, a state, a date or a header mid-word
    (issue 35, defect 4: "Europe/A|msterda|m", "Tenan|t", "pause|d" beside empty
    space), while a 200-character name still wraps rather than widening the page."""
    paused = services.schedule_create(
        actor=alice,
        data={
            "name": "nightly-export",
            "cron": "30 2 * * *",
            "timezone": "Europe/Amsterdam",
            "target": TARGET,
        },
    )
    services.schedule_pause(actor=alice, schedule_id=paused.id)
    services.schedule_create(
        actor=alice, data={"name": "n" * 200, "cron": "* * * * *", "target": TARGET}
    )
    page = new_page(viewport={"width": 1440, "height": 900})
    login(page, "alice", PW)
    for url in ("/", "/schedules/", "/schedules/health", "/members/", "/tokens/"):
        page.goto(url)
        assert page.evaluate(BROKEN_WORDS) == [], url
        assert page_width(page) <= 1440, url
    # The new-schedule preview: occurrences with their zone, in a table.
    page.goto("/schedules/new")
    page.get_by_label("Name").fill("preview-me")
    zone = page.get_by_label("Timezone")
    zone.fill("")
    zone.press_sequentially("Europe/Amsterdam", delay=10)
    page.get_by_label("Cron").press_sequentially("30 2 * * *", delay=30)
    preview = page.locator("#preview")
    preview.get_by_text("At 02:30 AM").wait_for()
    preview.get_by_text("Europe/Amsterdam").first.wait_for()
    assert page.evaluate(BROKEN_WORDS) == []
    assert page_width(page) <= 1440
    shot(page, "48-preview-words-whole")
