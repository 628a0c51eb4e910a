"""Calendars through the API: CRUD with audit, bad input per field (400, nothing saved),
schedules listing them by name, preview/explainer agreeing, in-use delete 409, and
another tenant's calendar a 404 / unknown calendar."""

from __future__ import annotations

import datetime as dt
import http.server
import threading
from collections.abc import Iterator
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from rest_framework.test import APIClient

from dispatch.models import Calendar, Schedule, ScheduleCalendar
from tenants.models import AuditEvent

pytestmark = pytest.mark.django_db

ICS = """BEGIN:VCALENDAR
VERSION:2.0
PRODID:-//test//EN
BEGIN:VEVENT
UID:1@test
DTSTART;VALUE=DATE:20270105
DTEND;VALUE=DATE:20270107
SUMMARY:Stocktake
END:VEVENT
END:VCALENDAR
"""


def post(api: APIClient, body: dict[str, Any], code: int = 201) -> dict[str, Any]:
    res = api.post("/v1/calendars", body, format="json")
    assert res.status_code == code, res.content
    return res.json() if code < 400 else res.json()["error"]


def schedule(api: APIClient, seed: dict[str, Any], code: int = 201, **kw: Any) -> dict[str, Any]:
    res = api.post("/v1/schedules", seed | kw, format="json")
    assert res.status_code == code, res.content
    return res.json() if code < 400 else res.json()["error"]


def test_crud_with_audit_and_expanded_dates(api: APIClient) -> None:
    body = post(
        api,
        {
            "name": "NL holidays",
            "sources": [
                {"type": "holidays", "country": "nl"},
                {"type": "range", "start": "2026-12-28", "end": "2026-12-30", "name": "closed"},
                {"type": "ics", "content": ICS},
            ],
        },
    )
    assert body["sources"][0] == {"type": "holidays", "country": "NL", "subdivision": None}
    assert "content" not in body["sources"][2] and body["sources"][2]["bytes"] > 0
    res = api.get(f"/v1/calendars/{body['id']}/dates?from=2026-12-24&to=2027-01-06")
    assert res.status_code == 200, res.content
    dates = {d["date"]: d["name"] for d in res.json()["results"]}
    assert dates["2026-12-25"] == "Christmas Day"
    assert dates["2026-12-28"] == "closed" and "2026-12-31" not in dates
    assert dates["2027-01-01"] == "New Year's Day"
    assert dates["2027-01-05"] == "Stocktake" and dates["2027-01-06"] == "Stocktake"
    res = api.patch(f"/v1/calendars/{body['id']}", {"name": "NL"}, format="json")
    assert res.status_code == 200 and res.json()["version"] == 2
    assert [c["name"] for c in api.get("/v1/calendars").json()["results"]] == ["NL"]
    assert api.delete(f"/v1/calendars/{body['id']}").status_code == 204
    assert api.get(f"/v1/calendars/{body['id']}").status_code == 404
    actions = list(
        AuditEvent.objects.filter(object_id=body["id"])
        .order_by("id")
        .values_list("action", flat=True)
    )
    assert actions == ["calendar.create", "calendar.update", "calendar.delete"]
    # The name is free again once deleted.
    post(api, {"name": "NL", "sources": [{"type": "preset", "preset": "weekends"}]})


@pytest.mark.parametrize(
    ("sources", "field", "why"),
    [
        ([{"type": "holidays", "country": "XX"}], "sources[0].country", "unknown country"),
        (
            [{"type": "holidays", "country": "US", "subdivision": "ZZ"}],
            "sources[0].subdivision",
            "unknown subdivision",
        ),
        (
            [{"type": "range", "start": "2026-12-31", "end": "2026-12-24"}],
            "sources[0].end",
            "inverted",
        ),
        (
            [
                {"type": "range", "start": "2026-12-24", "end": "2026-12-31"},
                {"type": "range", "start": "2026-12-30", "end": "2027-01-02"},
            ],
            "sources[1].start",
            "overlaps sources[0]",
        ),
        ([{"type": "ics", "content": "BEGIN:VCALENDAR\nnot ics"}], "sources[0].content", "valid"),
        ([{"type": "dates", "dates": ["2026-02-30"]}], "sources[0].dates", "not a date"),
        ([{"type": "preset", "preset": "holidays"}], "sources[0].preset", "one of"),
        ([{"type": "moon"}], "sources[0].type", "must be"),
        ([], "sources", "non-empty"),
        (
            [{"type": "ics", "url": "http://127.0.0.1:9/x.ics"}],
            "sources[0].url",
            "loopback address",
        ),
    ],
)
def test_bad_sources_are_400_naming_the_field(
    api: APIClient, sources: list[Any], field: str, why: str
) -> None:
    body = post(api, {"name": "bad", "sources": sources}, code=400)
    assert field in body["detail"], body
    assert why in " ".join(body["detail"][field]), body
    assert not Calendar.objects.exists()


def test_schedule_lists_calendars_by_name_and_preview_skips_them(
    api: APIClient, seed_example: dict[str, Any]
) -> None:
    zone = ZoneInfo("Europe/Amsterdam")
    tomorrow = (dt.datetime.now(zone) + dt.timedelta(days=1)).date()
    post(api, {"name": "tomorrow", "sources": [{"type": "dates", "dates": [str(tomorrow)]}]})
    seed_example |= {"cron": "0 9 * * *", "jitter_s": 0}
    body = schedule(api, seed_example, exclude_calendars=["tomorrow"])
    assert body["exclude_calendars"] == ["tomorrow"] and body["only_calendars"] == []
    res = api.get(f"/v1/schedules/{body['id']}/preview?count=5")
    assert res.status_code == 200, res.content
    preview = res.json()
    days = [dt.datetime.fromisoformat(o["local"]).date() for o in preview["occurrences"]]
    assert tomorrow not in days and len(days) == 5
    assert [dt.datetime.fromisoformat(e["local"]).date() for e in preview["excluded"]] == [tomorrow]
    assert preview["excluded"][0]["reason"].startswith(
        f"excluded by calendar 'tomorrow': {tomorrow}"
    )
    # next_run_at is never on the excluded date.
    stored = Schedule.objects.get(pk=body["id"])
    assert stored.next_run_at is not None
    assert stored.next_run_at.astimezone(zone).date() != tomorrow
    # The explainer says why tomorrow's 09:00 will not run.
    at = dt.datetime.combine(tomorrow, dt.time(9), zone).astimezone(dt.UTC)
    res = api.get(f"/v1/schedules/{body['id']}/explain?at={at.isoformat().replace('+00:00', 'Z')}")
    assert res.status_code == 200, res.content
    answer = res.json()
    assert answer["code"] == "excluded_by_calendar", answer
    assert f"excluded by calendar 'tomorrow': {tomorrow}" in answer["sentence"]
    # An edit to a list keeps the other; clearing works.
    res = api.patch(
        f"/v1/schedules/{body['id']}", {"exclude_calendars": [], "version": 1}, format="json"
    )
    assert res.status_code == 200, res.content
    assert res.json()["exclude_calendars"] == []
    assert not ScheduleCalendar.objects.filter(schedule_id=body["id"]).exists()


def test_unknown_or_foreign_calendar_in_a_schedule_is_400_and_nothing_saved(
    api: APIClient, outsider_api: APIClient, seed_example: dict[str, Any]
) -> None:
    theirs = post(
        outsider_api, {"name": "theirs", "sources": [{"type": "preset", "preset": "weekends"}]}
    )
    for ref in ("nope", "theirs", theirs["id"]):
        body = schedule(api, seed_example, code=400, exclude_calendars=[ref])
        assert "unknown calendar" in body["detail"]["exclude_calendars"][0]
    assert not Schedule.objects.filter(tenant__slug="billing").exists()
    assert api.get(f"/v1/calendars/{theirs['id']}").status_code == 404
    assert api.get(f"/v1/calendars/{theirs['id']}/dates").status_code == 404
    assert api.delete(f"/v1/calendars/{theirs['id']}").status_code == 404


def test_a_schedule_that_never_fires_is_400(api: APIClient, seed_example: dict[str, Any]) -> None:
    post(api, {"name": "weekends", "sources": [{"type": "preset", "preset": "weekends"}]})
    post(api, {"name": "weekdays", "sources": [{"type": "preset", "preset": "business_days"}]})
    body = schedule(api, seed_example, code=400, exclude_calendars=["weekends", "weekdays"])
    assert "never" in body["detail"]["exclude_calendars"][0]
    assert not Schedule.objects.exists()
    # Only on weekends, but the expression runs Monday to Friday: never.
    body = schedule(
        api, seed_example | {"cron": "0 9 * * 1-5"}, code=400, only_calendars=["weekends"]
    )
    assert "never" in body["detail"]["only_calendars"][0]


def test_in_use_delete_is_409_naming_schedules_and_edit_replans(
    api: APIClient, seed_example: dict[str, Any]
) -> None:
    cal = post(api, {"name": "weekends", "sources": [{"type": "preset", "preset": "weekends"}]})
    sched = schedule(api, seed_example, exclude_calendars=["weekends"])
    res = api.delete(f"/v1/calendars/{cal['id']}")
    assert res.status_code == 409, res.content
    assert "nightly-demurrage-ROTTERDAM" in res.json()["error"]["message"]
    assert Calendar.objects.filter(pk=cal["id"], deleted_at__isnull=True).exists()
    # An edit that would leave the schedule no run at all is refused, nothing changes.
    res = api.patch(
        f"/v1/calendars/{cal['id']}",
        {"sources": [{"type": "preset", "preset": "weekends"},
                     {"type": "preset", "preset": "business_days"}]},
        format="json",
    )  # fmt: skip
    assert res.status_code == 400, res.content
    assert "would never run" in res.json()["error"]["detail"]["sources"][0]
    assert Calendar.objects.get(pk=cal["id"]).version == 1
    # A real edit moves next_run_at under the new dates.
    zone = ZoneInfo("Europe/Amsterdam")
    before = Schedule.objects.get(pk=sched["id"]).next_run_at
    assert before is not None
    day = before.astimezone(zone).date()
    res = api.patch(
        f"/v1/calendars/{cal['id']}",
        {"sources": [{"type": "dates", "dates": [str(day)]}]},
        format="json",
    )
    assert res.status_code == 200, res.content
    # Weekends are no longer excluded, only `day`: the next run is the first local
    # midnight after now that is not `day` (a Saturday may now come before it).
    local_today = dt.datetime.now(zone).date()
    expected = next(
        dt.datetime.combine(local_today + dt.timedelta(days=n), dt.time(0), tzinfo=zone)
        for n in (1, 2)
        if local_today + dt.timedelta(days=n) != day
    )
    after = Schedule.objects.get(pk=sched["id"]).next_run_at
    assert after == expected


def test_backfill_plan_leaves_out_excluded_dates_on_a_dst_day(
    api: APIClient, seed_example: dict[str, Any]
) -> None:
    post(api, {"name": "fall back", "sources": [{"type": "dates", "dates": ["2026-10-25"]}]})
    sched = schedule(
        api,
        seed_example | {"cron": "0 * * * *", "concurrency": "allow"},
        exclude_calendars=["fall back"],
    )
    window = {"from": "2026-10-24T00:00:00Z", "to": "2026-10-27T00:00:00Z", "dry_run": True}
    res = api.post(
        f"/v1/schedules/{sched['id']}:backfill", window | {"max_concurrent": 100}, format="json"
    )
    assert res.status_code == 200, res.content
    local = [o["local"][:10] for o in res.json()["occurrences"]]
    # 72 hours of hourly runs, less the 25 of the (fall-back) excluded day.
    assert len(local) == 72 - 25 and "2026-10-25" not in local


class _IcsHandler(http.server.BaseHTTPRequestHandler):
    body = ICS.encode()

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/calendar")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def ics_server(settings: Any) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _IcsHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]
    settings.TARGET_TEST_ALLOW = [f"127.0.0.1:{port}"]  # only this loopback receiver
    try:
        yield f"http://127.0.0.1:{port}/closures.ics"
    finally:
        server.shutdown()
        server.server_close()


def test_ics_url_is_fetched_once_and_stored(api: APIClient, ics_server: str) -> None:
    body = post(api, {"name": "imported", "sources": [{"type": "ics", "url": ics_server}]})
    shown = body["sources"][0]
    assert shown["url"] == ics_server and shown["fetched_at"] and shown["bytes"] == len(ICS)
    stored = Calendar.objects.get(pk=body["id"])
    assert stored.sources[0]["content"] == ICS
    # The remote file changing (or going away) does not change the calendar.
    _IcsHandler.body = b"BEGIN:VCALENDAR\r\nEND:VCALENDAR\r\n"
    try:
        res = api.get(f"/v1/calendars/{body['id']}/dates?from=2027-01-01&to=2027-01-31")
        assert [d["date"] for d in res.json()["results"]] == ["2027-01-05", "2027-01-06"]
        # A re-import that fetches an .ics without events is refused, nothing changes.
        res = api.patch(
            f"/v1/calendars/{body['id']}",
            {"sources": [{"type": "ics", "url": ics_server}]},
            format="json",
        )
        assert res.status_code == 400, res.content
        assert "sources[0].content" in res.json()["error"]["detail"]
    finally:
        _IcsHandler.body = ICS.encode()
    assert Calendar.objects.get(pk=body["id"]).version == 1


def test_openapi_documents_calendars(api: APIClient) -> None:
    res = api.get("/v1/openapi.json")
    assert res.status_code == 200, res.status_code
    text = res.content.decode()
    for needle in ("/v1/calendars/{id}/dates", "exclude_calendars", "excluded_by_calendar"):
        assert needle in text, needle


def test_a_dependent_cannot_take_calendars(api: APIClient, seed_example: dict[str, Any]) -> None:
    post(api, {"name": "weekends", "sources": [{"type": "preset", "preset": "weekends"}]})
    upstream = schedule(api, seed_example | {"name": "up"}, exclude_calendars=["weekends"])
    body = schedule(
        api,
        seed_example | {"name": "down", "depends_on": [upstream["id"]]},
        code=400,
        exclude_calendars=["weekends"],
    )
    assert "give the calendars to the upstream" in body["detail"]["exclude_calendars"][0]
    assert not Schedule.objects.filter(name="down").exists()


def test_a_one_off_cannot_take_calendars(api: APIClient, seed_example: dict[str, Any]) -> None:
    """A one-off runs at its run_at: calendars would be stored and never applied."""
    post(api, {"name": "weekends", "sources": [{"type": "preset", "preset": "weekends"}]})
    one_off = {k: v for k, v in seed_example.items() if k != "cron"}
    body = schedule(
        api,
        one_off | {"name": "once", "run_at": "2031-03-01T10:00:00Z"},
        code=400,
        only_calendars=["weekends"],
    )
    assert "calendars apply to cron schedules" in body["detail"]["only_calendars"][0]
    assert not Schedule.objects.filter(name="once").exists()
