"""The Python client's run control against a live gunicorn: rerun, backfills (plan,
run, list across pages, get, cancel), bulk operations (worked in the request, and
left running for the pump: this module's server works at most BULK_SYNC_MAX items
in a request and runs no beat), and a schedule's health."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.support.client_support import TARGET, definition, live_server, make_tenant
from tests.support.procs import WebServer

from scheduler_client import Client, Conflict, NotFound, ValidationError  # isort: skip
from scheduler_client.models import Backfill, Execution, Operation  # isort: skip

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SYNC_MAX = 2


@pytest.fixture(scope="module")
def server(
    django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebServer]:
    """A live server working at most two bulk items in the request (more: an operation)."""
    with (
        django_db_blocker.unblock(),
        live_server(tmp_path_factory.mktemp("web"), BULK_SYNC_MAX=str(SYNC_MAX)) as web,
    ):
        yield web


@pytest.fixture
def outsider(server: WebServer, db: Any) -> Iterator[Client]:
    with Client(server.url, make_tenant("outsider").token) as c:
        yield c


def _z(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def _past_hours(count: int, days_ago: int = 2) -> tuple[str, str]:
    """[start, end) spanning `count` whole hours, days in the past (any time of day)."""
    start = (datetime.now(UTC) - timedelta(days=days_ago)).replace(
        minute=0, second=0, microsecond=0
    )
    return _z(start), _z(start + timedelta(hours=count))


def test_rerun_a_final_execution(client: Client, outsider: Client) -> None:
    schedule = client.create_schedule(definition("hourly", "0 * * * *"))
    first = client.trigger_schedule(schedule.id)
    with pytest.raises(Conflict) as active:
        client.rerun_execution(first.id)  # not final yet
    assert first.state is not None and first.state in active.value.message

    client.cancel_execution(first.id)
    rerun = client.rerun_execution(first.id)
    assert isinstance(rerun, Execution)
    assert rerun.id == first.id and rerun.attempt == (first.attempt or 0) + 1
    assert rerun.state not in ("cancelled", None)

    client.cancel_execution(first.id)
    edited = client.rerun_execution(
        first.id, target=TARGET | {"url": "https://billing.internal/v2"}
    )
    assert edited.attempt == (rerun.attempt or 0) + 1

    client.cancel_execution(first.id)
    with pytest.raises(ValidationError) as bad:
        client.rerun_execution(first.id, target={"type": "carrier-pigeon"})
    assert "target" in json.dumps(bad.value.detail)
    assert client.get_execution(first.id).attempt == edited.attempt  # nothing re-run
    with pytest.raises(NotFound):
        outsider.rerun_execution(first.id)  # another tenant's execution does not exist


def test_a_backfill_planned_run_listed_and_cancelled(client: Client, outsider: Client) -> None:
    schedule = client.create_schedule(definition("hourly", "0 * * * *", timezone="UTC"))
    start, end = _past_hours(5)
    plan = client.plan_backfill(schedule.id, start, end)
    assert plan["total"] == 5 and plan["occurrences"][0]["scheduled_for"] == start
    assert plan["counts"]["create"] == 5, plan["counts"]
    assert list(client.list_backfills(schedule.id)) == []  # the dry run wrote nothing

    backfill = client.backfill_schedule(schedule.id, start, end, max_concurrent=2, order="newest")
    assert isinstance(backfill, Backfill)
    assert (backfill.range_from, backfill.range_to, backfill.state) == (start, end, "running")
    assert (backfill.max_concurrent, backfill.order) == (2, "newest")
    assert backfill.progress is not None and backfill.progress["total"] == 5
    assert client.get_backfill(backfill.id).counts == backfill.counts

    earlier = client.backfill_schedule(schedule.id, *_past_hours(2, days_ago=3))
    listed = [b.id for b in client.list_backfills(schedule.id, page_size=1)]
    assert sorted(listed) == sorted([backfill.id, earlier.id])  # two pages, each once

    cancelled = client.cancel_backfill(backfill.id)
    assert cancelled.state == "cancelled" and cancelled.cancelled_by
    assert client.cancel_backfill(backfill.id).state == "cancelled"  # again: unchanged

    with pytest.raises(ValidationError) as backwards:
        client.plan_backfill(schedule.id, end, start)
    assert "to" in backwards.value.detail
    with pytest.raises(NotFound):
        outsider.get_backfill(backfill.id)
    with pytest.raises(NotFound):
        outsider.plan_backfill(schedule.id, start, end)


def test_bulk_operations_in_the_request_and_left_running(client: Client, outsider: Client) -> None:
    ids = [client.create_schedule(definition(f"s{i}")).id for i in range(3)]

    preview = client.preview_bulk_schedules("pause", ids=ids[:2])
    assert preview["dry_run"] is True and preview["found"] == 2
    assert not any(s.paused for s in client.list_schedules())  # nothing written

    done = client.bulk_schedules("pause", ids=ids[:2], reason="freeze")
    assert isinstance(done, Operation)
    assert (done.state, done.total, done.succeeded, done.reason) == ("done", 2, 2, "freeze")
    assert [item["id"] for item in done.items or []] == ids[:2]
    assert {s.id for s in client.list_schedules(paused=True)} == set(ids[:2])
    with pytest.raises(Conflict):
        client.cancel_operation(done.id)  # finished: nothing to cancel

    resumed = client.bulk_schedules("resume", filters={"paused": True})  # the two paused
    assert (resumed.state, resumed.total, resumed.succeeded) == ("done", 2, 2)
    assert resumed.filter == {"paused": True}
    assert list(client.list_schedules(paused=True)) == []

    more = client.bulk_schedules("trigger", ids=ids)  # three: more than the server works inline
    assert (more.state, more.total) == ("running", 3)
    first_page = client.get_operation(more.id, page_size=1)
    assert first_page.items is not None and len(first_page.items) == 1 and first_page.next_cursor
    items = list(client.operation_items(more.id, page_size=1))
    assert [item["position"] for item in items] == sorted(item["position"] for item in items)
    assert {item["id"] for item in items} == set(ids)
    stopped = client.cancel_operation(more.id)
    assert (stopped.state, stopped.cancelled) == ("cancelled", 3)
    assert client.cancel_operation(more.id).state == "cancelled"  # again: unchanged

    execution = client.trigger_schedule(ids[2])
    cancelled = client.bulk_executions("cancel", ids=[execution.id], reason="not needed")
    assert (cancelled.state, cancelled.object_type, cancelled.succeeded) == (
        "done",
        "execution",
        1,
    )
    assert client.get_execution(execution.id).state == "cancelled"

    with pytest.raises(ValidationError) as bad:
        client.bulk_schedules("explode", ids=ids)
    assert "action" in bad.value.detail
    with pytest.raises(NotFound):
        outsider.get_operation(more.id)  # another tenant's operation does not exist


def test_schedule_health(client: Client, outsider: Client) -> None:
    schedule = client.create_schedule(definition("nightly", "30 2 * * *"))
    health = client.schedule_health(schedule.id)
    assert health["consecutive_failures"] == 0 and health["last_run"] is None
    assert health["next_run_at"] == schedule.next_run_at
    assert client.get_schedule(schedule.id).health == health
    with pytest.raises(NotFound):
        outsider.schedule_health(schedule.id)


def test_the_run_control_models_match_the_servers_openapi_document(server: WebServer) -> None:
    status, _, body = server.request("GET", "/v1/openapi.json")
    assert status == 200
    schemas = json.loads(body)["components"]["schemas"]
    renamed = {"range_from": "from", "range_to": "to"}
    for model, component in [(Backfill, "BackfillOutDoc"), (Operation, "OperationPageDoc")]:
        documented = set(schemas[component]["properties"])
        named = {renamed.get(f.name, f.name) for f in dataclasses.fields(model)} - {"raw"}
        assert named <= documented, f"{model.__name__}: {sorted(named - documented)}"
