"""REST API views (`/v1`). Thin: parse, call one selector or service, shape the answer."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from django.conf import settings
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from dispatch import cron, explain, selectors, services
from dispatch.api.serializers import (
    EmptySerializer,
    ExecutionDetailDoc,
    ExecutionOutDoc,
    ExplanationDoc,
    JobInSerializer,
    PauseInSerializer,
    PreviewDoc,
    ScheduleInSerializer,
    ScheduleOutDoc,
    SchedulePatchSerializer,
    event_out,
    execution_out,
    iso_z,
    schedule_out,
    timeline_out,
)
from dispatch.exceptions import InvalidSchedule
from tenants.roles import Principal, Role

ETAG = re.compile(r'^\s*(?:W/)?"?(\d+)"?\s*$')


def principal(request: Request) -> Principal:
    assert isinstance(request.user, Principal)  # noqa: S101 - guaranteed by HasTenantRole
    return request.user


def _validated(
    serializer_cls: type[serializers.Serializer[Any]], request: Request
) -> dict[str, Any]:
    ser = serializer_cls(data=request.data)
    ser.is_valid(raise_exception=True)
    data = dict(ser.validated_data)
    tenant = data.pop("tenant", None)
    if tenant is not None and tenant != principal(request).tenant.slug:
        raise InvalidSchedule.field("tenant", "must be the tenant of your token (or omitted)")
    return data


def _api_data(data: dict[str, Any]) -> dict[str, Any]:
    """API field values as the service expects them (UUIDs as strings)."""
    if "depends_on" in data:
        data["depends_on"] = [str(x) for x in data["depends_on"]]
    return data


def _instant(request: Request, name: str) -> datetime | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = datetime.fromisoformat(raw.replace("Z", "+00:00").replace(" ", "+"))
    except ValueError:
        raise InvalidSchedule.field(
            name, "must be an ISO 8601 instant, e.g. 2026-03-29T00:00:00Z"
        ) from None
    if value.tzinfo is None:
        raise InvalidSchedule.field(name, "must carry a zone offset or Z")
    return value


def _int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidSchedule.field(name, "must be a whole number") from None
    if not low <= value <= high:
        raise InvalidSchedule.field(name, f"must be in {low}..{high}")
    return value


def _bool_param(request: Request, name: str) -> bool | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    if raw.lower() in {"true", "1"}:
        return True
    if raw.lower() in {"false", "0"}:
        return False
    raise InvalidSchedule.field(name, "must be true or false")


def _schedule_response(schedule: Any, code: int = status.HTTP_200_OK) -> Response:
    response = Response(schedule_out(schedule), status=code)
    response["ETag"] = f'"{schedule.version}"'
    return response


class ScheduleListView(APIView):
    @extend_schema(
        responses={200: ScheduleOutDoc(many=True)},
        parameters=[
            OpenApiParameter("cursor", str),
            OpenApiParameter("limit", int),
            OpenApiParameter("search", str),
            OpenApiParameter("kind", str),
            OpenApiParameter("paused", bool),
        ],
    )
    def get(self, request: Request) -> Response:
        page = selectors.schedule_list(
            tenant=principal(request).tenant,
            cursor=request.query_params.get("cursor"),
            limit=_int_param(request, "limit", 50, 1, selectors.MAX_PAGE),
            search=request.query_params.get("search", ""),
            kind=request.query_params.get("kind", ""),
            paused=_bool_param(request, "paused"),
        )
        return Response(
            {"results": [schedule_out(s) for s in page.items], "next_cursor": page.next_cursor}
        )

    @extend_schema(request=ScheduleInSerializer, responses={201: ScheduleOutDoc})
    def post(self, request: Request) -> Response:
        data = _api_data(_validated(ScheduleInSerializer, request))
        schedule = services.schedule_create(actor=principal(request), data=data)
        response = _schedule_response(schedule, status.HTTP_201_CREATED)
        response["Location"] = f"/v1/schedules/{schedule.id}"
        return response


class ScheduleDetailView(APIView):
    @extend_schema(responses={200: ScheduleOutDoc})
    def get(self, request: Request, pk: str) -> Response:
        return _schedule_response(
            selectors.schedule_get(tenant=principal(request).tenant, schedule_id=pk)
        )

    @extend_schema(
        request=SchedulePatchSerializer,
        responses={200: ScheduleOutDoc},
        parameters=[
            OpenApiParameter("If-Match", str, OpenApiParameter.HEADER, description='"<version>"')
        ],
    )
    def patch(self, request: Request, pk: str) -> Response:
        data = _api_data(_validated(SchedulePatchSerializer, request))
        expected = data.pop("version", None)
        header = request.headers.get("If-Match")
        if header is not None:
            match = ETAG.match(header)
            if not match:
                raise InvalidSchedule.field("If-Match", 'must be the ETag you read, e.g. "3"')
            if expected is not None and int(match.group(1)) != expected:
                raise InvalidSchedule.field("version", "disagrees with If-Match")
            expected = int(match.group(1))
        schedule = services.schedule_update(
            actor=principal(request), schedule_id=pk, data=data, expected_version=expected
        )
        return _schedule_response(schedule)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, pk: str) -> Response:
        services.schedule_delete(actor=principal(request), schedule_id=pk)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ScheduleActionView(APIView):
    """`POST /v1/schedules/{id}:pause | :resume | :trigger` (the seed's colon paths)."""

    action_roles = {"pause": Role.OPERATOR, "resume": Role.OPERATOR, "trigger": Role.OPERATOR}

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        self.rbac_action = kwargs.get("action")
        super().initial(request, *args, **kwargs)

    @extend_schema(request=PauseInSerializer, responses={200: ScheduleOutDoc, 202: ExecutionOutDoc})
    def post(self, request: Request, pk: str, action: str) -> Response:
        actor = principal(request)
        if action == "pause":
            data = _validated(PauseInSerializer, request) if request.data else {}
            schedule = services.schedule_pause(
                actor=actor, schedule_id=pk, reason=data.get("reason", ""), until=data.get("until")
            )
            return _schedule_response(schedule)
        if request.data:
            _validated(EmptySerializer, request)
        if action == "resume":
            return _schedule_response(services.schedule_resume(actor=actor, schedule_id=pk))
        execution = services.schedule_trigger(actor=actor, schedule_id=pk)
        return Response(execution_out(execution), status=status.HTTP_202_ACCEPTED)


class SchedulePreviewView(APIView):
    @extend_schema(
        responses={200: PreviewDoc},
        parameters=[
            OpenApiParameter("count", int),
            OpenApiParameter("from", str, description="ISO instant"),
        ],
    )
    def get(self, request: Request, pk: str) -> Response:
        schedule = selectors.schedule_get(tenant=principal(request).tenant, schedule_id=pk)
        count = _int_param(request, "count", 10, 1, settings.PREVIEW_MAX_COUNT)
        after = _instant(request, "from") or services.db_now()
        # A schedule paused until T fires nothing before T: those are not listed.
        occurrences = selectors.schedule_next_runs(schedule=schedule, after=after, count=count)
        seed = str(schedule.id)
        if schedule.kind == "cron":
            description = cron.describe(schedule.cron, seed=seed)
            resolved = cron.resolve(schedule.cron, seed=seed)
        else:
            description = f"once, at {iso_z(schedule.run_at)}"
            resolved = ""
        return Response(
            {
                "occurrences": [
                    {
                        "scheduled_for": iso_z(o.scheduled_for),
                        "local": o.local.isoformat(),
                        "due_at": iso_z(o.due_at),
                        "note": o.note,
                    }
                    for o in occurrences
                ],
                "description": description,
                "resolved": resolved,
                "timezone": schedule.timezone,
                "note": (
                    f"paused until {iso_z(schedule.paused_until)}: "
                    "occurrences before then are not listed"
                )
                if schedule.paused and schedule.paused_until
                else None,
            }
        )


class JobCreateView(APIView):
    @extend_schema(
        request=JobInSerializer,
        responses={201: ScheduleOutDoc, 200: ScheduleOutDoc},
        description="A one-off job: now (no run_at) or at run_at. Its misfire policy applies: "
        "found more than misfire_grace_s after it fell due (run_at, or its creation when "
        "run_at was already past), it is recorded as skipped (reason `misfire`) under "
        "`skip`, or runs late (trigger `catch_up`) under `run_once` / `catch_up`.",
    )
    def post(self, request: Request) -> Response:
        data = _validated(JobInSerializer, request)
        job, created = services.job_create(actor=principal(request), data=data)
        response = _schedule_response(
            job, status.HTTP_201_CREATED if created else status.HTTP_200_OK
        )
        response["Location"] = f"/v1/schedules/{job.id}"
        return response


class ExecutionListView(APIView):
    @extend_schema(
        responses={200: ExecutionOutDoc(many=True)},
        parameters=[
            OpenApiParameter("schedule_id", str),
            OpenApiParameter("status", str),
            OpenApiParameter("from", str),
            OpenApiParameter("to", str),
            OpenApiParameter("cursor", str),
            OpenApiParameter("limit", int),
        ],
    )
    def get(self, request: Request) -> Response:
        page = selectors.execution_list(
            tenant=principal(request).tenant,
            cursor=request.query_params.get("cursor"),
            limit=_int_param(request, "limit", 50, 1, selectors.MAX_PAGE),
            schedule_id=request.query_params.get("schedule_id"),
            status=request.query_params.get("status"),
            since=_instant(request, "from"),
            until=_instant(request, "to"),
        )
        return Response(
            {"results": [execution_out(e) for e in page.items], "next_cursor": page.next_cursor}
        )


class ExecutionDetailView(APIView):
    @extend_schema(responses={200: ExecutionDetailDoc})
    def get(self, request: Request, pk: str) -> Response:
        execution = selectors.execution_get(tenant=principal(request).tenant, execution_id=pk)
        body = execution_out(execution)
        events = list(selectors.execution_events(execution=execution))
        body["events"] = [event_out(ev) for ev in events]
        # The whole story in time order: scheduled / due / published / started /
        # finished steps (row timestamps) merged with the events, as the console shows it.
        body["timeline"] = [
            timeline_out(item)
            for item in selectors.execution_timeline(execution=execution, events=events)
        ]
        return Response(body)


class ScheduleExplainView(APIView):
    """`GET /v1/schedules/{id}/explain?at=ISO-INSTANT`: why it did or didn't run then."""

    @extend_schema(
        parameters=[OpenApiParameter("at", str, required=True, description="ISO 8601 instant")],
        responses={200: ExplanationDoc},
    )
    def get(self, request: Request, pk: str) -> Response:
        schedule = selectors.schedule_get_including_deleted(
            tenant=principal(request).tenant, schedule_id=pk
        )
        at = _instant(request, "at")
        if at is None:
            raise InvalidSchedule.field(
                "at", "is required: an ISO 8601 instant, e.g. 2026-03-29T09:00:00Z"
            )
        try:
            answer = explain.explain(schedule=schedule, at=at, now=services.db_now())
        except (ValueError, OverflowError) as exc:
            raise InvalidSchedule.field("at", str(exc)) from None
        return Response(explain.as_json(answer, schedule_id=str(schedule.id)))
