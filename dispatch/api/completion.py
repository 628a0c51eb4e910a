"""`POST /v1/executions/{id}:heartbeat`, `:succeed` and `:fail`: the tenant's service
finishing an attempt handed off to it (`"completion": "callback"`, dispatch/completion.py).

Not a service token's call: the bearer is the attempt's completion capability
(X-Completion-Token on the HTTP request, `completion_token` on the queue message),
which names the execution, the attempt and its fencing token and opens nothing else.
A capability for another execution, a forged or a missing one: 401. An attempt that
is no longer current: 409, recorded on the timeline.
"""

from __future__ import annotations

import json
from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from core.api.views import StrictQueryView
from dispatch import completion, services
from dispatch.api.serializers import StrictSerializer
from dispatch.api.views import EXECUTION_ID, validate_request
from dispatch.exceptions import CompletionDenied, NotFound
from dispatch.selectors.paging import as_uuid

ERROR_REF = {"$ref": "#/components/schemas/Error"}
ERRORS = {
    400: OpenApiResponse(ERROR_REF, description="a field is wrong; the message names it"),
    401: OpenApiResponse(
        ERROR_REF, description="no completion token, a forged one, or one for another execution"
    ),
    404: OpenApiResponse(ERROR_REF, description="the path's id is not an execution id"),
    409: OpenApiResponse(
        ERROR_REF,
        description="the attempt is no longer current (cancelled, timed out, swept, re-run); "
        "recorded on the execution's timeline",
    ),
}


def _output(value: Any) -> Any:
    if len(json.dumps(value, default=str).encode()) > completion.MAX_OUTPUT_BYTES:
        raise serializers.ValidationError(f"at most {completion.MAX_OUTPUT_BYTES} bytes of JSON")
    return value


class HeartbeatIn(StrictSerializer):
    progress = serializers.FloatField(
        required=False, allow_null=True, min_value=0, max_value=100, help_text="percent done"
    )
    message = serializers.CharField(
        required=False, allow_blank=True, max_length=completion.MAX_MESSAGE
    )
    log = serializers.ListField(
        child=serializers.CharField(allow_blank=True, trim_whitespace=False),
        required=False,
        max_length=completion.MAX_LOG_LINES,
        help_text=f"lines for the attempt's live log, at most {completion.MAX_LOG_LINES} a call",
    )


class SucceedIn(StrictSerializer):
    output = serializers.JSONField(
        required=False,
        allow_null=True,
        validators=[_output],
        help_text=f"the run's result, any JSON up to {completion.MAX_OUTPUT_BYTES} bytes",
    )
    message = serializers.CharField(
        required=False, allow_blank=True, max_length=completion.MAX_MESSAGE
    )


class FailIn(StrictSerializer):
    error = serializers.CharField(max_length=completion.MAX_ERROR, help_text="what went wrong")
    retryable = serializers.BooleanField(
        required=False,
        default=True,
        help_text="false: do not retry, whatever the schedule's policy allows (it is dead)",
    )
    output = serializers.JSONField(required=False, allow_null=True, validators=[_output])


class HeartbeatOut(serializers.Serializer[Any]):
    execution_id = serializers.CharField()
    attempt = serializers.IntegerField()
    lease_expires_at = serializers.DateTimeField(
        help_text="the next heartbeat or completion is due before this"
    )
    deadline = serializers.DateTimeField(help_text="the attempt's timeout: no lease runs past it")


class FinishOut(serializers.Serializer[Any]):
    execution_id = serializers.CharField()
    attempt = serializers.IntegerField()
    state = serializers.CharField(help_text="succeeded, retry_scheduled or dead")


class _CompletionView(StrictQueryView):
    # The capability is the credential (checked in `capability`), not a service token.
    authentication_classes: list[type] = []
    permission_classes = [AllowAny]

    def capability(self, request: Request, pk: str) -> completion.Capability:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise CompletionDenied(
                "send the attempt's completion token: Authorization: Bearer <X-Completion-Token>"
            )
        key = as_uuid(pk)
        if key is None:
            raise NotFound("execution not found")
        try:
            return completion.verify(token.strip(), execution_id=str(key))
        except completion.BadCapability as exc:
            raise CompletionDenied(str(exc)) from None


class ExecutionHeartbeatView(_CompletionView):
    @extend_schema(
        operation_id="executions_heartbeat",
        parameters=[EXECUTION_ID],
        request=HeartbeatIn,
        responses={200: HeartbeatOut, **ERRORS},
        auth=[],
    )
    def post(self, request: Request, pk: str) -> Response:
        """The target is still working on its attempt: the lease runs `heartbeat_s` more."""
        cap = self.capability(request, pk)
        data = validate_request(HeartbeatIn, request) if request.data else {}
        beat = services.completion_heartbeat(
            cap=cap,
            progress=data.get("progress"),
            message=data.get("message", ""),
            lines=data.get("log", []),
        )
        return Response(
            {
                "execution_id": cap.execution_id,
                "attempt": cap.attempt,
                "lease_expires_at": beat.lease_expires_at,
                "deadline": beat.deadline,
            }
        )


class ExecutionSucceedView(_CompletionView):
    @extend_schema(
        operation_id="executions_succeed",
        parameters=[EXECUTION_ID],
        request=SucceedIn,
        responses={200: FinishOut, **ERRORS},
        auth=[],
    )
    def post(self, request: Request, pk: str) -> Response:
        """The target finished its attempt: it succeeded, with an output value."""
        cap = self.capability(request, pk)
        data = validate_request(SucceedIn, request) if request.data else {}
        return _finish(cap, ok=True, output=data.get("output"), message=data.get("message", ""))


class ExecutionFailView(_CompletionView):
    @extend_schema(
        operation_id="executions_fail",
        parameters=[EXECUTION_ID],
        request=FailIn,
        responses={200: FinishOut, **ERRORS},
        auth=[],
    )
    def post(self, request: Request, pk: str) -> Response:
        """The target's attempt failed: retried by the schedule's policy unless not retryable."""
        cap = self.capability(request, pk)
        data = validate_request(FailIn, request)
        return _finish(
            cap,
            ok=False,
            output=data.get("output"),
            message=data["error"],
            retryable=data["retryable"],
        )


def _finish(
    cap: completion.Capability, *, ok: bool, output: Any, message: str, retryable: bool = False
) -> Response:
    """End the attempt as the target says; the answer both ends share."""
    state = services.completion_finish(
        cap=cap, ok=ok, output=output, message=message, retryable=retryable
    )
    return Response({"execution_id": cap.execution_id, "attempt": cap.attempt, "state": state})
