"""Calendars cannot take the beat down or leak a credential (issue 29).

* A rule repeating within a day is a 400 at save (API and schedules-as-code), naming
  `sources[i].content` and why.
* A save stores the expanded dates on the row; the beat's path (schedule_filters)
  reads only those, never expanding: a row stored before the bounds, not expanded
  yet, reads as no dates, and the control pump's refresh expands it (bounded) and
  the rows of an earlier year.
* An .ics url follows the target url rules (no credentials, the save-time look-alike
  check), given alone or with content; `fetched_at` is an ISO 8601 datetime; a url
  stored with a credential before is shown redacted (list, export, audit).
* The dates API near the year 9999 is a 400 naming the parameter, not a 500.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from dispatch import calendars
from dispatch.models import Calendar, ScheduleCalendar
from dispatch.scheduler import control
from dispatch.selectors.calendars import calendar_dates, schedule_filters
from dispatch.services import calendars as calendar_writes
from dispatch.services import schedule_create
from tenants.models import AuditEvent, Tenant
from tenants.roles import Principal

pytestmark = pytest.mark.django_db

ICS = (
    "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//t//t//EN\r\n"
    "BEGIN:VEVENT\r\nUID:a@t\r\nDTSTART;VALUE=DATE:20270105\r\nSUMMARY:Stocktake\r\n"
    "END:VEVENT\r\nEND:VCALENDAR\r\n"
)
# The attacker's calendar: every minute, no COUNT, no UNTIL.
MINUTELY = (
    "BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20250101\r\n"
    "RRULE:FREQ=MINUTELY\r\nSUMMARY:x\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"
)
REFUSED = (
    "RRULE FREQ=MINUTELY repeats within a day; a calendar holds dates: use FREQ=DAILY, "
    "WEEKLY, MONTHLY or YEARLY"
)


def error(res: Any) -> dict[str, list[str]]:
    assert res.status_code == 400, res.content
    detail: dict[str, list[str]] = res.json()["error"]["detail"]
    return detail


def this_year() -> int:
    return dt.datetime.now(dt.UTC).year


def hostile_row(tenant: Tenant, name: str = "hostile") -> Calendar:
    """A calendar as a row saved before the bounds (not through the services)."""
    return Calendar.objects.create(
        tenant=tenant, name=name, sources=[{"type": "ics", "content": MINUTELY}]
    )


def test_a_rule_repeating_within_a_day_is_400_through_the_api_and_apply(api: APIClient) -> None:
    body = {"name": "minutely", "sources": [{"type": "ics", "content": MINUTELY}]}
    assert error(api.post("/v1/calendars", body, format="json")) == {
        "sources[0].content": [REFUSED]
    }
    res = api.post("/v1/schedules:apply", {"schedules": [], "calendars": [body]}, format="json")
    assert error(res) == {"calendars[0].sources[0].content": [REFUSED]}
    assert not Calendar.objects.exists()


def test_a_save_stores_the_dates_and_the_beat_path_only_reads_them(
    api: APIClient, admin_principal: Principal, tenant: Tenant, seed_example: dict[str, Any]
) -> None:
    created = api.post(
        "/v1/calendars",
        {"name": "NL", "sources": [{"type": "holidays", "country": "NL"}]},
        format="json",
    )
    assert created.status_code == 201, created.content
    row = Calendar.objects.get(pk=created.json()["id"])
    last = this_year() + calendars.YEARS_AHEAD
    assert row.expanded_for == this_year()
    assert row.expanded is not None
    assert [f"{last}-12-25", "Christmas Day"] in row.expanded["dates"]
    # A schedule listing a row saved before the bounds: its filter is read from the
    # row (nothing stored yet: no dates), the MINUTELY rule is never expanded here.
    hostile = hostile_row(tenant)
    sched = schedule_create(actor=admin_principal, data=seed_example)
    ScheduleCalendar.objects.create(schedule=sched, calendar=hostile, role="exclude", position=0)
    found = schedule_filters([sched.id])[sched.id]
    assert [(d.name, d.dates, d.weekdays) for d in found.exclude] == [("hostile", (), frozenset())]


def test_the_refresh_expands_rows_of_an_earlier_year_and_rows_not_expanded(
    api: APIClient, tenant: Tenant
) -> None:
    created = api.post(
        "/v1/calendars",
        {"name": "NL", "sources": [{"type": "holidays", "country": "NL"}]},
        format="json",
    )
    assert created.status_code == 201, created.content
    stale = Calendar.objects.get(pk=created.json()["id"])
    Calendar.objects.filter(pk=stale.pk).update(
        expanded={"dates": [["2020-01-01", "old"]], "weekdays": []},
        expanded_for=this_year() - 1,
    )
    stale.refresh_from_db()
    # Until refreshed the stored dates are used as they are.
    assert calendar_dates(stale).dates == ((dt.date(2020, 1, 1), "old"),)
    hostile = hostile_row(tenant)
    control.pump_once()
    stale.refresh_from_db()
    hostile.refresh_from_db()
    last = this_year() + calendars.YEARS_AHEAD
    assert stale.expanded_for == this_year() and stale.expanded is not None
    assert [f"{last}-12-25", "Christmas Day"] in stale.expanded["dates"]
    assert stale.version == 1  # not an edit
    # The hostile rule is left out (the bounded expander refuses it), the row done.
    assert (hostile.expanded, hostile.expanded_for) == (
        {"dates": [], "weekdays": []},
        this_year(),
    )
    assert calendar_writes.calendars_refresh_once() == 0


@pytest.mark.parametrize(
    "url",
    [
        "https://bob:hunter2@cal.example.com/x.ics",
        "https://cal.example.com/x.ics?token=s3cr3t",
        "https://cal.example.com/x.ics?api_key=s3cr3t",
        "http://localhost./x.ics",
        "http://127.0.0.1./x.ics",
    ],
)
def test_an_ics_url_gets_the_400_a_target_url_gets(
    api: APIClient, seed_example: dict[str, Any], url: str
) -> None:
    target = seed_example | {"target": {"type": "http", "url": url}}
    reason = error(api.post("/v1/schedules", target, format="json"))["target.url"]
    for source in ({"type": "ics", "url": url}, {"type": "ics", "url": url, "content": ICS}):
        res = api.post("/v1/calendars", {"name": "c", "sources": [source]}, format="json")
        assert error(res) == {"sources[0].url": reason}
    assert not Calendar.objects.exists()


def test_a_percent_encoded_host_is_refused_as_a_target_url_is(
    api: APIClient, seed_example: dict[str, Any]
) -> None:
    """A host name has no percent-encoding: the disguise is refused at save, for a
    target and for an .ics url alike (fetched or kept as its content's origin)."""
    url = "http://127%2e0%2e0%2e1/x.ics"
    reason = ["127%2e0%2e0%2e1 is percent-encoded; write the host name as it is"]
    target = seed_example | {"target": {"type": "http", "url": url}}
    assert error(api.post("/v1/schedules", target, format="json")) == {"target.url": reason}
    for source in ({"type": "ics", "url": url}, {"type": "ics", "url": url, "content": ICS}):
        res = api.post("/v1/calendars", {"name": "c", "sources": [source]}, format="json")
        assert error(res) == {"sources[0].url": reason}
    assert not Calendar.objects.exists()


def test_fetched_at_is_an_iso_8601_datetime(api: APIClient) -> None:
    source = {"type": "ics", "url": "https://cal.example.com/x.ics", "content": ICS}
    res = api.post(
        "/v1/calendars",
        {"name": "c", "sources": [source | {"fetched_at": "last tuesday"}]},
        format="json",
    )
    assert error(res) == {
        "sources[0].fetched_at": ["must be the time the url was fetched, an ISO 8601 datetime"]
    }
    res = api.post(
        "/v1/calendars",
        {"name": "c", "sources": [source | {"fetched_at": "2026-11-30T08:00:00+00:00"}]},
        format="json",
    )
    assert res.status_code == 201, res.content
    assert res.json()["sources"][0]["fetched_at"] == "2026-11-30T08:00:00+00:00"


def test_a_url_stored_with_credentials_is_shown_redacted(api: APIClient, tenant: Tenant) -> None:
    stored = {
        "type": "ics",
        "content": ICS,
        "url": "https://bob:hunter2@cal.example.com/x.ics?token=s3cr3t&v=2",
        "fetched_at": "2026-11-30T08:00:00+00:00",
    }
    row = Calendar.objects.create(tenant=tenant, name="old", sources=[stored])
    shown = "https://REDACTED@cal.example.com/x.ics?token=REDACTED&v=2"
    listed = api.get("/v1/calendars")
    assert listed.json()["results"][0]["sources"][0]["url"] == shown
    exported = api.get("/v1/schedules:export").json()["calendars"]
    assert exported == [{"name": "old", "sources": [stored | {"url": shown}]}]
    res = api.patch(f"/v1/calendars/{row.pk}", {"description": "imported"}, format="json")
    assert res.status_code == 200, res.content
    assert res.json()["sources"][0]["url"] == shown
    audit = AuditEvent.objects.get(object_id=str(row.pk))
    for text in (listed.content.decode(), json.dumps(exported), json.dumps(audit.before)):
        assert "hunter2" not in text and "s3cr3t" not in text
    assert audit.after["sources"][0]["url"] == shown


def test_dates_near_the_year_9999_are_a_400_naming_the_parameter(api: APIClient) -> None:
    sources = [
        {"type": "holidays", "country": "NL"},
        {"type": "dates", "dates": ["9998-12-25"], "name": "far"},
        {"type": "range", "start": "9999-12-30", "end": "9999-12-31", "name": "last"},
    ]
    created = api.post("/v1/calendars", {"name": "NL", "sources": sources}, format="json")
    assert created.status_code == 201, created.content
    dates = f"/v1/calendars/{created.json()['id']}/dates"
    assert error(api.get(f"{dates}?from=9999-01-02&to=9999-12-31")) == {
        "from": ["must be a date up to 9998-12-31"]
    }
    assert error(api.get(f"{dates}?from=9998-01-02&to=9999-12-31")) == {
        "to": ["must be a date up to 9998-12-31"]
    }
    res = api.get(f"{dates}?from=9998-12-20")
    assert res.status_code == 200, res.content
    assert res.json()["results"] == [{"date": "9998-12-25", "name": "far"}]
