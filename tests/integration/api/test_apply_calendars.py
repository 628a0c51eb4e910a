"""Calendars in a schedules-as-code file: `calendars` in POST /v1/schedules:apply
and in GET /v1/schedules:export.

Keyed by name and applied before the schedules that name them, in the same one
transaction; an exported calendar (an .ics with its content) applies again as
unchanged with no fetch; prune deletes the calendars a file with `calendars` does
not name, never while a kept schedule lists one."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from rest_framework.test import APIClient

from dispatch.models import Calendar, ScheduleCalendar
from tenants.models import AuditEvent, Tenant
from tests.integration.api.test_schedules_apply import d, error, live, writes

pytestmark = pytest.mark.django_db

CLOSED = {"name": "office closed", "sources": [{"type": "dates", "dates": ["2030-01-02"]}]}
NL = {
    "name": "NL holidays",
    "description": "public holidays",
    "sources": [{"type": "holidays", "country": "NL"}],
}
ICS = (
    "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//t//t//EN\r\n"
    "BEGIN:VEVENT\r\nUID:a@t\r\nDTSTART;VALUE=DATE:20300105\r\nSUMMARY:Stocktake\r\n"
    "END:VEVENT\r\nEND:VCALENDAR\r\n"
)


def apply(client: APIClient, schedules: Any, calendars: Any = None, **flags: Any) -> Any:
    body: dict[str, Any] = {"schedules": schedules, **flags}
    if calendars is not None:
        body["calendars"] = calendars
    return client.post("/v1/schedules:apply", body, format="json")


def applied(client: APIClient, schedules: Any, calendars: Any = None, **flags: Any) -> Any:
    res = apply(client, schedules, calendars, **flags)
    assert res.status_code == 200, res.content
    return res.json()


def calendars_of(tenant: Tenant) -> dict[str, Calendar]:
    return {c.name: c for c in Calendar.objects.filter(tenant=tenant, deleted_at__isnull=True)}


def everything(tenant: Tenant) -> tuple[Any, ...]:
    """What an apply could write: schedules, audit, events, and the calendars' rows."""
    return (
        writes(tenant),
        sorted(Calendar.objects.filter(tenant=tenant).values_list("name", "version", "deleted_at")),
        ScheduleCalendar.objects.filter(schedule__tenant=tenant).count(),
    )


def test_calendars_are_created_before_the_schedules_that_name_them(
    api: APIClient, tenant: Tenant
) -> None:
    file = [d("billing", exclude_calendars=["NL holidays", "office closed"])]
    before = everything(tenant)
    dry = applied(api, file, [NL, CLOSED], dry_run=True)
    assert dry["calendars"]["summary"] == {"create": 2, "update": 0, "unchanged": 0, "delete": 0}
    assert [c["id"] for c in dry["calendars"]["changes"]] == [None, None]
    assert dry["summary"]["create"] == 1
    assert everything(tenant) == before  # a dry run writes nothing
    body = applied(api, file, [NL, CLOSED])
    assert [(c["name"], c["action"]) for c in body["calendars"]["changes"]] == [
        ("NL holidays", "create"),
        ("office closed", "create"),
    ]
    made = calendars_of(tenant)
    assert made["NL holidays"].description == "public holidays"
    assert str(made["office closed"].id) == body["calendars"]["changes"][1]["id"]
    links = ScheduleCalendar.objects.filter(schedule=live(tenant)["billing"])
    assert sorted(link.calendar.name for link in links) == ["NL holidays", "office closed"]
    # Each calendar audited as POST /v1/calendars audits it.
    assert AuditEvent.objects.filter(tenant=tenant, object_type="calendar").count() == 2


def test_export_carries_the_calendars_and_applies_back_unchanged(
    api: APIClient, tenant: Tenant
) -> None:
    applied(api, [d("billing", exclude_calendars=["NL holidays"])], [NL, CLOSED])
    exported = api.get("/v1/schedules:export").json()
    assert [c["name"] for c in exported["calendars"]] == ["NL holidays", "office closed"]
    assert exported["calendars"][0] == NL | {
        "sources": [{"type": "holidays", "country": "NL", "subdivision": None}]
    }
    assert "description" not in exported["calendars"][1]  # empty: left out
    before = everything(tenant)
    body = applied(api, exported["schedules"], exported["calendars"], prune=True)
    assert body["calendars"]["summary"] == {"create": 0, "update": 0, "unchanged": 2, "delete": 0}
    assert body["summary"]["unchanged"] == 1
    assert everything(tenant) == before


def test_a_changed_calendar_is_updated_and_its_schedules_replanned(
    api: APIClient, tenant: Tenant
) -> None:
    applied(api, [d("billing", exclude_calendars=["office closed"])], [CLOSED])
    changed = CLOSED | {"sources": [{"type": "dates", "dates": ["2030-01-02", "2030-01-03"]}]}
    body = applied(api, [d("billing", exclude_calendars=["office closed"])], [changed])
    (change,) = body["calendars"]["changes"]
    assert change["action"] == "update" and change["version"] == 2
    assert change["fields"]["sources"]["after"][0]["dates"] == ["2030-01-02", "2030-01-03"]
    assert set(change["fields"]) == {"sources"}
    assert body["summary"]["unchanged"] == 1  # the schedule's definition did not change
    assert calendars_of(tenant)["office closed"].sources[0]["dates"][-1] == "2030-01-03"
    # Only the description: the sources stay as they are.
    body = applied(api, [], [changed | {"description": "closures"}])
    assert set(body["calendars"]["changes"][0]["fields"]) == {"description"}


def test_prune_deletes_unnamed_calendars_but_never_one_in_use(
    api: APIClient, tenant: Tenant
) -> None:
    applied(
        api,
        [
            d("keeps", exclude_calendars=["office closed"]),
            d("goes", exclude_calendars=["NL holidays"]),
        ],
        [NL, CLOSED, {"name": "unused", "sources": [{"type": "preset", "preset": "weekends"}]}],
    )
    # "NL holidays" is only listed by a schedule this same apply prunes: it can go too.
    body = applied(api, [d("keeps", exclude_calendars=["office closed"])], [CLOSED], prune=True)
    assert [(c["name"], c["action"]) for c in body["calendars"]["changes"]] == [
        ("office closed", "unchanged"),
        ("NL holidays", "delete"),
        ("unused", "delete"),
    ]
    assert set(calendars_of(tenant)) == {"office closed"}
    assert set(live(tenant)) == {"keeps"}
    # A calendar a kept schedule lists cannot be pruned: 409 naming it, nothing applied.
    before = everything(tenant)
    res = apply(api, [d("keeps", exclude_calendars=["office closed"]), d("new")], [], prune=True)
    err = error(res, 409)
    assert "office closed" in err["message"] and "'keeps'" in err["message"], err
    assert everything(tenant) == before
    # Without `calendars`, a prune leaves the tenant's calendars alone.
    body = applied(api, [], prune=True)
    assert "calendars" not in body
    assert set(calendars_of(tenant)) == {"office closed"}


def test_bad_calendars_are_a_400_naming_the_item_and_nothing_is_applied(
    api: APIClient, tenant: Tenant
) -> None:
    before = everything(tenant)
    cases = [
        ([CLOSED, {"name": "x", "sources": [{"type": "nope"}]}], "calendars[1].sources[0].type"),
        ([CLOSED, {"name": "x", "sources": [{"type": "holidays", "country": "XX"}]}], None),
        ([{"name": "x", "sources": []}], "calendars[0].sources"),
        ([{"name": "", "sources": CLOSED["sources"]}], "calendars[0].name"),
        ([CLOSED, CLOSED], "calendars[1].name"),
        ([CLOSED | {"colour": "red"}], "calendars[0].colour"),
        (["office closed"], "calendars[0]"),
        ({"name": "x"}, "calendars"),
        ("NL", "calendars"),
        ([{"name": "x", "sources": [{"type": "ics", "content": "BEGIN:NOPE"}]}], None),
    ]
    for calendars, field in cases:
        err = error(apply(api, [d("billing")], calendars), 400)
        (named,) = err["detail"]
        assert named.startswith("calendars"), (calendars, err)
        if field is not None:
            assert named == field, (calendars, err)
    # null is not "absent" (which leaves the calendars alone): a 400 too.
    res = api.post("/v1/schedules:apply", {"schedules": [], "calendars": None}, format="json")
    assert list(error(res, 400)["detail"]) == ["calendars"]
    # A schedule naming a calendar the file does not have: the schedule's error.
    err = error(apply(api, [d("billing", only_calendars=["missing"])], [CLOSED]), 400)
    assert list(err["detail"]) == ["schedules[0].only_calendars"], err
    assert everything(tenant) == before


def test_another_tenants_calendar_of_the_same_name_is_untouched(
    api: APIClient, outsider_api: APIClient, tenant: Tenant, other_tenant: Tenant
) -> None:
    applied(outsider_api, [], [CLOSED])
    theirs = calendars_of(other_tenant)["office closed"]
    body = applied(api, [], [CLOSED | {"description": "ours"}], prune=True)
    assert body["calendars"]["changes"][0]["action"] == "create"
    applied(api, [], [], prune=True)
    assert calendars_of(other_tenant)["office closed"].version == theirs.version
    assert api.get("/v1/schedules:export").json()["calendars"] == []


class _Ics(http.server.BaseHTTPRequestHandler):
    fetches = 0

    def do_GET(self) -> None:
        type(self).fetches += 1
        body = ICS.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/calendar")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def ics_url(settings: Any) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Ics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings.TARGET_TEST_ALLOW = [f"127.0.0.1:{server.server_address[1]}"]
    _Ics.fetches = 0
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/stocktake.ics"
    finally:
        server.shutdown()
        server.server_close()


def test_an_ics_url_is_fetched_and_its_export_applies_without_a_fetch(
    api: APIClient, tenant: Tenant, ics_url: str
) -> None:
    imported = {"name": "stocktake", "sources": [{"type": "ics", "url": ics_url}]}
    applied(api, [d("billing", exclude_calendars=["stocktake"])], [imported])
    assert _Ics.fetches == 1
    exported = api.get("/v1/schedules:export").json()
    (source,) = exported["calendars"][0]["sources"]
    assert source["content"] == ICS and source["url"] == ics_url and source["fetched_at"]
    before = everything(tenant)
    body = applied(api, exported["schedules"], exported["calendars"], prune=True)
    assert body["calendars"]["changes"][0]["action"] == "unchanged"
    assert _Ics.fetches == 1 and everything(tenant) == before
    # The url again: fetched again (the file says "the calendar at this url"), and the
    # same content is the same calendar.
    body = applied(api, exported["schedules"], [imported])
    assert _Ics.fetches == 2
    assert body["calendars"]["changes"][0]["action"] == "unchanged"
