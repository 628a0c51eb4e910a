"""Backfills through the API and the control pump (in-process, real PostgreSQL):
the bad-input answers, the plan of each occurrence against the records, the DST
weeks of Europe/Amsterdam (dry run == what the pump creates == the preview),
the concurrency and overlap caps of the pump, cancel, and tenant isolation."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from dispatch import services
from dispatch.models import Backfill, Execution, ExecutionEvent, Schedule
from dispatch.scheduler import backfills as pump
from dispatch.scheduler.control import pump_once
from dispatch.states import ACTIVE_STATES, ControlState
from tenants.models import AuditEvent, Tenant
from tenants.roles import Role
from tests.support.instants import zulu
from tests.support.rows import execution_row

pytestmark = pytest.mark.django_db

TARGET = {"type": "http", "url": "https://billing.internal/hook"}
AMS = "Europe/Amsterdam"
# The last week of October 2026: clocks go back on Sunday the 25th, 03:00 CEST -> 02:00 CET.
OCTOBER = ("2026-10-22T00:00:00+02:00", "2026-10-29T00:00:00+01:00")
# The last week of March 2026: clocks go forward on Sunday the 29th, 02:00 CET -> 03:00 CEST.
MARCH = ("2026-03-26T00:00:00+01:00", "2026-04-02T00:00:00+02:00")


def make(
    api: APIClient, cron: str = "0 * * * *", *, tz: str = AMS, concurrency: str = "allow"
) -> str:
    res = api.post(
        "/v1/schedules",
        {
            "name": f"bf-{uuid.uuid4().hex[:8]}",
            "cron": cron,
            "timezone": tz,
            "target": TARGET,
            "concurrency": concurrency,
        },
        format="json",
    )
    assert res.status_code == 201, res.content
    return str(res.json()["id"])


def backfill(api: APIClient, sid: str, **body: Any) -> Any:
    return api.post(f"/v1/schedules/{sid}:backfill", body, format="json")


def assert_400(res: Any, field: str) -> dict[str, Any]:
    assert res.status_code == 400, (res.status_code, res.content[:400])
    err: dict[str, Any] = res.json()["error"]
    assert field in err["detail"], err
    return err


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def preview(api: APIClient, sid: str, start: str, end: str) -> list[str]:
    """GET /v1/schedules/{id}/preview from just before `start`, cut at `end`."""
    after = zulu(instant(start) - timedelta(seconds=1))
    res = api.get(f"/v1/schedules/{sid}/preview?from={after}&count=1000")
    assert res.status_code == 200, res.content
    limit = instant(end)
    return [
        o["scheduled_for"]
        for o in res.json()["occurrences"]
        if datetime.fromisoformat(o["scheduled_for"]) < limit
    ]


def finish_active(backfill_id: Any) -> int:
    """What workers would do: the backfill's released runs end (succeeded)."""
    return Execution.objects.filter(backfill_id=backfill_id, state__in=ACTIVE_STATES).update(
        state="succeeded"
    )


def pump_to_end(backfill_id: Any, *, rounds: int = 500) -> None:
    for _ in range(rounds):
        pump_once()
        finish_active(backfill_id)
        if Backfill.objects.get(pk=backfill_id).state != ControlState.RUNNING:
            return
    raise AssertionError(f"backfill {backfill_id} still running after {rounds} pump rounds")


# --- bad input ----------------------------------------------------------------------------


def test_range_and_parameters_are_checked_naming_the_field(api: APIClient) -> None:
    sid = make(api)
    start, end = OCTOBER
    assert_400(backfill(api, sid, **{"from": end, "to": start}), "to")
    assert_400(backfill(api, sid, **{"from": start, "to": start}), "to")
    err = assert_400(backfill(api, sid, **{"from": start, "to": "2099-01-01T00:00:00Z"}), "to")
    assert "future" in err["message"]
    assert_400(backfill(api, sid, to=end), "from")
    assert_400(backfill(api, sid, **{"from": "2026-10-22T00:00:00", "to": end}), "from")
    for value in (0, 101, "many"):
        assert_400(
            backfill(api, sid, **{"from": start, "to": end, "max_concurrent": value}),
            "max_concurrent",
        )
    assert_400(backfill(api, sid, **{"from": start, "to": end, "reprocess": "some"}), "reprocess")
    assert_400(backfill(api, sid, **{"from": start, "to": end, "order": "random"}), "order")
    assert_400(backfill(api, sid, **{"from": start, "to": end, "dryrun": True}), "dryrun")
    assert not Backfill.objects.exists()


def test_a_range_over_the_bound_is_400_naming_to_with_the_end_that_fits(
    api: APIClient, settings: Any
) -> None:
    sid = make(api, "* * * * *", tz="UTC")
    # The real bound: 8 days of a per-minute schedule are 11,520 occurrences.
    err = assert_400(
        backfill(api, sid, **{"from": "2026-11-01T00:00:00Z", "to": "2026-11-09T00:00:00Z"}), "to"
    )
    assert "10000" in err["message"], err
    # At the bound exactly it is accepted; one more is refused, naming where to end.
    settings.BACKFILL_MAX_OCCURRENCES = 10
    ok = backfill(
        api, sid, **{"from": "2026-11-01T00:00:00Z", "to": "2026-11-01T00:10:00Z", "dry_run": True}
    )
    assert ok.status_code == 200 and ok.json()["total"] == 10, ok.content
    err = assert_400(
        backfill(api, sid, **{"from": "2026-11-01T00:00:00Z", "to": "2026-11-01T00:10:01Z"}), "to"
    )
    assert "2026-11-01T00:10:00+00:00" in err["message"], err


def test_a_one_off_job_cannot_be_backfilled(api: APIClient) -> None:
    job = api.post("/v1/jobs", {"target": TARGET, "run_at": "2026-12-30T00:00:00Z"}, format="json")
    assert job.status_code == 201, job.content
    start, end = OCTOBER
    assert_400(backfill(api, job.json()["id"], **{"from": start, "to": end}), "schedule")


def test_viewer_reads_operator_writes_and_another_tenants_backfill_is_404(
    api: APIClient,
    api_for: Callable[[Tenant, Role], APIClient],
    tenant: Tenant,
    outsider_api: APIClient,
) -> None:
    sid = make(api)
    start, end = OCTOBER
    viewer = api_for(tenant, Role.VIEWER)
    assert backfill(viewer, sid, **{"from": start, "to": end, "dry_run": True}).status_code == 403
    operator = api_for(tenant, Role.OPERATOR)
    created = backfill(operator, sid, **{"from": start, "to": end})
    assert created.status_code == 202, created.content
    bid = created.json()["id"]
    assert created["Location"] == f"/v1/backfills/{bid}"
    assert viewer.get(f"/v1/backfills/{bid}").status_code == 200
    assert viewer.get(f"/v1/schedules/{sid}/backfills").json()["results"][0]["id"] == bid
    assert viewer.post(f"/v1/backfills/{bid}:cancel").status_code == 403
    # Another tenant: every path is the same 404 as a missing id.
    for res in (
        outsider_api.get(f"/v1/backfills/{bid}"),
        outsider_api.post(f"/v1/backfills/{bid}:cancel"),
        outsider_api.get(f"/v1/schedules/{sid}/backfills"),
        backfill(outsider_api, sid, **{"from": start, "to": end, "dry_run": True}),
        api.get("/v1/backfills/00000000-0000-0000-0000-000000000000"),
        api.get("/v1/backfills/not-a-uuid"),
    ):
        assert res.status_code == 404, (res.status_code, res.content[:200])
        assert res.json()["error"]["code"] == "not_found"
    assert Backfill.objects.get(pk=bid).state == ControlState.RUNNING


# --- the plan -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cron,week,expected",
    [
        # Both real hours of the repeated 02:00 run (the hour field is `*`): 7 * 24 + 1.
        ("0 * * * *", OCTOBER, 169),
        # A fixed 02:30 runs once on the fall-back day, at the first 02:30 (CEST).
        ("30 2 * * *", OCTOBER, 7),
        # 02:00-03:00 does not exist on the 29th: 7 * 24 - 1.
        ("0 * * * *", MARCH, 167),
        # ...and the 02:30 run moves to 03:00 CEST, the first instant after the gap.
        ("30 2 * * *", MARCH, 7),
        # Hashed fields: the minute this schedule's id gives, in every real hour.
        ("H * * * *", OCTOBER, 169),
    ],
)
def test_dst_week_dry_run_equals_the_preview_and_what_the_pump_creates(
    api: APIClient, cron: str, week: tuple[str, str], expected: int
) -> None:
    sid = make(api, cron)
    start, end = week
    dry = backfill(api, sid, **{"from": start, "to": end, "dry_run": True, "max_concurrent": 100})
    assert dry.status_code == 200, dry.content
    plan = dry.json()
    planned = [o["scheduled_for"] for o in plan["occurrences"]]
    assert len(planned) == expected == plan["total"] == plan["counts"]["create"]
    assert {o["action"] for o in plan["occurrences"]} == {"create"}
    if cron.startswith("H"):
        upcoming = Schedule.objects.get(pk=sid).next_run_at
        assert upcoming is not None
        assert {datetime.fromisoformat(at).minute for at in planned} == {upcoming.minute}
    assert planned == preview(api, sid, start, end)
    assert not Execution.objects.filter(schedule_id=sid).exists()  # a dry run writes nothing
    assert not Backfill.objects.exists()
    if cron == "30 2 * * *" and week == OCTOBER:
        fold = [o for o in plan["occurrences"] if o["local"].startswith("2026-10-25")]
        assert [o["local"] for o in fold] == ["2026-10-25T02:30:00+02:00"]
    if cron == "30 2 * * *" and week == MARCH:
        gap = [o for o in plan["occurrences"] if o["local"].startswith("2026-03-29")]
        assert [o["local"] for o in gap] == ["2026-03-29T03:00:00+02:00"]

    real = backfill(api, sid, **{"from": start, "to": end, "max_concurrent": 100})
    assert real.status_code == 202, real.content
    bid = real.json()["id"]
    pump_to_end(bid)
    rows = Execution.objects.filter(schedule_id=sid).order_by("scheduled_for")
    assert [zulu(e.scheduled_for) for e in rows] == planned
    assert {(e.trigger, str(e.backfill_id), e.attempt) for e in rows} == {("backfill", bid, 1)}
    got = api.get(f"/v1/backfills/{bid}").json()
    assert got["state"] == "done" and got["finished_at"] is not None
    progress = got["progress"]
    assert progress["total"] == progress["position"] == progress["created"] == expected
    assert progress["done"] == expected and progress["active"] == progress["failed"] == 0


def test_each_occurrence_gets_its_action_from_its_record_and_reprocess(
    api: APIClient, tenant: Tenant
) -> None:
    sid = make(api, "0 0 * * *", tz="UTC")
    schedule = Schedule.objects.get(pk=sid)
    day = datetime(2026, 11, 1, tzinfo=UTC)
    states = ["succeeded", "dead", "skipped", "cancelled", "running", None, "retry_scheduled"]
    ids = {}
    for i, state in enumerate(states):
        if state:
            ids[i] = str(execution_row(schedule, day + timedelta(days=i), state=state).id)
    body = {"from": "2026-11-01T00:00:00Z", "to": "2026-11-08T00:00:00Z", "dry_run": True}
    expected = {
        "none": ["skip-existing"] * 4 + ["skip-active", "create", "skip-active"],
        "failed": [
            "skip-existing",
            "rerun",
            "rerun",
            "rerun",
            "skip-active",
            "create",
            "skip-active",
        ],
        "all": ["rerun"] * 4 + ["skip-active", "create", "skip-active"],
    }
    for reprocess, actions in expected.items():
        plan = backfill(api, sid, **body, reprocess=reprocess).json()
        assert [o["action"] for o in plan["occurrences"]] == actions, reprocess
        assert [o["execution_id"] for o in plan["occurrences"]] == [ids.get(i) for i in range(7)]
        assert sum(plan["counts"].values()) == 7
    newest = backfill(api, sid, **body, order="newest").json()["occurrences"]
    assert [o["scheduled_for"] for o in newest] == [
        zulu(day + timedelta(days=i)) for i in range(6, -1, -1)
    ]


def test_skip_paused_leaves_the_paused_times_alone(api: APIClient, admin_principal: Any) -> None:
    sid = make(api, "0 * * * *", tz="UTC")
    services.schedule_pause(actor=admin_principal, schedule_id=sid, reason="freeze")
    services.schedule_resume(actor=admin_principal, schedule_id=sid)
    # The pause and resume happened "now" (the transaction's clock); place them at
    # 03:00 and 06:00 of a past day, as if recorded then.
    events = ExecutionEvent.objects.filter(schedule_id=sid, kind__in=("paused", "resumed"))
    day = datetime(2026, 11, 2, tzinfo=UTC)
    events.filter(kind="paused").update(at=day + timedelta(hours=3))
    events.filter(kind="resumed").update(at=day + timedelta(hours=6))
    body = {"from": "2026-11-02T00:00:00Z", "to": "2026-11-02T08:00:00Z", "dry_run": True}
    plain = backfill(api, sid, **body).json()
    assert plain["counts"]["create"] == 8
    skipping = backfill(api, sid, **body, skip_paused=True).json()
    actions = [o["action"] for o in skipping["occurrences"]]
    # Paused at 03:00 (covered) until 06:00 (the resume: that run is not covered).
    assert actions == ["create"] * 3 + ["skip-paused-time"] * 3 + ["create"] * 2


# --- the pump -----------------------------------------------------------------------------


def test_the_pump_releases_up_to_max_concurrent_and_writes_the_records(
    api: APIClient, tenant: Tenant
) -> None:
    sid = make(api, "0 * * * *", tz="UTC")
    body = {"from": "2026-11-03T00:00:00Z", "to": "2026-11-03T10:00:00Z", "max_concurrent": 3}
    created = backfill(api, sid, **body)
    bid = created.json()["id"]
    assert created.json()["counts"]["create"] == 10
    audit = AuditEvent.objects.get(action="backfill.create", object_id=bid)
    event = ExecutionEvent.objects.get(schedule_id=sid, kind="backfilled")
    assert event.data["backfill_id"] == bid and event.data["audit_id"] == audit.pk
    assert audit.after["counts"]["create"] == 10 and audit.after["max_concurrent"] == 3

    assert pump.pump_once() == 3
    assert pump.pump_once() == 0  # three active: the cap holds
    rows = list(Execution.objects.filter(backfill_id=bid))
    assert len(rows) == 3 and {e.state for e in rows} == {"scheduled"}
    assert all(e.partition == Schedule.objects.get(pk=sid).partition for e in rows)
    with connection.cursor() as cur:
        cur.execute("SELECT statement_timestamp()")
        now = cur.fetchone()[0]
    assert all(e.due_at <= now and e.scheduled_for < e.due_at for e in rows)
    # Oldest first.
    assert sorted(zulu(e.scheduled_for) for e in rows) == [
        f"2026-11-03T0{h}:00:00Z" for h in range(3)
    ]
    Execution.objects.filter(pk=rows[0].pk).update(state="dead")
    assert pump.pump_once() == 1
    progress = api.get(f"/v1/backfills/{bid}").json()["progress"]
    assert (progress["position"], progress["created"], progress["active"], progress["failed"]) == (
        4,
        4,
        3,
        1,
    )
    pump_to_end(bid)
    # Each created run's timeline names the backfill that made it.
    noted = ExecutionEvent.objects.filter(
        schedule_id=sid, kind="backfilled", execution__isnull=False
    )
    assert noted.count() == 10 and {e.data["backfill_id"] for e in noted} == {bid}
    final = api.get(f"/v1/backfills/{bid}").json()
    assert final["state"] == "done"
    assert (
        final["progress"]["created"],
        final["progress"]["done"],
        final["progress"]["failed"],
    ) == (10, 9, 1)


def test_overlap_forbid_releases_one_run_at_a_time_counting_other_runs(
    api: APIClient, tenant: Tenant
) -> None:
    sid = make(api, "0 * * * *", tz="UTC", concurrency="forbid")
    schedule = Schedule.objects.get(pk=sid)
    bid = backfill(
        api,
        sid,
        **{"from": "2026-11-04T00:00:00Z", "to": "2026-11-04T05:00:00Z", "max_concurrent": 5},
    ).json()["id"]
    # A run of the schedule that is not the backfill's is active: nothing is released.
    other = execution_row(schedule, datetime(2026, 11, 30, tzinfo=UTC), state="running")
    assert pump.pump_once() == 0
    Execution.objects.filter(pk=other.pk).update(state="succeeded")
    assert pump.pump_once() == 1
    assert pump.pump_once() == 0
    assert Execution.objects.filter(backfill_id=bid).count() == 1
    pump_to_end(bid)
    assert Execution.objects.filter(backfill_id=bid, trigger="backfill").count() == 5


def test_an_occurrence_that_got_a_row_meanwhile_is_skipped_not_duplicated(
    api: APIClient, tenant: Tenant
) -> None:
    sid = make(api, "0 * * * *", tz="UTC")
    schedule = Schedule.objects.get(pk=sid)
    bid = backfill(
        api,
        sid,
        **{"from": "2026-11-05T00:00:00Z", "to": "2026-11-05T04:00:00Z", "max_concurrent": 10},
    ).json()["id"]
    late = execution_row(schedule, datetime(2026, 11, 5, 2, tzinfo=UTC), state="succeeded")
    pump_to_end(bid)
    b = Backfill.objects.get(pk=bid)
    assert (b.created, b.skipped, b.position) == (3, 1, 4)
    late.refresh_from_db()
    assert late.backfill_id is None and late.trigger == "cron"
    assert Execution.objects.filter(schedule_id=sid).count() == 4


def test_a_paused_schedule_holds_its_backfill_until_resumed(
    api: APIClient, admin_principal: Any
) -> None:
    sid = make(api, "0 * * * *", tz="UTC")
    bid = backfill(
        api, sid, **{"from": "2026-11-06T00:00:00Z", "to": "2026-11-06T02:00:00Z"}
    ).json()["id"]
    services.schedule_pause(actor=admin_principal, schedule_id=sid)
    assert pump.pump_once() == 0
    assert not Execution.objects.filter(backfill_id=bid).exists()
    services.schedule_resume(actor=admin_principal, schedule_id=sid)
    assert pump.pump_once() == 1


def test_cancel_stops_further_releases_and_is_idempotent(api: APIClient, tenant: Tenant) -> None:
    sid = make(api, "0 * * * *", tz="UTC")
    bid = backfill(
        api,
        sid,
        **{"from": "2026-11-07T00:00:00Z", "to": "2026-11-07T10:00:00Z", "max_concurrent": 2},
    ).json()["id"]
    assert pump.pump_once() == 2
    res = api.post(f"/v1/backfills/{bid}:cancel")
    assert res.status_code == 200, res.content
    body = res.json()
    assert body["state"] == "cancelled" and body["cancelled_by"] and body["finished_at"]
    assert AuditEvent.objects.filter(action="backfill.cancel", object_id=bid).count() == 1
    finish_active(bid)
    assert pump.pump_once() == 0
    assert Execution.objects.filter(schedule_id=sid).count() == 2  # the rest left alone
    again = api.post(f"/v1/backfills/{bid}:cancel")
    assert again.status_code == 200 and again.json()["state"] == "cancelled"
    assert AuditEvent.objects.filter(action="backfill.cancel", object_id=bid).count() == 1
    assert api.post(f"/v1/backfills/{bid}:cancel", {"why": "x"}, format="json").status_code == 400


def test_a_done_backfill_cannot_be_cancelled(api: APIClient, tenant: Tenant) -> None:
    sid = make(api, "0 * * * *", tz="UTC")
    bid = backfill(
        api, sid, **{"from": "2026-11-08T00:00:00Z", "to": "2026-11-08T01:00:00Z"}
    ).json()["id"]
    pump_to_end(bid)
    res = api.post(f"/v1/backfills/{bid}:cancel")
    assert res.status_code == 409, res.content
    assert "done" in res.json()["error"]["message"]


def test_a_deleted_schedules_backfill_ends_cancelled(api: APIClient, tenant: Tenant) -> None:
    sid = make(api, "0 * * * *", tz="UTC")
    bid = backfill(
        api, sid, **{"from": "2026-11-09T00:00:00Z", "to": "2026-11-09T05:00:00Z"}
    ).json()["id"]
    assert api.delete(f"/v1/schedules/{sid}").status_code == 204
    assert pump.pump_once() == 1
    b = Backfill.objects.get(pk=bid)
    assert b.state == ControlState.CANCELLED and b.cancelled_by == "system: schedule deleted"
    assert not Execution.objects.filter(backfill_id=bid).exists()


def test_list_pages_a_schedules_backfills_newest_first(api: APIClient, tenant: Tenant) -> None:
    sid = make(api, "0 * * * *", tz="UTC")
    ids = [
        backfill(
            api, sid, **{"from": f"2026-11-1{i}T00:00:00Z", "to": f"2026-11-1{i}T01:00:00Z"}
        ).json()["id"]
        for i in range(3)
    ]
    first = api.get(f"/v1/schedules/{sid}/backfills?limit=2").json()
    second = api.get(f"/v1/schedules/{sid}/backfills?limit=2&cursor={first['next_cursor']}").json()
    listed = [b["id"] for b in first["results"] + second["results"]]
    assert sorted(listed) == sorted(ids) and len(set(listed)) == 3
    assert second["next_cursor"] is None
    assert first["results"][0]["progress"]["total"] == 1 and "counts" not in first["results"][0]


def test_the_list_costs_the_same_queries_for_2_backfills_as_for_12(api: APIClient) -> None:
    sid = make(api, "0 * * * *", tz="UTC")

    made: list[str] = []

    def add(count: int) -> None:
        for _ in range(count):
            day = datetime(2026, 11, 1, tzinfo=UTC) + timedelta(days=len(made))
            res = backfill(api, sid, **{"from": zulu(day), "to": zulu(day + timedelta(hours=1))})
            made.append(res.json()["id"])
            pump_to_end(made[-1])  # each with an execution to count
            assert Execution.objects.filter(backfill_id=made[-1]).update(state="dead") == 1

    def queries(rows: int) -> int:
        api.get(f"/v1/schedules/{sid}/backfills")  # warm: the token's first use is not per row
        with CaptureQueriesContext(connection) as captured:
            res = api.get(f"/v1/schedules/{sid}/backfills")
        assert len(res.json()["results"]) == rows
        return len(captured.captured_queries)

    add(2)
    few = queries(2)
    add(10)
    assert queries(12) == few


def test_reprocess_failed_reruns_only_what_did_not_succeed(api: APIClient, tenant: Tenant) -> None:
    sid = make(api, "0 0 * * *", tz="UTC")
    schedule = Schedule.objects.get(pk=sid)
    day = datetime(2026, 11, 20, tzinfo=UTC)
    rows = {
        state: execution_row(schedule, day + timedelta(days=i), state=state)
        for i, state in enumerate(["succeeded", "dead", "skipped", "cancelled"])
    }
    created = backfill(
        api,
        sid,
        **{"from": "2026-11-20T00:00:00Z", "to": "2026-11-25T00:00:00Z", "reprocess": "failed"},
    )
    bid = created.json()["id"]
    assert created.json()["counts"] == {
        "create": 1,
        "skip-existing": 1,
        "rerun": 3,
        "skip-paused-time": 0,
        "skip-active": 0,
    }
    pump_to_end(bid)
    b = Backfill.objects.get(pk=bid)
    assert (b.created, b.rerun, b.skipped, b.state) == (1, 3, 1, ControlState.DONE)
    for state, row in rows.items():
        row.refresh_from_db()
        if state == "succeeded":
            assert (row.reruns, row.attempt, row.backfill_id) == (0, 1, None)
        else:
            # The same row, a new attempt chain, linked to the backfill.
            assert (row.reruns, row.attempt, row.attempt_base) == (1, 2, 1), state
            assert str(row.backfill_id) == bid and row.trigger == "cron"
    audits = AuditEvent.objects.filter(action="execution.rerun")
    assert audits.count() == 3
    # Re-run as the user who created the backfill.
    assert {a.actor_label for a in audits} == {b.created_by}
    assert Execution.objects.filter(schedule_id=sid).count() == 5


def test_a_rerun_entry_no_longer_final_is_skipped(api: APIClient, tenant: Tenant) -> None:
    sid = make(api, "0 0 * * *", tz="UTC")
    row = execution_row(
        Schedule.objects.get(pk=sid), datetime(2026, 11, 26, tzinfo=UTC), state="dead"
    )
    body = {"from": "2026-11-26T00:00:00Z", "to": "2026-11-27T00:00:00Z", "reprocess": "all"}
    bid = backfill(api, sid, **body).json()["id"]
    # Re-run by someone else between the plan and the pump: it is running now.
    Execution.objects.filter(pk=row.pk).update(state="running")
    assert pump.pump_once() == 1
    b = Backfill.objects.get(pk=bid)
    assert (b.rerun, b.skipped, b.position) == (0, 1, 1)
    row.refresh_from_db()
    assert (row.state, row.reruns, row.backfill_id) == ("running", 0, None)
