"""One-off jobs (`/v1/jobs`): what POST /v1/jobs made, with its execution's state,
and cancelling one that has not started.

A job is a schedule of kind `once`; these endpoints are the schedule list and
read narrowed to that kind (a cron schedule's id is a 404 here), paged like
GET /v1/schedules, with each job's execution (the latest, when a manual
trigger added more) alongside. POST /v1/jobs:batch creates up to 1,000 at once.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from core.api.errors import first_message, flatten_errors
from core.api.views import StrictQueryView
from core.errors import AppError
from dispatch import selectors, services
from dispatch.api import views
from dispatch.api.serializers import (
    ExecutionOutDoc,
    ItemValidator,
    JobBatchInDoc,
    JobBatchOutDoc,
    JobInSerializer,
    ScheduleOutDoc,
    execution_out,
    schedule_out,
)
from dispatch.exceptions import InvalidSchedule, NotFound
from dispatch.models import Execution, Kind, Schedule
from dispatch.services.jobs import BATCH_MAX, BatchResult, job_create_batch
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
            views.limit_param(),
            OpenApiParameter("search", str, description="substring of the name"),
        ],
    )
    def get(self, request: Request) -> Response:
        tenant = views.principal(request).tenant
        page = selectors.schedule_list(
            tenant=tenant,
            cursor=request.query_params.get("cursor"),
            limit=views.int_param(request, "limit", 50, 1, selectors.MAX_PAGE),
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


# --- POST /v1/jobs:batch -----------------------------------------------------------------


def _batch_items(request: Request) -> list[Any]:
    """The `jobs` list of the body, or a 400 naming what is wrong with its shape."""
    body = request.data
    if not isinstance(body, dict):
        raise InvalidSchedule.field("non_field_errors", 'expected a JSON object {"jobs": [...]}')
    unknown = sorted(k for k in body if k != "jobs")
    if unknown:
        raise InvalidSchedule.field(unknown[0], "unknown field")
    jobs = body.get("jobs")
    if not isinstance(jobs, list):
        raise InvalidSchedule.field("jobs", "must be a list of jobs")
    if not jobs:
        raise InvalidSchedule.field("jobs", "must not be empty")
    if len(jobs) > BATCH_MAX:
        raise InvalidSchedule.field("jobs", f"at most {BATCH_MAX} jobs per request")
    return jobs


def _item_paths(index: int, detail: Any, prefix: str = "jobs") -> dict[str, list[str]]:
    """Field errors (a serializer's or the service's) under the item's path: `jobs[3].run_at`
    (`schedules[3].run_at` for POST /v1/schedules:apply)."""
    flat = flatten_errors(detail)
    if not isinstance(flat, dict):
        flat = {"non_field_errors": flat}
    paths: dict[str, list[str]] = {}
    for key, reasons in flat.items():
        path = f"{prefix}[{index}]" if key == "non_field_errors" else f"{prefix}[{index}].{key}"
        paths[path] = reasons if isinstance(reasons, list) else [str(reasons)]
    return paths


def item_error(index: int, detail: Any, prefix: str = "jobs") -> InvalidSchedule:
    paths = _item_paths(index, detail, prefix)
    return InvalidSchedule(first_message(paths), detail=paths)


def _validated_item(
    index: int, raw: Any, tenant: Tenant, validator: ItemValidator
) -> dict[str, Any] | AppError:
    try:
        data = validator.validate(raw)
    except serializers.ValidationError as exc:
        return item_error(index, exc.detail)
    slug = data.pop("tenant", None)
    if slug is not None and slug != tenant.slug:
        return item_error(index, {"tenant": ["must be the tenant of your token (or omitted)"]})
    if not data.get("idempotency_key"):
        # A retried batch must not create its jobs twice: every item carries its key.
        return item_error(index, {"idempotency_key": ["is required in a batch"]})
    return data


def _check_distinct_keys(jobs: list[Any]) -> None:
    # Two items under one key would mean one job and a 200 or 409 decided by order:
    # the request is refused whole (nothing saved) instead.
    seen: dict[str, int] = {}
    for index, raw in enumerate(jobs):
        key = raw.get("idempotency_key") if isinstance(raw, dict) else None
        if not isinstance(key, str) or not key:
            continue
        if key in seen:
            raise InvalidSchedule.field(
                f"jobs[{index}].idempotency_key", f"repeats the key of jobs[{seen[key]}]"
            )
        seen[key] = index


def _error_out(index: int, error: AppError) -> dict[str, Any]:
    detail = error.detail or {"non_field_errors": [error.message]}
    if not all(k.startswith(f"jobs[{index}]") for k in detail):
        detail = _item_paths(index, detail)
    return {"code": error.code, "message": first_message(detail), "detail": detail}


def _batch_item_out(index: int, key: Any, result: BatchResult) -> dict[str, Any]:
    return {
        "index": index,
        "status": result.status,
        "idempotency_key": key if isinstance(key, str) else None,
        "job": schedule_out(result.job) if result.job is not None else None,
        "error": _error_out(index, result.error) if result.error is not None else None,
    }


class JobBatchView(StrictQueryView):
    @extend_schema(
        operation_id="jobs_batch",
        request=JobBatchInDoc,
        responses={200: JobBatchOutDoc},
        description=f"Up to {BATCH_MAX} one-off jobs in one request, each the body of a POST "
        "/v1/jobs with its own idempotency_key (required here, distinct within the request). "
        "Answers 200 with one result per item, in request order: 201 created, 200 an "
        "existing job with the same key and body, 409 the key was used with another body, "
        "400 invalid (the detail names the field, e.g. `jobs[3].target.url`), 422 over the "
        "tenant's schedule quota (the earlier items take the room left). An item that "
        "fails does not stop the others. The whole request is one transaction: a request "
        "whose shape is wrong (not an object with `jobs`, an empty list, more than "
        f"{BATCH_MAX} items, a key repeated in two items) is a 400 and saves nothing. "
        "Its body limit is API_BULK_MAX_BODY_BYTES (413 beyond).",
    )
    def post(self, request: Request) -> Response:
        actor = views.principal(request)
        jobs = _batch_items(request)
        _check_distinct_keys(jobs)
        validator = ItemValidator(JobInSerializer)
        items = [_validated_item(i, raw, actor.tenant, validator) for i, raw in enumerate(jobs)]
        results = job_create_batch(actor=actor, items=items)
        out = [
            _batch_item_out(i, raw.get("idempotency_key") if isinstance(raw, dict) else None, r)
            for i, (raw, r) in enumerate(zip(jobs, results, strict=True))
        ]
        return Response(
            {
                "results": out,
                "created": sum(1 for r in results if r.status == status.HTTP_201_CREATED),
                "existing": sum(1 for r in results if r.status == status.HTTP_200_OK),
                "failed": sum(1 for r in results if r.status >= status.HTTP_400_BAD_REQUEST),
            },
            status=status.HTTP_200_OK,
        )
