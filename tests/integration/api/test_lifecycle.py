"""Lifecycle bounds through the API and the worker's real finish statement: max_runs
counts succeeded occurrences once each, completes the schedule (visible, explained,
staged occurrences withdrawn, published ones skipped at claim), a PATCH that raises it
re-opens it; delete_after removes a one-off in the retention pass; bad values are 400s
naming the field with nothing saved."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from dispatch import explain, services
from dispatch.models import Execution, ExecutionEvent, Schedule
from dispatch.scheduler import retention
from dispatch.states import EventKind, ReasonCode
from dispatch.worker import leases
from tenants.models import AuditEvent
from tenants.roles import Principal
from tests.support.rows import execution_row
from tests.support.worker_support import db_now

pytestmark = pytest.mark.django_db
TARGET = {"type": "http", "url": "https://billing.internal/hook"}
CRON = {"cron": "* * * * *", "target": TARGET}


def create(api: APIClient, body: dict[str, Any]) -> dict[str, Any]:
    res = api.post("/v1/schedules", body, format="json")
    assert res.status_code == 201, res.content
    return dict(res.json())


def field_error(res: Any, name: str) -> str:
    assert res.status_code == 400, res.content
    detail = res.json()["error"]["detail"]
    assert name in detail, detail
    return str(detail[name])


def run(execution: Execution, state: str = "succeeded", attempt: int = 1) -> leases.Claim:
    """Claim and finish one attempt with the worker's own statements."""
    claim = leases.execution_claim(
        execution_id=str(execution.id), attempt=attempt, owner="test:1", lease_s=30
    )
    assert claim is not None
    assert leases.attempt_finish(claim=claim, state=state, events=[])
    return claim


def occurrence(schedule: Schedule, minutes_ago: int, **fields: Any) -> Execution:
    at = (db_now() - timedelta(minutes=minutes_ago)).replace(second=0, microsecond=0)
    return execution_row(schedule, at, **fields)


@pytest.mark.parametrize(
    ("value", "reason"),
    [(0, "1.."), (-3, "1.."), (True, "valid integer"), (10**9, "1.."), ("x", "valid integer")],
)
def test_bad_max_runs_is_400_naming_it_and_saves_nothing(
    api: APIClient, value: Any, reason: str
) -> None:
    before = Schedule.objects.count()
    res = api.post("/v1/schedules", CRON | {"name": "bad", "max_runs": value}, format="json")
    assert reason in field_error(res, "max_runs")
    assert Schedule.objects.count() == before


@pytest.mark.parametrize(
    ("value", "reason"),
    [("-1h", "negative"), ("99999d", "at most"), ("soon", "duration"), ("5", "unit")],
)
def test_bad_delete_after_is_400_naming_it(api: APIClient, value: str, reason: str) -> None:
    res = api.post("/v1/jobs", {"target": TARGET, "delete_after": value}, format="json")
    assert reason in field_error(res, "delete_after")
    batch = api.post(
        "/v1/jobs:batch",
        {"jobs": [{"target": TARGET, "delete_after": value, "idempotency_key": "k"}]},
        format="json",
    )
    assert batch.status_code == 200, batch.content  # one result per item, whatever each is
    [result] = batch.json()["results"]
    assert result["status"] == 400 and list(result["error"]["detail"]) == ["jobs[0].delete_after"]
    assert reason in result["error"]["detail"]["jobs[0].delete_after"][0]
    assert not Schedule.objects.filter(kind="once").exists()


def test_bounds_of_the_other_kind_are_400(api: APIClient) -> None:
    res = api.post("/v1/schedules", CRON | {"name": "c", "delete_after": "1h"}, format="json")
    assert "one-off" in field_error(res, "delete_after")
    res = api.post(
        "/v1/schedules",
        {"name": "o", "run_at": "2030-01-01T00:00:00Z", "target": TARGET, "max_runs": 2},
        format="json",
    )
    assert "cron" in field_error(res, "max_runs")
    sid = create(api, CRON | {"name": "ok"})["id"]
    res = api.patch(f"/v1/schedules/{sid}", {"max_runs": 0, "version": 1}, format="json")
    field_error(res, "max_runs")
    assert Schedule.objects.get(pk=sid).max_runs is None


def test_max_runs_counts_successes_once_and_completes_the_schedule(
    api: APIClient, admin_principal: Principal
) -> None:
    body = create(api, CRON | {"name": "campaign", "max_runs": 2})
    assert body["max_runs"] == 2 and body["completed"] is False and body["runs_succeeded"] == 0
    schedule = Schedule.objects.get(pk=body["id"])
    first, failed, second = (occurrence(schedule, m) for m in (30, 25, 20))
    run(first)
    run(failed, state="dead")  # a failure does not count
    # Re-run the success: it succeeds again, and still counts once.
    services.execution_rerun(actor=admin_principal, execution_id=first.id)
    # Due "now" by the rerun's clock, which a test transaction's now() has not reached yet.
    Execution.objects.filter(pk=first.pk).update(due_at=first.scheduled_for)
    run(first, attempt=2)
    assert Schedule.objects.get(pk=schedule.id).runs_succeeded == 1
    # Staged ahead (not published): withdrawn; published, not claimed yet: skipped at claim;
    # a manual run still runs and counts.
    staged = occurrence(schedule, -5, trigger="cron")
    published = occurrence(schedule, 10, trigger="cron", state="queued")
    run(second)
    stored = Schedule.objects.get(pk=schedule.id)
    assert stored.runs_succeeded == 2 and stored.next_run_at is None
    assert stored.completed_at is not None
    assert not Execution.objects.filter(pk=staged.pk).exists()
    done = ExecutionEvent.objects.get(schedule=schedule, kind=EventKind.COMPLETED)
    assert "reached max_runs 2 (1 staged occurrence withdrawn)" in done.message
    claim = leases.execution_claim(
        execution_id=str(published.id), attempt=1, owner="test:1", lease_s=30
    )
    assert claim is not None and claim.schedule_completed and not claim.started

    got = api.get(f"/v1/schedules/{schedule.id}").json()
    assert got["completed"] is True and got["completed_reason"] == "max_runs"
    assert got["next_run_at"] is None and got["runs_succeeded"] == 2 and got["paused"] is False
    answer = explain.explain(schedule=stored, at=staged.scheduled_for, now=db_now())
    assert answer.code == "completed", answer.sentence
    assert f"completed: reached max_runs 2 on {stored.completed_at:%Y-%m-%d %H:%M} UTC" in (
        answer.sentence
    )
    # Resuming cannot re-open it: 409 naming why. A manual trigger still works.
    res = api.post(f"/v1/schedules/{schedule.id}:resume", format="json")
    assert res.status_code == 409 and "max_runs" in res.json()["error"]["message"]
    res = api.post(f"/v1/schedules/{schedule.id}:trigger", format="json")
    assert res.status_code == 202, res.content


def test_published_occurrence_claimed_after_completion_is_skipped_not_counted(
    api: APIClient,
) -> None:
    from dispatch.worker import runner

    schedule = Schedule.objects.get(pk=create(api, CRON | {"name": "c", "max_runs": 1})["id"])
    late = occurrence(schedule, 10, state="queued")
    run(occurrence(schedule, 20))
    runner.run_execution(execution_id=str(late.id), attempt=1)
    late.refresh_from_db()
    assert late.state == "skipped" and late.reason_code == ReasonCode.SCHEDULE_COMPLETED
    assert "reached max_runs 1" in late.reason
    assert Schedule.objects.get(pk=schedule.id).runs_succeeded == 1
    answer = explain.explain(schedule=schedule, at=late.scheduled_for, now=db_now())
    assert answer.code == "completed" and "skipped when claimed" in answer.sentence


def test_patch_raising_max_runs_reopens_and_lowering_it_completes(api: APIClient) -> None:
    schedule = Schedule.objects.get(pk=create(api, CRON | {"name": "c", "max_runs": 1})["id"])
    run(occurrence(schedule, 20))
    assert api.get(f"/v1/schedules/{schedule.id}").json()["completed"] is True
    version = Schedule.objects.get(pk=schedule.id).version
    res = api.patch(
        f"/v1/schedules/{schedule.id}", {"max_runs": 3, "version": version}, format="json"
    )
    assert res.status_code == 200, res.content
    body = res.json()
    assert body["completed"] is False and body["completed_at"] is None
    assert body["next_run_at"] is not None and body["next_run_at"] > db_now().isoformat()[:19]
    assert ExecutionEvent.objects.filter(schedule=schedule, kind=EventKind.REOPENED).exists()
    # Lowered to what already succeeded: completed by the edit, nothing left scheduled.
    res = api.patch(
        f"/v1/schedules/{schedule.id}", {"max_runs": 1, "version": body["version"]}, format="json"
    )
    assert res.json()["completed"] is True and res.json()["next_run_at"] is None
    # An edit of the timing does not re-open it behind the user's back.
    res = api.patch(
        f"/v1/schedules/{schedule.id}",
        {"cron": "*/7 * * * *", "version": res.json()["version"]},
        format="json",
    )
    assert res.json()["completed"] is True and res.json()["next_run_at"] is None


def test_export_apply_round_trips_max_runs(api: APIClient) -> None:
    create(api, CRON | {"name": "bounded", "max_runs": 500})
    create(api, CRON | {"name": "unbounded"})
    exported = {e["name"]: e for e in api.get("/v1/schedules:export").json()["schedules"]}
    assert exported["bounded"]["max_runs"] == 500 and "max_runs" not in exported["unbounded"]
    res = api.post("/v1/schedules:apply", {"schedules": list(exported.values())}, format="json")
    assert res.status_code == 200 and res.json()["summary"]["unchanged"] == 2, res.content


def test_delete_after_removes_the_job_in_the_retention_pass(api: APIClient) -> None:
    res = api.post("/v1/jobs", {"target": TARGET, "delete_after": "1h30m"}, format="json")
    assert res.status_code == 201, res.content
    assert res.json()["delete_after"] == "1h30m"
    batch = api.post(
        "/v1/jobs:batch",
        {
            "jobs": [
                {"target": TARGET, "delete_after": "2h", "idempotency_key": "a"},
                {"target": TARGET, "idempotency_key": "b"},
            ]
        },
        format="json",
    )
    assert batch.status_code == 200, batch.content
    assert [r["status"] for r in batch.json()["results"]] == [201, 201]
    expiring, kept = (
        Schedule.objects.get(pk=res.json()["id"]),
        Schedule.objects.get(delete_after=None, kind="once"),
    )
    later = Schedule.objects.get(delete_after=timedelta(hours=2))
    now = db_now()
    Schedule.objects.filter(kind="once").update(next_run_at=None)
    # Ended 2 h ago (past its 1h30m), 1 h ago (not yet past its 2 h), 9 days ago (kept).
    ends = {expiring.pk: now - timedelta(hours=2), kept.pk: now - timedelta(days=9)}
    ends[later.pk] = now - timedelta(hours=1)
    runs = {
        pk: execution_row(
            Schedule.objects.get(pk=pk),
            end - timedelta(seconds=5),
            state="succeeded",
            finished_at=end,
        )
        for pk, end in ends.items()
    }
    result = retention.purge(now=now)
    assert result.jobs_expired == 1
    gone = Schedule.objects.get(pk=expiring.pk)
    assert gone.deleted_at is not None
    assert Schedule.objects.get(pk=kept.pk).deleted_at is None
    assert Schedule.objects.get(pk=later.pk).deleted_at is None
    assert Execution.objects.filter(pk=runs[expiring.pk].pk).exists()  # history stays
    assert api.get(f"/v1/jobs/{expiring.pk}").status_code == 404
    event = ExecutionEvent.objects.get(schedule=gone, kind=EventKind.EXPIRED)
    assert "delete_after 01:30:00 passed" in event.message
    assert AuditEvent.objects.filter(object_id=str(gone.pk), action="job.expire").exists()
    assert retention.purge(now=now).jobs_expired == 0


def test_end_at_passed_is_completed_explained_and_reopened_by_a_later_end_at(
    api: APIClient,
) -> None:
    from dispatch.timing import cron

    now = db_now()
    soon = (now + timedelta(hours=2)).replace(second=0, microsecond=0)
    body = create(api, CRON | {"name": "ending", "end_at": soon.isoformat()})
    assert body["completed"] is False
    # Time passes: the end_at is an hour ago, and the beat found no next run.
    past = (now - timedelta(hours=1)).replace(second=0, microsecond=0)
    text = cron.compose([cron.Spec(cron="* * * * *")], start_at=None, end_at=past)
    Schedule.objects.filter(pk=body["id"]).update(cron=text, next_run_at=None)
    got = api.get(f"/v1/schedules/{body['id']}").json()
    assert got["completed"] is True and got["completed_reason"] == "end_at"
    stamp = past.isoformat().replace("+00:00", "Z")
    assert got["completed_at"] == stamp
    assert api.get("/v1/schedules?completed=true").json()["results"][0]["id"] == body["id"]
    schedule = Schedule.objects.get(pk=body["id"])
    answer = explain.explain(schedule=schedule, at=past + timedelta(minutes=10), now=db_now())
    assert answer.code == "completed", answer.sentence
    assert f"completed: end_at {stamp} passed" in answer.sentence
    res = api.post(f"/v1/schedules/{body['id']}:resume", format="json")
    assert res.status_code == 409 and "end_at" in res.json()["error"]["message"]
    # Moved later: re-opened, the next run computed from now.
    later = (now + timedelta(days=1)).replace(second=0, microsecond=0)
    res = api.patch(
        f"/v1/schedules/{body['id']}",
        {"end_at": later.isoformat(), "version": schedule.version},
        format="json",
    )
    assert res.status_code == 200, res.content
    reopened = res.json()
    assert reopened["completed"] is False and reopened["next_run_at"] is not None
    assert now < datetime.fromisoformat(reopened["next_run_at"].replace("Z", "+00:00")) < later
    assert ExecutionEvent.objects.filter(schedule=schedule, kind=EventKind.REOPENED).exists()
