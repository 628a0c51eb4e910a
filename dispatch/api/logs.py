"""`GET /v1/executions/{id}/attempts/{n}/log` (and `/v1/executions/{id}/log`, the
latest attempt's): an attempt's log — what a managed command prints and the lines a
handed-off target sends with its heartbeats — live from Redis while the attempt runs
(dispatch/logs.py), from the execution's history once it ended
(dispatch/selectors/logs.py); paged by cursor, and followed with `wait` (the answer
comes as soon as a line does)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from core.api.views import StrictQueryView
from dispatch import logs, selectors
from dispatch.api.views import EXECUTION_ID, int_param, principal
from dispatch.exceptions import InvalidSchedule, NotFound
from dispatch.models import Execution
from dispatch.states import IN_FLIGHT_STATES

ERROR_REF = {"$ref": "#/components/schemas/Error"}


class LineOut(serializers.Serializer[Any]):
    cursor = serializers.CharField()
    at = serializers.DateTimeField()
    stream = serializers.ChoiceField(
        choices=list(logs.STREAMS), help_text="output: the command's; target: its heartbeats'"
    )
    text = serializers.CharField()


class LogPageOut(serializers.Serializer[Any]):
    execution_id = serializers.CharField()
    attempt = serializers.IntegerField()
    state = serializers.CharField()
    lines = LineOut(many=True)
    next_cursor = serializers.CharField(
        allow_null=True, help_text="`after` for the next call (null: no line yet)"
    )
    live = serializers.BooleanField(
        help_text="the execution is still in flight: more lines may come (follow with wait)"
    )
    truncated = serializers.BooleanField(
        help_text="the per-attempt cap (LIVE_LOG_MAX_BYTES of text) dropped the oldest lines"
    )
    dropped_lines = serializers.IntegerField(help_text="how many it dropped")


PAGE_PARAMS = [
    OpenApiParameter("after", str, description="next_cursor of the previous call"),
    OpenApiParameter(
        "wait",
        {"type": "integer", "minimum": 0, "maximum": int(logs.FOLLOW_MAX_S)},
        description="seconds to wait for a first line when there is none yet (follow)",
    ),
    OpenApiParameter(
        "limit",
        {"type": "integer", "minimum": 1, "maximum": logs.READ_MAX_LINES},
        description=f"lines per call, 1..{logs.READ_MAX_LINES} (default 500)",
    ),
]
RESPONSES = {
    200: LogPageOut,
    404: OpenApiResponse(ERROR_REF, description="no such execution (or attempt) of yours"),
    503: OpenApiResponse(
        ERROR_REF, description="the live logs' Redis did not answer (runs are not affected)"
    ),
}


class ExecutionAttemptLogView(StrictQueryView):
    query_params_allowed = {"get": frozenset({"after", "wait", "limit"})}

    @extend_schema(
        operation_id="executions_attempt_log",
        parameters=[
            EXECUTION_ID,
            OpenApiParameter(
                "n", int, OpenApiParameter.PATH, description="the attempt, as X-Attempt named it"
            ),
            *PAGE_PARAMS,
        ],
        responses=RESPONSES,
    )
    def get(self, request: Request, pk: str, n: str) -> Response:
        """An attempt's log, oldest line first: live while it runs, kept with the execution after."""
        execution, archived = _lookup(request, pk)
        attempt = int(n)
        if not 1 <= attempt <= execution.attempt:
            raise NotFound(f"attempt {attempt} not found: the execution is at {execution.attempt}")
        return _page(request, execution, attempt, archived)


class ExecutionLogView(StrictQueryView):
    query_params_allowed = {"get": frozenset({"after", "wait", "limit"})}

    @extend_schema(
        operation_id="executions_log", parameters=[EXECUTION_ID, *PAGE_PARAMS], responses=RESPONSES
    )
    def get(self, request: Request, pk: str) -> Response:
        """The latest attempt's live log (its /attempts/{n}/log)."""
        execution, archived = _lookup(request, pk)
        return _page(request, execution, execution.attempt, archived)


def _lookup(request: Request, pk: str) -> tuple[Execution, selectors.ExecutionRecord | None]:
    """The tenant's execution, from the database or, once its day left it, from the
    archive (with the logs the archive kept); NotFound for anything else."""
    tenant = principal(request).tenant
    try:
        return selectors.execution_get(tenant=tenant, execution_id=pk), None
    except NotFound:
        record = selectors.archived_execution_get(tenant=tenant, execution_id=pk)
        return record.execution, record


def _page(
    request: Request,
    execution: Execution,
    attempt: int,
    archived: selectors.ExecutionRecord | None = None,
) -> Response:
    after = request.query_params.get("after")
    if after is not None and not logs.valid_cursor(after):
        raise InvalidSchedule.field("after", "is not a cursor this API returned")
    wait = int_param(request, "wait", 0, 0, int(logs.FOLLOW_MAX_S))
    limit = int_param(request, "limit", 500, 1, logs.READ_MAX_LINES)
    eid = str(execution.id)
    page = (
        selectors.attempt_log(
            execution=execution, attempt=attempt, after=after, limit=limit, wait_s=wait
        )
        if archived is None
        else selectors.archived_attempt_log(
            record=archived, attempt=attempt, after=after, limit=limit
        )
    )
    lines = page.lines
    if wait and not lines and archived is None:  # it may have ended while we waited
        execution.refresh_from_db(fields=["state", "attempt"])
    dropped = page.dropped
    return Response(
        {
            "execution_id": eid,
            "attempt": attempt,
            "state": execution.state,
            "lines": [
                {"cursor": x.cursor, "at": x.at, "stream": x.stream, "text": x.text} for x in lines
            ],
            "next_cursor": lines[-1].cursor if lines else after,
            "live": execution.state in IN_FLIGHT_STATES and attempt == execution.attempt,
            "truncated": dropped > 0,
            "dropped_lines": dropped,
        }
    )
