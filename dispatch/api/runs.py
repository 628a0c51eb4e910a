"""`POST /v1/executions/{id}:cancel` and `POST /v1/executions/{id}:rerun`.

Thin: parse the body, call the run-control service, answer with the execution.
Both need the operator role (the write default of HasTenantRole); another
tenant's execution is a 404 like a missing one.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from core.api.views import StrictQueryView
from dispatch import services
from dispatch.api.serializers import (
    TARGET_HELP,
    ExecutionOutDoc,
    StrictSerializer,
    TargetField,
    execution_out,
)
from dispatch.api.views import EXECUTION_ID, principal, validate_request

ERROR_REF = {"$ref": "#/components/schemas/Error"}


class CancelInSerializer(StrictSerializer):
    reason = serializers.CharField(
        max_length=400, required=False, allow_blank=True, help_text="why, for the record"
    )


class RerunInSerializer(StrictSerializer):
    target = TargetField(
        required=False,
        help_text=f"this run's whole target instead of the schedule's (this run only): {TARGET_HELP}",
    )


def _body(serializer_cls: type[serializers.Serializer[Any]], request: Request) -> dict[str, Any]:
    # An empty body is allowed: both fields are optional.
    return validate_request(serializer_cls, request) if request.data else {}


class ExecutionCancelView(StrictQueryView):
    @extend_schema(
        operation_id="executions_cancel",
        parameters=[EXECUTION_ID],
        request=CancelInSerializer,
        responses={
            200: ExecutionOutDoc,
            409: OpenApiResponse(
                ERROR_REF,
                description="the execution already ended otherwise (succeeded, dead, skipped); "
                "the message names its state",
            ),
        },
        description="Cancel a scheduled, queued, running or retry-scheduled execution. A "
        "running attempt's fencing token is bumped: its worker stops it at its next "
        "heartbeat (within a third of the lease) and its completion is rejected. The call "
        "may still have reached the target. Already cancelled: 200, unchanged.",
    )
    def post(self, request: Request, pk: str) -> Response:
        data = _body(CancelInSerializer, request)
        result = services.execution_cancel(
            actor=principal(request), execution_id=pk, reason=data.get("reason", "")
        )
        return Response(execution_out(result.execution))


class ExecutionRerunView(StrictQueryView):
    @extend_schema(
        operation_id="executions_rerun",
        parameters=[EXECUTION_ID],
        request=RerunInSerializer,
        responses={
            202: ExecutionOutDoc,
            409: OpenApiResponse(
                ERROR_REF,
                description="the execution is not final (scheduled, queued, running, "
                "retry_scheduled), or its schedule was deleted; the message names the state",
            ),
        },
        description="Re-run a final execution (succeeded, dead, skipped, cancelled) as a new "
        "attempt chain of the same execution: the next attempt number and a new fencing "
        "token, the same occurrence (X-Scheduled-For). Admitted by the scheduler like a "
        "manual run (tenant concurrency cap, overlap policy). An edited `target` applies to "
        "this run only and is audited with the changed keys.",
    )
    def post(self, request: Request, pk: str) -> Response:
        data = _body(RerunInSerializer, request)
        execution = services.execution_rerun(
            actor=principal(request), execution_id=pk, target=data.get("target")
        )
        return Response(execution_out(execution), status=status.HTTP_202_ACCEPTED)
