"""The Python client's calendars and alerts against a live gunicorn: calendars
(CRUD, dates, a bad source naming its field, a calendar in use, another tenant's),
alert channels (CRUD and :test to a loopback receiver only), the tenant's and a
schedule's alert policy, snooze, and maintenance windows."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tenants.roles import Role
from tests.support.client_support import (
    Recorder,
    Tenant,
    definition,
    extra_token,
    live_server,
    make_tenant,
)
from tests.support.ledger import Ledger
from tests.support.procs import WebServer

from scheduler_client import Client, Conflict, Forbidden, NotFound, ValidationError  # isort: skip
from scheduler_client.models import (  # isort: skip
    AlertChannel,
    Calendar,
    CalendarDate,
    MaintenanceWindow,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CLOSED = {"type": "dates", "dates": ["2026-12-24", "2026-12-31"], "name": "office closed"}


@pytest.fixture(scope="module")
def receiver() -> Iterator[Ledger]:
    """The loopback receiver the webhook channels point at (nothing leaves the machine)."""
    with Ledger() as ledger:
        yield ledger


@pytest.fixture(scope="module")
def server(
    receiver: Ledger,
    django_db_setup: Any,
    django_db_blocker: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[WebServer]:
    """The conftest's live server, with the SSRF guard letting it reach the receiver only."""
    with (
        django_db_blocker.unblock(),
        live_server(tmp_path_factory.mktemp("web"), TARGET_TEST_ALLOW=receiver.allow_entry) as web,
    ):
        yield web


def _instant(delta: timedelta) -> str:
    return (datetime.now(UTC) + delta).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def test_a_calendar_through_its_whole_life(server: WebServer, owner: Tenant) -> None:
    recorder = Recorder()
    with Client(server.url, owner.token, transport=recorder) as client:
        created = client.create_calendar("closures", [CLOSED], description="the office")
        assert isinstance(created, Calendar)
        assert (created.name, created.description, created.version) == (
            "closures",
            "the office",
            1,
        )
        assert created.sources and created.sources[0]["type"] == "dates"
        assert client.get_calendar(created.id) == created

        weekends = client.create_calendar("weekends", [{"type": "preset", "preset": "weekends"}])
        recorder.exchanges.clear()
        assert [c.name for c in client.list_calendars()] == ["closures", "weekends"]  # by name
        assert [e.path for e in recorder.exchanges] == ["/v1/calendars"]  # one page, whole

        dates = client.calendar_dates(created.id, start="2026-12-01", end="2027-01-31")
        assert dates == [
            CalendarDate(date="2026-12-24", name="office closed"),
            CalendarDate(date="2026-12-31", name="office closed"),
        ]
        assert dates[0].raw == {"date": "2026-12-24", "name": "office closed"}
        saturdays = client.calendar_dates(weekends.id, start="2026-12-05", end="2026-12-06")
        assert [(d.date, d.name) for d in saturdays] == [
            ("2026-12-05", "Saturday"),
            ("2026-12-06", "Sunday"),
        ]

        edited = client.update_calendar(
            created.id, {"sources": [CLOSED | {"dates": ["2026-12-24"]}]}
        )
        assert edited.version == 2 and edited.description == "the office"
        assert [d.date for d in client.calendar_dates(created.id, start="2026-12-01")] == [
            "2026-12-24"
        ]

        client.delete_calendar(weekends.id)
        with pytest.raises(NotFound):
            client.get_calendar(weekends.id)
        assert [c.id for c in client.list_calendars()] == [created.id]


def test_calendar_errors_are_typed(server: WebServer, client: Client, owner: Tenant) -> None:
    with pytest.raises(ValidationError) as bad:
        client.create_calendar("bad", [CLOSED, {"type": "dates", "dates": ["2026-13-45"]}])
    assert bad.value.status == 400 and "sources[1].dates" in bad.value.detail, bad.value.detail
    with pytest.raises(ValidationError) as unknown_type:
        client.create_calendar("bad", [{"type": "moon-phases"}])
    assert "sources[0].type" in unknown_type.value.detail, unknown_type.value.detail
    assert list(client.list_calendars()) == []  # nothing half-written

    used = client.create_calendar("closures", [CLOSED])
    schedule = client.create_schedule(definition("payroll", exclude_calendars=["closures"]))
    assert schedule.exclude_calendars == ["closures"]
    with pytest.raises(Conflict) as in_use:
        client.delete_calendar(used.id)
    assert "payroll" in in_use.value.message
    assert in_use.value.detail["schedules"] == [schedule.id]
    assert client.get_calendar(used.id).id == used.id  # still there

    with pytest.raises(ValidationError) as window:
        client.calendar_dates(used.id, start="2027-01-02", end="2027-01-01")
    assert "to" in window.value.detail

    outsider = Client(server.url, make_tenant("outsider").token)
    theirs = outsider.create_calendar("theirs", [CLOSED])
    for read in (client.get_calendar, client.calendar_dates, client.delete_calendar):
        with pytest.raises(NotFound):
            read(theirs.id)  # another tenant's calendar does not exist for us
    with pytest.raises(NotFound):
        client.update_calendar(theirs.id, {"description": "mine now"})
    assert outsider.get_calendar(theirs.id).description == ""

    viewer = Client(server.url, extra_token(owner.slug, Role.VIEWER))
    assert [c.id for c in viewer.list_calendars()] == [used.id]
    with pytest.raises(Forbidden):
        viewer.create_calendar("viewer-made", [CLOSED])


def test_an_alert_channel_through_its_whole_life(
    server: WebServer, client: Client, receiver: Ledger
) -> None:
    receiver.requests.clear()
    created = client.create_alert_channel(
        "ops-hook", "webhook", {"url": f"{receiver.url}/alerts", "headers": {"X-Team": "billing"}}
    )
    assert isinstance(created, AlertChannel)
    assert (created.kind, created.enabled) == ("webhook", True)
    assert created.config == {"url": f"{receiver.url}/alerts", "headers": {"X-Team": "billing"}}
    assert client.get_alert_channel(created.id) == created
    assert [c.id for c in client.list_alert_channels()] == [created.id]

    assert client.test_alert_channel(created.id) == {"ok": True, "detail": "HTTP 200"}
    [request] = receiver.requests
    assert request["path"] == "/alerts"
    assert json.loads(request["body"])["event"] == "alert.test"

    edited = client.update_alert_channel(created.id, {"enabled": False, "name": "ops"})
    assert (edited.name, edited.enabled) == ("ops", False)
    with pytest.raises(ValidationError) as kind:
        client.update_alert_channel(created.id, {"kind": "email"})
    assert "kind" in kind.value.detail

    outsider = Client(server.url, make_tenant("outsider").token)
    with pytest.raises(NotFound):
        outsider.get_alert_channel(created.id)  # another tenant's channel does not exist
    with pytest.raises(NotFound):
        outsider.test_alert_channel(created.id)
    with pytest.raises(NotFound):
        outsider.delete_alert_channel(created.id)

    client.delete_alert_channel(created.id)
    with pytest.raises(NotFound):
        client.get_alert_channel(created.id)
    assert len(receiver.requests) == 1  # only the one test message


def test_a_bad_channel_names_the_field(client: Client) -> None:
    with pytest.raises(ValidationError) as bad:
        client.create_alert_channel("mail", "email", {"to": ["not-an-address"]})
    assert bad.value.status == 400 and "not-an-address" in bad.value.detail["config.to"][0]
    assert list(client.list_alert_channels()) == []


def test_alert_policies_and_snooze(client: Client, receiver: Ledger) -> None:
    built_in = client.get_alert_policy()
    assert built_in["source"] == "built-in" and built_in["channels"] == []

    channel = client.create_alert_channel("hook", "webhook", {"url": receiver.url})
    tenant_wide = client.set_alert_policy({"failure_threshold": 3, "channels": [channel.id]})
    assert (tenant_wide["source"], tenant_wide["failure_threshold"]) == ("tenant", 3)
    assert tenant_wide["channels"] == [channel.id]
    assert tenant_wide["recovery"] == built_in["recovery"]  # left out: the built-in value
    assert client.get_alert_policy() == tenant_wide

    schedule = client.create_schedule(definition("nightly"))
    inherited = client.get_schedule_alert_policy(schedule.id)
    assert (inherited["source"], inherited["snoozed_until"]) == ("tenant", None)

    own = client.set_schedule_alert_policy(schedule.id, {"failure_threshold": 1})
    assert (own["source"], own["failure_threshold"], own["channels"]) == ("schedule", 1, [])
    with pytest.raises(ValidationError) as bad:
        client.set_schedule_alert_policy(schedule.id, {"failure_threshold": 0})
    assert "failure_threshold" in bad.value.detail
    assert client.get_schedule_alert_policy(schedule.id) == own  # nothing written

    until = _instant(timedelta(days=2))
    snoozed = client.snooze_schedule(schedule.id, until)
    assert snoozed["snoozed_until"] == until and snoozed["source"] == "schedule"
    assert client.snooze_schedule(schedule.id, None)["snoozed_until"] is None

    back = client.delete_schedule_alert_policy(schedule.id)
    assert back["source"] == "tenant" and back["failure_threshold"] == 3

    with pytest.raises(NotFound):
        client.get_schedule_alert_policy("00000000-0000-0000-0000-000000000000")


def test_maintenance_windows(server: WebServer, client: Client) -> None:
    starts, ends = _instant(timedelta(days=1)), _instant(timedelta(days=1, hours=2))
    one_off = client.create_maintenance_window(
        {"name": "upgrade", "starts_at": starts, "ends_at": ends}
    )
    assert isinstance(one_off, MaintenanceWindow)
    assert (one_off.name, one_off.starts_at, one_off.ends_at, one_off.cron) == (
        "upgrade",
        starts,
        ends,
        None,
    )
    weekly = client.create_maintenance_window(
        {"name": "sunday", "cron": "0 3 * * 0", "timezone": "Europe/Amsterdam", "duration_s": 3600}
    )
    assert (weekly.cron, weekly.timezone, weekly.duration_s) == (
        "0 3 * * 0",
        "Europe/Amsterdam",
        3600,
    )
    assert {w.id for w in client.list_maintenance_windows()} == {one_off.id, weekly.id}
    assert client.get_maintenance_window(weekly.id) == weekly

    with pytest.raises(ValidationError) as bad:
        client.create_maintenance_window({"name": "x", "cron": "0 99 * * *", "duration_s": 600})
    assert "cron" in bad.value.detail

    outsider = Client(server.url, make_tenant("outsider").token)
    with pytest.raises(NotFound):
        outsider.delete_maintenance_window(one_off.id)
    with pytest.raises(NotFound):
        outsider.get_maintenance_window(one_off.id)

    client.delete_maintenance_window(one_off.id)
    with pytest.raises(NotFound):
        client.get_maintenance_window(one_off.id)
    assert [w.id for w in client.list_maintenance_windows()] == [weekly.id]


def test_the_new_models_match_the_servers_openapi_document(server: WebServer) -> None:
    status, _, body = server.request("GET", "/v1/openapi.json")
    assert status == 200
    schemas = json.loads(body)["components"]["schemas"]
    for model, component in [
        (Calendar, "CalendarOutDoc"),
        (CalendarDate, "CalendarDateDoc"),
        (AlertChannel, "ChannelOutDoc"),
        (MaintenanceWindow, "WindowOutDoc"),
    ]:
        documented = set(schemas[component]["properties"])
        named = {f.name for f in dataclasses.fields(model)} - {"raw"}
        assert named <= documented, f"{model.__name__}: {sorted(named - documented)}"
