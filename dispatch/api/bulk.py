"""Bulk actions and their operations (`/v1`): POST /v1/schedules:bulk,
POST /v1/executions:bulk, GET
/v1/operations/{id} (progress and a page of per-item results) and POST
/v1/operations/{id}:cancel.

A small set (<= BULK_SYNC_MAX) is worked in the request: 200 with every item's
result. A larger one answers 202 with the operation (Location: its URL); the
beats' control pump works it, and its progress is read at that URL.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    PolymorphicProxySerializer,
    extend_schema,
)
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from core.api.views import StrictQueryView
from dispatch import selectors, services
from dispatch.api.serializers import EmptySerializer, InstantField, StrictSerializer, iso_z
from dispatch.api.views import int_param, principal, validate_request
from dispatch.models import ExecutionState, Kind, Operation, OperationItem, Trigger
from dispatch.services.bulk import EXECUTION_ACTIONS, SCHEDULE_ACTIONS
from dispatch.states import ControlState, ItemStatus

OPERATION_ID = OpenApiParameter("id", OpenApiTypes.UUID, OpenApiParameter.PATH)
ITEMS_PAGE = 100

IDS_HELP = (
    f"the objects, at most {settings.BULK_MAX_ITEMS} (the bulk endpoints' body limit, "
    f"API_BULK_MAX_BODY_BYTES = {settings.API_BULK_MAX_BODY_BYTES} bytes, holds about "
    f"{settings.API_BULK_MAX_BODY_BYTES // 40} ids); another tenant's (or "
    "an unknown) id is `not_found` in the results and nothing is touched. Give ids or "
    "filter, not both."
)
FILTER_HELP = (
    "what the list endpoint's filters match now (resolved to ids when the request is "
    f"made), at most {settings.BULK_MAX_ITEMS} objects (400 beyond). Give ids or filter."
)


class ScheduleFilterSerializer(StrictSerializer):
    """The filters of GET /v1/schedules."""

    search = serializers.CharField(
        max_length=200, required=False, allow_blank=True, help_text="substring of the name"
    )
    kind = serializers.ChoiceField(choices=Kind.values, required=False)
    paused = serializers.BooleanField(required=False)


def _ids_field() -> serializers.ListField:
    return serializers.ListField(
        child=serializers.CharField(max_length=64),
        required=False,
        min_length=1,
        # No maxItems: the service's bound (BULK_MAX_ITEMS, a 400 naming ids) holds
        # for every caller, and the body limit (413) for the bytes.
        help_text=IDS_HELP,
    )


class ScheduleBulkInSerializer(StrictSerializer):
    action = serializers.ChoiceField(choices=list(SCHEDULE_ACTIONS))
    ids = _ids_field()
    filter = ScheduleFilterSerializer(required=False, help_text=FILTER_HELP)
    reason = serializers.CharField(
        max_length=500, required=False, allow_blank=True, help_text="pause: the one reason"
    )
    until = InstantField(required=False, allow_null=True, help_text="pause: resumed at this time")
    dry_run = serializers.BooleanField(
        required=False,
        default=False,
        help_text="write nothing; answer what would happen (resume: the combined misfire "
        "preview; pause: which schedules would be paused)",
    )


# The filters of GET /v1/executions; `from` is a keyword, hence the class built by type().
ExecutionFilterSerializer = type(
    "ExecutionFilterSerializer",
    (StrictSerializer,),
    {
        "__doc__": "The filters of GET /v1/executions.",
        "state": serializers.ListField(
            child=serializers.ChoiceField(choices=ExecutionState.values),
            required=False,
            min_length=1,
            help_text="any of these states",
        ),
        "schedule_id": serializers.UUIDField(required=False),
        "trigger": serializers.ListField(
            child=serializers.ChoiceField(choices=Trigger.values),
            required=False,
            min_length=1,
            help_text="any of these triggers",
        ),
        "from": InstantField(required=False, help_text="scheduled_for at or after"),
        "to": InstantField(required=False, help_text="scheduled_for before"),
    },
)


class ExecutionBulkInSerializer(StrictSerializer):
    action = serializers.ChoiceField(choices=list(EXECUTION_ACTIONS))
    ids = _ids_field()
    filter = ExecutionFilterSerializer(required=False, help_text=FILTER_HELP)
    reason = serializers.CharField(
        max_length=500, required=False, allow_blank=True, help_text="cancel: the one reason"
    )


# --- output ------------------------------------------------------------------------------


def item_out(item: OperationItem) -> dict[str, Any]:
    return {
        "position": item.position,
        "id": item.object_id,
        "status": item.status,
        "detail": item.detail or None,
    }


def operation_out(op: Operation, page: selectors.ItemPage | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": str(op.id),
        "object_type": op.object_type,
        "action": op.action,
        "state": op.state,
        "total": op.total,
        "processed": op.processed,
        "succeeded": op.succeeded,
        "failed": op.failed,
        # Items a cancel reached before they were worked.
        "cancelled": op.total - op.processed if op.state == ControlState.CANCELLED else 0,
        "reason": op.params.get("reason") or None,
        "until": op.params.get("until"),
        "filter": op.params.get("filter"),
        "created_by": op.created_by,
        "created_at": iso_z(op.created_at),
        "finished_at": iso_z(op.finished_at),
        "cancelled_by": op.cancelled_by or None,
    }
    if page is not None:
        body["items"] = [item_out(item) for item in page.items]
        body["next_cursor"] = page.next_cursor
    return body


class ItemDoc(serializers.Serializer[Any]):
    position = serializers.IntegerField()
    id = serializers.CharField()
    status = serializers.ChoiceField(choices=ItemStatus.values)
    detail = serializers.CharField(allow_null=True)


class OperationDoc(serializers.Serializer[Any]):
    id = serializers.UUIDField()
    object_type = serializers.ChoiceField(choices=["schedule", "execution"])
    action = serializers.CharField()
    state = serializers.ChoiceField(choices=ControlState.values)
    total = serializers.IntegerField()
    processed = serializers.IntegerField(help_text="items worked so far")
    succeeded = serializers.IntegerField()
    failed = serializers.IntegerField(help_text="not_found, conflict, invalid or error")
    cancelled = serializers.IntegerField(help_text="items left unworked by a cancel")
    reason = serializers.CharField(allow_null=True)
    until = serializers.DateTimeField(allow_null=True)
    filter = serializers.JSONField(allow_null=True, help_text="the filter as given, if any")
    created_by = serializers.CharField()
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    cancelled_by = serializers.CharField(allow_null=True)


class OperationPageDoc(OperationDoc):
    items = ItemDoc(many=True, help_text="per-item results, by position")
    next_cursor = serializers.CharField(
        allow_null=True, help_text="pass as ?cursor= for the next items; null on the last"
    )


class DryRunItemDoc(serializers.Serializer[Any]):
    id = serializers.CharField()
    status = serializers.ChoiceField(choices=[ItemStatus.OK, ItemStatus.NOT_FOUND])
    name = serializers.CharField(allow_null=True)
    paused = serializers.BooleanField(required=False)
    run = serializers.IntegerField(required=False, help_text="resume: occurrences it would run")
    skip = serializers.IntegerField(required=False, help_text="resume: occurrences it would skip")
    text = serializers.CharField(required=False)


class DryRunDoc(serializers.Serializer[Any]):
    dry_run = serializers.BooleanField()
    action = serializers.CharField()
    total = serializers.IntegerField()
    found = serializers.IntegerField()
    not_found = serializers.IntegerField()
    schedules = serializers.IntegerField(help_text="schedules the action would change")
    already_paused = serializers.IntegerField(required=False)
    run = serializers.IntegerField(required=False, help_text="resume: occurrences, summed")
    skip = serializers.IntegerField(required=False, help_text="resume: skipped, summed")
    text = serializers.CharField(help_text='e.g. "resuming 37 schedules will run 12 ..."')
    items = DryRunItemDoc(many=True)


BULK_200 = PolymorphicProxySerializer(
    component_name="ScheduleBulkAnswer",
    serializers=[OperationPageDoc, DryRunDoc],
    resource_type_field_name=None,
)


def operation_response(op: Operation) -> Response:
    page = selectors.operation_items(operation=op, limit=selectors.MAX_PAGE)
    body = operation_out(op, page)
    if op.state == ControlState.RUNNING:
        response = Response(body, status=status.HTTP_202_ACCEPTED)
        response["Location"] = f"/v1/operations/{op.id}"
        return response
    return Response(body)


QUEUE_FULL = OpenApiResponse(
    {"$ref": "#/components/schemas/Error"},
    description="`queue_full`: the items would take the tenant's running operations past "
    f"BULK_MAX_QUEUED_ITEMS_PER_TENANT ({settings.BULK_MAX_QUEUED_ITEMS_PER_TENANT:,}) items "
    "not worked yet; the message names the bound and what is queued, and it frees as those "
    "operations finish. Nothing is created.",
)


class ScheduleBulkView(StrictQueryView):
    @extend_schema(
        operation_id="schedules_bulk",
        request=ScheduleBulkInSerializer,
        responses={200: BULK_200, 202: OperationPageDoc, 429: QUEUE_FULL},
        description=f"Pause, resume, trigger or delete schedules by ids or by filter. Up to "
        f"{settings.BULK_SYNC_MAX} objects: worked in the request, 200 with each item's "
        "result; more: 202 with the operation (Location), worked by the scheduler and read "
        "at GET /v1/operations/{id}. Every item is audited as the one-schedule endpoint "
        "audits it, and the operation as a whole. The scheduler works tenants' operations "
        "in turn (a chunk each), so another tenant's long queue does not hold yours up.",
    )
    def post(self, request: Request) -> Response:
        data = validate_request(ScheduleBulkInSerializer, request)
        outcome = services.bulk_schedules(
            actor=principal(request),
            action=data["action"],
            ids=data.get("ids"),
            filter=data.get("filter"),
            reason=data.get("reason", ""),
            until=data.get("until"),
            dry_run=data.get("dry_run", False),
        )
        if outcome.preview is not None:
            return Response(outcome.preview)
        assert outcome.operation is not None  # noqa: S101 - not a dry run
        return operation_response(outcome.operation)


class ExecutionBulkView(StrictQueryView):
    @extend_schema(
        operation_id="executions_bulk",
        request=ExecutionBulkInSerializer,
        responses={200: OperationPageDoc, 202: OperationPageDoc, 429: QUEUE_FULL},
        description=f"Cancel or re-run executions by ids or by filter. Up to "
        f"{settings.BULK_SYNC_MAX}: worked in the request, 200 with each item's result; "
        "more: 202 with the operation (Location). Each item is cancelled or re-run as "
        "POST /v1/executions/{id}:cancel / :rerun would (a final execution cannot be "
        "cancelled, an active one cannot be re-run: `conflict`), audited one by one.",
    )
    def post(self, request: Request) -> Response:
        data = validate_request(ExecutionBulkInSerializer, request)
        outcome = services.bulk_executions(
            actor=principal(request),
            action=data["action"],
            ids=data.get("ids"),
            filter=data.get("filter"),
            reason=data.get("reason", ""),
        )
        assert outcome.operation is not None  # noqa: S101 - executions have no dry run
        return operation_response(outcome.operation)


class OperationDetailView(StrictQueryView):
    query_params_allowed = {"get": frozenset({"cursor", "limit"})}

    @extend_schema(
        operation_id="operations_get",
        parameters=[
            OPERATION_ID,
            OpenApiParameter("cursor", str, description="next_cursor of the previous page"),
            OpenApiParameter(
                "limit",
                {"type": "integer", "minimum": 1, "maximum": selectors.MAX_PAGE, "default": 100},
                description=f"items per page, 1..{selectors.MAX_PAGE}",
            ),
        ],
        responses={200: OperationPageDoc},
    )
    def get(self, request: Request, pk: str) -> Response:
        op = selectors.operation_get(tenant=principal(request).tenant, operation_id=pk)
        page = selectors.operation_items(
            operation=op,
            cursor=request.query_params.get("cursor"),
            limit=int_param(request, "limit", ITEMS_PAGE, 1, selectors.MAX_PAGE),
        )
        return Response(operation_out(op, page))


class OperationCancelView(StrictQueryView):
    @extend_schema(
        operation_id="operations_cancel",
        parameters=[OPERATION_ID],
        request=None,
        responses={200: OperationDoc},
        description="Stop a running operation: items not worked yet become `cancelled`. "
        "Cancelling a cancelled operation is a 200 that changes nothing; a finished one "
        "is a 409 naming its state.",
    )
    def post(self, request: Request, pk: str) -> Response:
        if request.data:
            validate_request(EmptySerializer, request)
        op = services.operation_cancel(actor=principal(request), operation_id=pk)
        return Response(operation_out(op))
