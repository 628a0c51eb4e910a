"""The schedules API: the seed's contract, lifecycle, optimistic concurrency, pagination."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from dispatch.models import Execution, ExecutionEvent, Schedule
from dispatch.partitioning import partition_for
from tenants.models import AuditEvent

pytestmark = pytest.mark.django_db


def create(api: APIClient, body: dict[str, Any]) -> dict[str, Any]:
    res = api.post("/v1/schedules", body, format="json")
    assert res.status_code == 201, res.content
    return res.json()


def test_seed_example_is_accepted_as_written(api: APIClient, seed_example: dict[str, Any]) -> None:
    body = create(api, seed_example)
    assert body["name"] == "nightly-demurrage-ROTTERDAM"
    assert body["tenant"] == "billing"
    assert body["kind"] == "cron"
    assert body["timezone"] == "Europe/Amsterdam"
    assert body["target"]["url"] == "https://billing.internal/jobs/demurrage"
    assert body["target"]["timeout_s"] == 900
    assert body["retry"] == {
        "max_attempts": 5,
        "backoff": "exponential",
        "initial_s": 30,
        "max_s": 3600,
    }
    assert (
        body["concurrency"] == "forbid"
        and body["misfire"] == "run_once"
        and body["jitter_s"] == 120
    )
    assert body["version"] == 1
    # midnight Amsterdam is 22:00 or 23:00 UTC
    next_run = datetime.fromisoformat(body["next_run_at"].replace("Z", "+00:00"))
    assert next_run > datetime.now(UTC) and next_run.minute == 0 and next_run.hour in (22, 23)
    stored = Schedule.objects.get(pk=body["id"])
    assert stored.next_run_at == next_run
    assert stored.partition == partition_for(stored.id)  # one of the fixed logical partitions


def test_get_returns_etag_and_list_paginates_by_keyset(
    api: APIClient, seed_example: dict[str, Any]
) -> None:
    ids = []
    for i in range(7):
        ids.append(create(api, seed_example | {"name": f"s{i}"})["id"])
    res = api.get(f"/v1/schedules/{ids[0]}")
    assert res.status_code == 200 and res["ETag"] == '"1"'
    seen: list[str] = []
    cursor = None
    while True:
        url = "/v1/schedules?limit=3" + (f"&cursor={cursor}" if cursor else "")
        page = api.get(url).json()
        seen += [s["id"] for s in page["results"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert seen == list(reversed(ids))
    assert [s["name"] for s in api.get("/v1/schedules?search=s3").json()["results"]] == ["s3"]


def test_patch_with_stale_version_is_409_and_changes_nothing(
    api: APIClient, seed_example: dict[str, Any]
) -> None:
    sid = create(api, seed_example)["id"]
    ok = api.patch(f"/v1/schedules/{sid}", {"jitter_s": 5}, format="json", HTTP_IF_MATCH='"1"')
    assert ok.status_code == 200 and ok.json()["version"] == 2 and ok.json()["jitter_s"] == 5
    stale = api.patch(f"/v1/schedules/{sid}", {"jitter_s": 9}, format="json", HTTP_IF_MATCH='"1"')
    assert stale.status_code == 409
    assert stale.json()["error"]["code"] == "conflict"
    stale_body = api.patch(f"/v1/schedules/{sid}", {"jitter_s": 9, "version": 1}, format="json")
    assert stale_body.status_code == 409
    assert Schedule.objects.get(pk=sid).jitter_s == 5


def test_patch_changing_cron_recomputes_next_run(
    api: APIClient, seed_example: dict[str, Any]
) -> None:
    sid = create(api, seed_example)["id"]
    res = api.patch(
        f"/v1/schedules/{sid}",
        {"cron": "*/5 * * * *", "timezone": "UTC", "version": 1},
        format="json",
    )
    assert res.status_code == 200, res.content
    nxt = datetime.fromisoformat(res.json()["next_run_at"].replace("Z", "+00:00"))
    assert nxt.minute % 5 == 0 and nxt - datetime.now(UTC) <= timedelta(minutes=5)


def test_pause_resume_trigger_and_delete(api: APIClient, seed_example: dict[str, Any]) -> None:
    sid = create(api, seed_example)["id"]
    until = (datetime.now(UTC) + timedelta(hours=2)).isoformat()
    paused = api.post(
        f"/v1/schedules/{sid}:pause", {"reason": "deploy freeze", "until": until}, format="json"
    )
    assert paused.status_code == 200 and paused.json()["paused"] is True
    assert paused.json()["paused_reason"] == "deploy freeze"
    resumed = api.post(f"/v1/schedules/{sid}:resume")
    assert resumed.status_code == 200 and resumed.json()["paused"] is False

    trig = api.post(f"/v1/schedules/{sid}:trigger")
    assert trig.status_code == 202
    execution = Execution.objects.get(pk=trig.json()["execution_id"])
    assert execution.trigger == "manual" and execution.state == "scheduled"
    assert execution.scheduled_for == execution.due_at

    kinds = list(ExecutionEvent.objects.filter(schedule_id=sid).values_list("kind", flat=True))
    assert kinds == ["created", "paused", "resumed", "triggered"]

    assert api.delete(f"/v1/schedules/{sid}").status_code == 204
    assert api.get(f"/v1/schedules/{sid}").status_code == 404
    execution.refresh_from_db()
    assert execution.state == "cancelled" and execution.reason_code == "schedule_deleted"
    # the name is free again after deletion
    create(api, seed_example)
    actions = list(
        AuditEvent.objects.filter(object_id=sid).order_by("id").values_list("action", flat=True)
    )
    assert actions == [
        "schedule.create",
        "schedule.pause",
        "schedule.resume",
        "schedule.trigger",
        "schedule.delete",
    ]


def test_preview_returns_occurrences_after_from(
    api: APIClient, seed_example: dict[str, Any]
) -> None:
    sid = create(api, seed_example)["id"]
    res = api.get(f"/v1/schedules/{sid}/preview?count=3&from=2026-03-28T00:00:00Z")
    assert res.status_code == 200, res.content
    body = res.json()
    assert [o["scheduled_for"] for o in body["occurrences"]] == [
        "2026-03-28T23:00:00Z",
        "2026-03-29T22:00:00Z",
        "2026-03-30T22:00:00Z",
    ]
    assert body["occurrences"][0]["local"] == "2026-03-29T00:00:00+01:00"
    assert body["occurrences"][1]["local"] == "2026-03-30T00:00:00+02:00"
    for occ in body["occurrences"]:
        due = datetime.fromisoformat(occ["due_at"].replace("Z", "+00:00"))
        nominal = datetime.fromisoformat(occ["scheduled_for"].replace("Z", "+00:00"))
        assert timedelta(0) <= due - nominal <= timedelta(seconds=120)
    assert body["resolved"] == "0 0 * * *"
    assert body["description"]
    many = api.get(f"/v1/schedules/{sid}/preview?count=1000")
    assert many.status_code == 200 and len(many.json()["occurrences"]) == 1000
    assert api.get(f"/v1/schedules/{sid}/preview?count=0").status_code == 400
    assert api.get(f"/v1/schedules/{sid}/preview?from=yesterday").status_code == 400


def test_one_off_schedule_with_run_at(api: APIClient, seed_example: dict[str, Any]) -> None:
    body = seed_example | {"cron": None, "run_at": "2030-01-01T09:00:00Z", "name": "once"}
    created = create(api, body)
    assert created["kind"] == "once" and created["next_run_at"] == "2030-01-01T09:00:00Z"


def test_executions_list_filters_and_detail_has_timeline(
    api: APIClient, seed_example: dict[str, Any]
) -> None:
    sid = create(api, seed_example)["id"]
    ex_id = api.post(f"/v1/schedules/{sid}:trigger").json()["execution_id"]
    listed = api.get(f"/v1/executions?schedule_id={sid}&status=scheduled").json()["results"]
    assert [e["execution_id"] for e in listed] == [ex_id]
    assert api.get(f"/v1/executions?schedule_id={sid}&status=failed").json()["results"] == []
    detail = api.get(f"/v1/executions/{ex_id}").json()
    assert detail["state"] == "scheduled" and [e["kind"] for e in detail["events"]] == ["triggered"]
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat().replace("+00:00", "Z")
    assert api.get(f"/v1/executions?from={future}").json()["results"] == []
    assert api.get("/v1/executions?status=bogus").status_code == 400


def test_execution_timeline_has_the_scheduled_and_published_steps_in_time_order(
    api: APIClient, seed_example: dict[str, Any]
) -> None:
    from dispatch.models import Execution, ExecutionEvent

    sid = create(api, seed_example)["id"]
    ex_id = api.post(f"/v1/schedules/{sid}:trigger").json()["execution_id"]
    e = Execution.objects.get(pk=ex_id)
    Execution.objects.filter(pk=ex_id).update(
        state="succeeded",
        queue="default.short",
        enqueued_at=e.scheduled_for + timedelta(milliseconds=50),
        started_at=e.scheduled_for + timedelta(seconds=1),
        finished_at=e.scheduled_for + timedelta(seconds=2),
    )
    ExecutionEvent.objects.create(
        tenant=e.tenant,
        schedule=e.schedule,
        execution=e,
        kind="claimed",
        message="claimed by worker w1 with token 1",
        at=e.scheduled_for + timedelta(seconds=1, milliseconds=1),
    )
    detail = api.get(f"/v1/executions/{ex_id}").json()
    timeline = detail["timeline"]
    kinds = [step["kind"] for step in timeline]
    for kind in ("scheduled", "published", "started", "claimed", "finished", "triggered"):
        assert kind in kinds, kind
    assert kinds.index("scheduled") < kinds.index("published") < kinds.index("claimed")
    assert kinds.index("claimed") < kinds.index("finished")
    ats = [datetime.fromisoformat(step["at"].replace("Z", "+00:00")) for step in timeline]
    assert ats == sorted(ats)
    published = timeline[kinds.index("published")]
    assert published["message"] == "published to queue default.short"
    assert published["at"].endswith("Z")
