"""GET /v1/jobs, GET /v1/jobs/{id}, DELETE /v1/jobs/{id}: the one-off jobs POST
/v1/jobs made, with their execution's state, and cancelling one not started."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from dispatch import services
from dispatch.models import Execution, Schedule
from tenants.models import AuditEvent, Tenant
from tenants.roles import Role
from tests.support.rows import execution_row

pytestmark = pytest.mark.django_db

TARGET = {"type": "http", "url": "https://notify.internal/remind"}


def _job(api: APIClient, name: str, run_at: str = "2030-09-26T09:00:00Z") -> dict[str, Any]:
    res = api.post("/v1/jobs", {"name": name, "run_at": run_at, "target": TARGET}, format="json")
    assert res.status_code == 201, res.content
    return dict(res.json())


def _fired(job_id: str, state: str) -> Execution:
    """The job's execution as the beat (and a worker) leave it."""
    job = Schedule.objects.get(pk=job_id)
    assert job.run_at is not None
    Schedule.objects.filter(pk=job_id).update(next_run_at=None)
    return execution_row(job, job.run_at, state=state, trigger="api")


def test_list_pages_the_jobs_with_their_execution_state(
    api: APIClient, seed_example: dict[str, Any]
) -> None:
    jobs = [_job(api, f"remind-{n}") for n in range(3)]
    api.post("/v1/schedules", seed_example, format="json")  # a cron schedule is not a job
    running = _fired(jobs[1]["id"], "running")
    first = api.get("/v1/jobs?limit=2")
    assert first.status_code == 200, first.content
    page = first.json()
    rest = api.get(f"/v1/jobs?limit=2&cursor={page['next_cursor']}").json()
    assert rest["next_cursor"] is None
    listed = page["results"] + rest["results"]
    assert [j["id"] for j in listed] == [j["id"] for j in reversed(jobs)]  # newest first
    states = {j["name"]: (j["state"], j["execution"] and j["execution"]["id"]) for j in listed}
    assert states == {
        "remind-0": ("pending", None),
        "remind-1": ("running", str(running.id)),
        "remind-2": ("pending", None),
    }
    assert [j["name"] for j in api.get("/v1/jobs?search=remind-2").json()["results"]] == [
        "remind-2"
    ]
    assert api.get("/v1/jobs?kind=cron").status_code == 400  # not a filter of this list


def test_get_a_job_and_a_cron_schedule_or_another_tenants_job_is_404(
    api: APIClient, outsider_api: APIClient, seed_example: dict[str, Any]
) -> None:
    job = _job(api, "remind")
    got = api.get(f"/v1/jobs/{job['id']}")
    assert got.status_code == 200
    assert got.json()["id"] == job["id"] and got.json()["state"] == "pending"
    cron_id = api.post("/v1/schedules", seed_example, format="json").json()["id"]
    assert api.get(f"/v1/jobs/{cron_id}").status_code == 404
    assert api.delete(f"/v1/jobs/{cron_id}").status_code == 404
    assert outsider_api.get(f"/v1/jobs/{job['id']}").status_code == 404
    assert outsider_api.delete(f"/v1/jobs/{job['id']}").status_code == 404
    assert Schedule.objects.get(pk=job["id"]).deleted_at is None
    assert outsider_api.get("/v1/jobs").json()["results"] == []


def test_delete_a_job_not_fired_yet_deletes_it(api: APIClient, tenant: Tenant) -> None:
    job = _job(api, "remind")
    res = api.delete(f"/v1/jobs/{job['id']}")
    assert res.status_code == 200, res.content
    assert res.json()["state"] == "pending" and res.json()["next_run_at"] is None
    row = Schedule.objects.get(pk=job["id"])
    assert row.deleted_at is not None and row.next_run_at is None
    assert api.get(f"/v1/jobs/{job['id']}").status_code == 404
    assert api.delete(f"/v1/jobs/{job['id']}").status_code == 404
    assert AuditEvent.objects.filter(action="schedule.delete", object_id=job["id"]).count() == 1


@pytest.mark.parametrize("state", ["scheduled", "queued"])
def test_delete_a_job_whose_execution_has_not_started_cancels_it(
    api: APIClient, state: str
) -> None:
    job = _job(api, "remind")
    execution = _fired(job["id"], state)
    res = api.delete(f"/v1/jobs/{job['id']}")
    assert res.status_code == 200, res.content
    body = res.json()
    assert body["state"] == "cancelled"
    assert body["execution"]["reason_code"] == "cancelled_by_user"
    execution.refresh_from_db()
    assert execution.state == "cancelled" and execution.reason.endswith(": job cancelled")
    assert Schedule.objects.get(pk=job["id"]).deleted_at is not None
    actions = set(
        AuditEvent.objects.filter(object_id__in=[job["id"], str(execution.id)]).values_list(
            "action", flat=True
        )
    )
    assert {"schedule.delete", "execution.cancel"} <= actions


@pytest.mark.parametrize("state", ["running", "retry_scheduled", "succeeded", "dead", "skipped"])
def test_delete_a_job_that_started_or_ran_is_409_naming_the_state(
    api: APIClient, state: str
) -> None:
    job = _job(api, "remind")
    execution = _fired(job["id"], state)
    res = api.delete(f"/v1/jobs/{job['id']}")
    assert res.status_code == 409, res.content
    assert f"execution is {state}" in res.json()["error"]["message"]
    execution.refresh_from_db()
    assert execution.state == state
    assert Schedule.objects.get(pk=job["id"]).deleted_at is None


def test_roles(api_for: Callable[[Tenant, Role], APIClient], tenant: Tenant) -> None:
    admin = api_for(tenant, Role.ADMIN)
    job = _job(admin, "remind")
    viewer = api_for(tenant, Role.VIEWER)
    assert viewer.get("/v1/jobs").status_code == 200
    assert viewer.get(f"/v1/jobs/{job['id']}").status_code == 200
    assert viewer.delete(f"/v1/jobs/{job['id']}").status_code == 403
    assert Schedule.objects.get(pk=job["id"]).deleted_at is None
    assert api_for(tenant, Role.OPERATOR).delete(f"/v1/jobs/{job['id']}").status_code == 200


def test_a_run_now_job_the_beat_has_fired_lists_its_execution(api: APIClient) -> None:
    res = api.post("/v1/jobs", {"name": "now", "target": TARGET}, format="json")
    job = res.json()
    at = services.db_now() - timedelta(seconds=1)
    execution = execution_row(Schedule.objects.get(pk=job["id"]), at, state="succeeded")
    got = api.get(f"/v1/jobs/{job['id']}").json()
    assert got["state"] == "succeeded" and got["execution"]["id"] == str(execution.id)
