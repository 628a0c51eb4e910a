"""One-off jobs (`/v1/jobs`): what POST /v1/jobs made, with its execution's state,
and cancelling one that has not started.

A job is a schedule of kind `once`; these endpoints are the schedule list and
read narrowed to that kind (a cron schedule's id is a 404 here), paged like
GET /v1/schedules, with each job's execution (the latest, when a manual
trigger added more) alongside.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from core.api.views import StrictQueryView
from dispatch import selectors, services
from dispatch.api import views
from dispatch.api.serializers import ExecutionOutDoc, ScheduleOutDoc, execution_out, schedule_out
from dispatch.exceptions import NotFound
from dispatch.models import Execution, Kind, Schedule
from tenants.models import Tenant

JOB_ID = OpenApiParameter("id", OpenApiTypes.UUID, OpenApiParameter.PATH)
# A job the beat has not created its execution for yet (its run_at is ahead).
NOT_FIRED = "pending"


def job_out(job: Schedule, execution: Execution | None) -> dict[str, Any]:
    return schedule_out(job) | {
        "state": execution.state if execution is not None else NOT_FIRED,
        "execution": execution_out(execution) if execution is not None else None,
    }


class JobOutDoc(ScheduleOutDoc):
    state = serializers.CharField(
        help_text=f"its execution's state, or `{NOT_FIRED}` before the scheduler has made it"
    )
    execution = ExecutionOutDoc(allow_null=True, help_text="the job's execution (the latest)")


class JobPageDoc(serializers.Serializer[Any]):
    results = JobOutDoc(many=True)
    next_cursor = serializers.CharField(
        allow_null=True, help_text="pass as ?cursor= for the next page; null on the last"
    )


def job_get(*, tenant: Tenant, job_id: str) -> Schedule:
    job = selectors.schedule_get(tenant=tenant, schedule_id=job_id)
    if job.kind != Kind.ONCE:
        raise NotFound("job not found")  # a cron schedule is not a job
    return job


class JobListView(views.JobCreateView):
    """GET lists the jobs; POST (the seed's) creates one."""

    query_params_allowed = {"get": frozenset({"cursor", "limit", "search"})}

    @extend_schema(
        operation_id="jobs_list",
        responses={200: JobPageDoc},
        parameters=[
            OpenApiParameter("cursor", str, description="next_cursor of the previous page"),
            views._limit_param(),
            OpenApiParameter("search", str, description="substring of the name"),
        ],
    )
    def get(self, request: Request) -> Response:
        tenant = views.principal(request).tenant
        page = selectors.schedule_list(
            tenant=tenant,
            cursor=request.query_params.get("cursor"),
            limit=views._int_param(request, "limit", 50, 1, selectors.MAX_PAGE),
            search=request.query_params.get("search", ""),
            kind=Kind.ONCE,
        )
        # Each job's execution with the page, in one query.
        latest = selectors.last_executions(tenant=tenant, schedule_ids=[j.id for j in page.items])
        return Response(
            {
                "results": [job_out(j, latest.get(j.id)) for j in page.items],
                "next_cursor": page.next_cursor,
            }
        )


class JobDetailView(StrictQueryView):
    @extend_schema(operation_id="jobs_get", parameters=[JOB_ID], responses={200: JobOutDoc})
    def get(self, request: Request, pk: str) -> Response:
        tenant = views.principal(request).tenant
        job = job_get(tenant=tenant, job_id=pk)
        latest = selectors.last_executions(tenant=tenant, schedule_ids=[job.id])
        return Response(job_out(job, latest.get(job.id)))

    @extend_schema(
        operation_id="jobs_cancel",
        parameters=[JOB_ID],
        responses={200: JobOutDoc},
        description="Cancel a one-off job that has not started: the job is deleted (soft: "
        "its history stays) and its execution, if the scheduler already made it "
        "(`scheduled`, or `queued` and not yet claimed by a worker), is cancelled with who "
        "did it. A job whose execution is running, waiting for a retry or finished is a "
        "409 naming that state (cancel a running one with POST /v1/executions/{id}:cancel). "
        "Answers the job as it is after the cancel.",
    )
    def delete(self, request: Request, pk: str) -> Response:
        job, execution = services.job_cancel(actor=views.principal(request), job_id=pk)
        return Response(job_out(job, execution), status=status.HTTP_200_OK)
