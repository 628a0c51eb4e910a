"""The schedule form's calendar fields: names one per line, saved as the schedule's
exclude/only calendars, shown again on edit, an unknown name an inline error."""

from __future__ import annotations

import json
import re

import pytest

from dispatch.models import Calendar, Schedule
from dispatch.services import calendars as calendar_writes
from tests.support.console_support import World, form_data

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(world: World) -> World:
    """The shared world (tests/integration/conftest.py) with two calendars."""
    for name, preset in (("weekends", "weekends"), ("workdays", "business_days")):
        calendar_writes.calendar_create(
            actor=world.admin_p,
            data={"name": name, "sources": [{"type": "preset", "preset": preset}]},
        )
    return world


def test_form_saves_calendars_by_name_and_shows_them_on_edit(world: World) -> None:
    client = world.client("operator")
    data = form_data(name="daily", cron="0 9 * * *", exclude_calendars="weekends\n\nweekends\n")
    response = client.post("/schedules/new", data)
    assert response.status_code == 302, response.content.decode()[:2000]
    s = Schedule.objects.get(name="daily")
    assert [(link.role, link.calendar.name) for link in s.calendar_links.all()] == [
        ("exclude", "weekends")
    ]
    assert s.next_run_at is not None and s.next_run_at.weekday() < 5
    page = client.get(f"/schedules/{s.id}/edit").content.decode()
    block = re.search(r'<textarea name="exclude_calendars"[^>]*>(.*?)</textarea>', page, re.S)
    assert block is not None and block.group(1).strip() == "weekends"


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"exclude_calendars": "nope"}, "exclude_calendars", "unknown calendar &#x27;nope"),
        (
            {"exclude_calendars": "weekends\nworkdays"},
            "exclude_calendars",
            "would never run",
        ),
        ({"only_calendars": "theirs-or-none"}, "only_calendars", "unknown calendar"),
    ],
)
def test_calendar_errors_are_inline_and_nothing_is_saved(
    world: World, overrides: dict[str, str], field: str, message: str
) -> None:
    before = Schedule.objects.count()
    response = world.client("operator").post("/schedules/new", form_data(**overrides))
    assert response.status_code == 400
    html = response.content.decode()
    block = re.search(rf'<ul class="errorlist" id="id_{field}_error">(.*?)</ul>', html, re.S)
    assert block is not None, html[:3000]
    assert message in block.group(1)
    assert Schedule.objects.count() == before


def test_live_preview_leaves_out_and_lists_the_excluded_dates(world: World) -> None:
    page = (
        world.client("operator")
        .post(
            f"/schedules/{world.schedule.id}/preview",
            form_data(name="nightly", cron="0 0 * * *", exclude_calendars="weekends"),
        )
        .content.decode()
    )
    # The weekend runs stay in the table, struck through, each with its reason.
    struck = re.findall(r'<tr class="excluded">(.*?)</tr>', page, re.S)
    assert struck, page[:3000]
    for row in struck:
        assert row.count("<s>") == 2, row
        assert re.search(r"excluded by calendar &#x27;weekends&#x27;: \S+ (Saturday|Sunday)", row)
    assert "Struck through" in page
    # The edit changes the upcoming runs; a weekend run is shown once, as excluded
    # (not also as "removed").
    assert "change with this edit" in page
    assert '<tr class="removed">' not in page


def test_calendar_pages_create_show_dates_refuse_bad_input_and_in_use_delete(
    world: World,
) -> None:
    client = world.client("operator")
    sources = '[{"type": "holidays", "country": "NL"}]'
    response = client.post("/calendars/", {"name": "NL", "description": "", "sources": sources})
    assert response.status_code == 302
    calendar = Calendar.objects.get(tenant=world.tenant, name="NL")
    page = client.get(response["Location"]).content.decode()
    assert "Christmas Day" in page and "No schedule uses this calendar." in page
    bad = client.post(
        "/calendars/", {"name": "x", "sources": '[{"type": "holidays", "country": "XX"}]'}
    )
    assert bad.status_code == 400
    assert "sources[0].country: unknown country code" in bad.content.decode()
    assert not Calendar.objects.filter(name="x").exists()
    # In use by a schedule: the delete is refused, naming it.
    client.post("/schedules/new", form_data(name="uses-nl", exclude_calendars="NL"))
    refused = client.post(f"/calendars/{calendar.id}/delete")
    assert refused.status_code == 409
    assert "uses-nl" in refused.content.decode()
    # Viewers read, cannot write; another tenant's calendar is a 404.
    assert world.client("viewer").get(f"/calendars/{calendar.id}/").status_code == 200
    assert world.client("viewer").post("/calendars/", {"name": "v"}).status_code == 403
    assert world.client("outsider").get(f"/calendars/{calendar.id}/").status_code == 404


def _messages(html: str) -> list[str]:
    region = re.search(r'<div id="messages">(.*?)</div>', html, re.S)
    return re.findall(r"<p [^>]*>(.*?)</p>", region.group(1), re.S) if region else []


def test_new_calendar_form_is_empty_with_the_example_as_help(world: World) -> None:
    """Issue 35, defect 21: the sources field came filled with NL holidays and
    weekends, which one click on Create saved as a calendar nobody wrote."""
    client = world.client("operator")
    page = client.get("/calendars/").content.decode()
    field = re.search(r'<textarea id="cal-sources"[^>]*>(.*?)</textarea>', page, re.S)
    assert field is not None and field.group(1) == "", "no value to submit by accident"
    example = re.search(r'<code id="cal-sources-example">(.*?)</code>', page, re.S)
    assert example is not None and "holidays" in example.group(1), "the example is help"
    before = Calendar.objects.count()
    response = client.post("/calendars/", {"name": "untouched", "description": "", "sources": ""})
    assert response.status_code == 400
    assert "sources: must be a non-empty list of sources" in response.content.decode()
    assert Calendar.objects.count() == before


def test_calendar_changes_say_so_once_and_lead_back(world: World) -> None:
    client = world.client("operator")
    sources = '[{"type": "dates", "dates": ["2030-12-24"], "name": "closed"}]'
    response = client.post("/calendars/", {"name": "office", "sources": sources})
    calendar = Calendar.objects.get(tenant=world.tenant, name="office")
    page = f"/calendars/{calendar.id}/"
    assert response.status_code == 302 and response["Location"] == page
    html = client.get(page).content.decode()
    assert _messages(html) == ["Calendar office created."]
    assert '<a href="/calendars/" id="back-to-calendars">' in html, "a way back to the list"
    assert _messages(client.get(page).content.decode()) == [], "said once"

    response = client.post(
        page, {"name": "office", "description": "closed days", "sources": sources}
    )
    assert response.status_code == 302 and response["Location"] == page
    assert _messages(client.get(page).content.decode()) == ["Calendar office saved."]

    response = client.post(f"{page}delete")
    assert response.status_code == 302 and response["Location"] == "/calendars/"
    html = client.get("/calendars/").content.decode()
    assert _messages(html) == ["Calendar office deleted."]
    assert Calendar.objects.get(pk=calendar.pk).deleted_at is not None


def _beside(html: str, field: str) -> str:
    """The error shown beside a field of the calendar form ("" when none)."""
    found = re.search(rf'<span class="error" id="cal-{field}-error">(.*?)</span>', html, re.S)
    return found.group(1) if found else ""


def test_structured_fields_make_the_common_sources_without_json(world: World) -> None:
    """Defect 21's form: dates, a country's holidays, an iCalendar URL and a preset
    each make one source; the JSON stays for the other kinds and adds to them."""
    client = world.client("operator")
    data = {
        "name": "office",
        "dates": "2030-12-31, 2030-12-24\n2031-01-02",
        "country": "nl",
        "preset": "weekends",
        "sources": "",
    }
    response = client.post("/calendars/", data)
    assert response.status_code == 302, response.content.decode()[:3000]
    calendar = Calendar.objects.get(tenant=world.tenant, name="office")
    assert calendar.sources == [
        {"type": "dates", "dates": ["2030-12-24", "2030-12-31", "2031-01-02"], "name": ""},
        {"type": "holidays", "country": "NL", "subdivision": None},
        {"type": "preset", "preset": "weekends"},
    ]
    # On its page the JSON holds what it has; a field adds a source to it.
    page = f"/calendars/{calendar.id}/"
    html = client.get(page).content.decode()
    field = re.search(r'<textarea id="cal-sources"[^>]*>(.*?)</textarea>', html, re.S)
    assert field is not None and "&quot;holidays&quot;" in field.group(1)
    assert _beside(html, "dates") == ""
    sources = json.dumps(calendar.sources)
    response = client.post(page, {"name": "office", "sources": sources, "dates": "2031-05-05"})
    assert response.status_code == 302
    calendar.refresh_from_db()
    assert calendar.sources[-1]["dates"] == ["2031-05-05"] and len(calendar.sources) == 4


@pytest.mark.parametrize(
    ("data", "field", "reason"),
    [
        ({"dates": "2030-12-24\n24-12-2030"}, "dates", "24-12-2030"),
        ({"country": "XX"}, "country", "unknown country code"),
        ({"country": "US", "subdivision": "ZZ"}, "subdivision", "unknown subdivision"),
        ({"subdivision": "NY"}, "subdivision", "needs the country"),
        ({"preset": "holidays"}, "preset", "must be one of weekends, business_days"),
        ({"ics_url": "https://127.0.0.1/cal.ics"}, "ics-url", ""),
    ],
)
def test_a_wrong_field_is_named_beside_itself(
    world: World, data: dict[str, str], field: str, reason: str
) -> None:
    before = Calendar.objects.count()
    response = world.client("operator").post("/calendars/", {"name": "x", **data})
    assert response.status_code == 400
    html = response.content.decode()
    assert reason in _beside(html, field) and _beside(html, field), html[:3000]
    assert 'id="calendar-errors"' in html, "and in the list above the form"
    assert Calendar.objects.count() == before
