"""Backfills: `POST /v1/schedules/{id}:backfill` (dry run or real), `GET /v1/backfills/{id}`,
`POST /v1/backfills/{id}:cancel` and `GET /v1/schedules/{id}/backfills`.

Thin: parse, call the backfill selector or service, shape the answer. Writes need
the operator role (HasTenantRole's write default), reads the viewer role;
another tenant's schedule or backfill is a 404 like a missing one.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from core.api.views import StrictQueryView
from dispatch import selectors, services
from dispatch.api.serializers import (
    EmptySerializer,
    InstantField,
    StrictSerializer,
    iso_z,
    next_cursor_doc,
)
from dispatch.api.views import SCHEDULE_ID, int_param, limit_param, principal, validate_request
from dispatch.models import Backfill
from dispatch.states import BackfillAction, BackfillOrder, ControlState, Reprocess

ERROR_REF = {"$ref": "#/components/schemas/Error"}
BACKFILL_ID = OpenApiParameter("id", OpenApiTypes.UUID, OpenApiParameter.PATH)
ACTIONS_HELP = "; ".join(f"`{a.value}`: {a.label}" for a in BackfillAction)


class BackfillInSerializer(StrictSerializer):
    # "from" is a Python keyword: declared through the class namespace.
    locals()["from"] = InstantField(help_text="start of the range, included")
    to = InstantField(
        help_text="end of the range, excluded; not in the future (later runs are the beat's)"
    )
    reprocess = serializers.ChoiceField(
        choices=Reprocess.values,
        default=Reprocess.NONE,
        help_text="occurrences that already have a final execution: `none` leaves them, "
        "`failed` re-runs the dead, skipped and cancelled ones, `all` re-runs every one",
    )
    max_concurrent = serializers.IntegerField(
        min_value=1,
        max_value=selectors.BACKFILL_MAX_CONCURRENT,
        default=1,
        help_text="runs of this backfill active at once (overlap forbid / replace: one)",
    )
    order = serializers.ChoiceField(choices=BackfillOrder.values, default=BackfillOrder.OLDEST)
    dry_run = serializers.BooleanField(
        default=False, help_text="answer the plan (200) without creating anything"
    )
    skip_paused = serializers.BooleanField(
        default=False, help_text="leave the times the schedule was paused alone"
    )


# --- output -----------------------------------------------------------------------------


def _counts_doc() -> serializers.DictField:
    return serializers.DictField(
        child=serializers.IntegerField(),
        help_text="occurrences per action: " + ", ".join(a.value for a in BackfillAction),
    )


class PlanOccurrenceDoc(serializers.Serializer[Any]):
    scheduled_for = serializers.DateTimeField(help_text="UTC, nominal")
    local = serializers.CharField(help_text="ISO 8601 in the schedule's zone, with its offset")
    action = serializers.ChoiceField(choices=BackfillAction.values, help_text=ACTIONS_HELP)
    execution_id = serializers.UUIDField(
        allow_null=True, help_text="the occurrence's existing execution, if any"
    )


class BackfillPlanDoc(serializers.Serializer[Any]):
    schedule_id = serializers.UUIDField()
    timezone = serializers.CharField()
    total = serializers.IntegerField()
    occurrences = PlanOccurrenceDoc(many=True, help_text="in the requested order")
    counts = _counts_doc()


class ProgressDoc(serializers.Serializer[Any]):
    total = serializers.IntegerField(help_text="occurrences in the plan")
    position = serializers.IntegerField(help_text="entries of the plan gone through")
    created = serializers.IntegerField(help_text="executions created")
    rerun = serializers.IntegerField(help_text="existing executions re-run")
    skipped = serializers.IntegerField(help_text="entries left alone")
    active = serializers.IntegerField(help_text="its executions not final yet")
    done = serializers.IntegerField(help_text="its executions that succeeded")
    failed = serializers.IntegerField(
        help_text="its executions that ended dead, skipped, cancelled"
    )


class BackfillSummaryDoc(serializers.Serializer[Any]):
    id = serializers.UUIDField()
    schedule_id = serializers.UUIDField()
    state = serializers.ChoiceField(choices=ControlState.values)
    locals()["from"] = serializers.DateTimeField()
    to = serializers.DateTimeField()
    reprocess = serializers.ChoiceField(choices=Reprocess.values)
    max_concurrent = serializers.IntegerField()
    order = serializers.ChoiceField(choices=BackfillOrder.values)
    skip_paused = serializers.BooleanField()
    created_by = serializers.CharField()
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    cancelled_by = serializers.CharField(allow_null=True)
    progress = ProgressDoc()


class BackfillOutDoc(BackfillSummaryDoc):
    counts = _counts_doc()


class BackfillPageDoc(serializers.Serializer[Any]):
    results = BackfillSummaryDoc(
        many=True, help_text="without the plan's counts (GET one for those)"
    )
    next_cursor = next_cursor_doc()


def plan_out(plan: selectors.BackfillPlan) -> dict[str, Any]:
    return {
        "schedule_id": str(plan.schedule.id),
        "timezone": plan.schedule.timezone,
        "total": len(plan.items),
        "occurrences": [
            {
                "scheduled_for": iso_z(item.scheduled_for),
                "local": item.local.isoformat(),
                "action": str(item.action),
                "execution_id": str(item.execution_id) if item.execution_id else None,
            }
            for item in plan.items
        ],
        "counts": plan.counts,
    }


def backfill_out(b: Backfill, progress: selectors.BackfillProgress | None = None) -> dict[str, Any]:
    """A backfill with its progress; with the plan's counts unless `progress` (of a
    list page) came without them."""
    progress = progress or selectors.backfill_progress(b)
    out: dict[str, Any] = {
        "id": str(b.id),
        "schedule_id": str(b.schedule_id),
        "state": b.state,
        "from": iso_z(b.range_from),
        "to": iso_z(b.range_to),
        "reprocess": b.reprocess,
        "max_concurrent": b.max_concurrent,
        "order": b.order,
        "skip_paused": b.skip_paused,
        "created_by": b.created_by,
        "created_at": iso_z(b.created_at),
        "finished_at": iso_z(b.finished_at),
        "cancelled_by": b.cancelled_by or None,
        "progress": {
            "total": progress.total,
            "position": progress.position,
            "created": progress.created,
            "rerun": progress.rerun,
            "skipped": progress.skipped,
            "active": progress.active,
            "done": progress.done,
            "failed": progress.failed,
        },
    }
    if progress.counts is not None:
        out["counts"] = progress.counts
    return out


# --- views ------------------------------------------------------------------------------


class ScheduleBackfillView(StrictQueryView):
    @extend_schema(
        operation_id="schedules_backfill",
        parameters=[SCHEDULE_ID],
        request=BackfillInSerializer,
        responses={
            200: OpenApiResponse(BackfillPlanDoc, description="dry run: the plan, nothing written"),
            202: OpenApiResponse(BackfillOutDoc, description="the backfill, running"),
            409: OpenApiResponse(
                ERROR_REF,
                description="`limit_reached`: the tenant already has "
                "BACKFILL_MAX_RUNNING_PER_TENANT running backfills (the message names the "
                "bound and how many run); nothing is created. The dry run is not refused.",
            ),
        },
        description="Run the occurrences the schedule would have had in [from, to) — the same "
        "DST and H rules as its preview — now, with trigger `backfill`. Each occurrence's "
        f"action: {ACTIONS_HELP}. Created runs are released while fewer than max_concurrent "
        "of them are active and the schedule's overlap policy allows (forbid / replace: one "
        "run of the schedule at a time); while the schedule is paused, nothing is released. "
        "The scheduler carries tenants' backfills forward in turn, and one that cannot "
        "progress (paused, waiting for its runs) takes no other backfill's turn. "
        "400 naming the field: `to` not after `from`, in the "
        "future, or a range of more than BACKFILL_MAX_OCCURRENCES occurrences; `schedule` "
        "for a one-off job. The target sees each run's own occurrence as X-Scheduled-For "
        "(in the past) and attempt 1; a re-run, the execution's next attempt.",
    )
    def post(self, request: Request, pk: str) -> Response:
        data = validate_request(BackfillInSerializer, request)
        result = services.backfill_create(
            actor=principal(request),
            schedule_id=pk,
            range_from=data["from"],
            range_to=data["to"],
            reprocess=data["reprocess"],
            max_concurrent=data["max_concurrent"],
            order=data["order"],
            skip_paused=data["skip_paused"],
            dry_run=data["dry_run"],
        )
        if result.backfill is None:
            return Response(plan_out(result.plan))
        response = Response(backfill_out(result.backfill), status=status.HTTP_202_ACCEPTED)
        response["Location"] = f"/v1/backfills/{result.backfill.id}"
        return response


class ScheduleBackfillListView(StrictQueryView):
    query_params_allowed = {"get": frozenset({"cursor", "limit"})}

    @extend_schema(
        operation_id="schedules_backfills_list",
        parameters=[
            SCHEDULE_ID,
            OpenApiParameter("cursor", str, description="next_cursor of the previous page"),
            limit_param(),
        ],
        responses={200: BackfillPageDoc},
    )
    def get(self, request: Request, pk: str) -> Response:
        tenant = principal(request).tenant
        schedule = selectors.schedule_get(tenant=tenant, schedule_id=pk)
        page = selectors.backfill_list(
            tenant=tenant,
            schedule=schedule,
            cursor=request.query_params.get("cursor"),
            limit=int_param(request, "limit", 50, 1, selectors.MAX_PAGE),
        )
        progress = selectors.backfill_list_progress(page.items)
        return Response(
            {
                "results": [backfill_out(b, progress[b.id]) for b in page.items],
                "next_cursor": page.next_cursor,
            }
        )


class BackfillDetailView(StrictQueryView):
    @extend_schema(
        operation_id="backfills_get", parameters=[BACKFILL_ID], responses={200: BackfillOutDoc}
    )
    def get(self, request: Request, pk: str) -> Response:
        backfill = selectors.backfill_get(tenant=principal(request).tenant, backfill_id=pk)
        return Response(backfill_out(backfill))


class BackfillCancelView(StrictQueryView):
    @extend_schema(
        operation_id="backfills_cancel",
        parameters=[BACKFILL_ID],
        request=None,
        responses={
            200: BackfillOutDoc,
            409: OpenApiResponse(ERROR_REF, description="the backfill is done; nothing to cancel"),
        },
        description="Stop releasing the backfill's remaining occurrences (those not reached "
        "are left alone); runs already released go on. Already cancelled: 200, unchanged.",
    )
    def post(self, request: Request, pk: str) -> Response:
        if request.data:
            validate_request(EmptySerializer, request)
        backfill = services.backfill_cancel(actor=principal(request), backfill_id=pk)
        return Response(backfill_out(backfill))
