"""REST API views (`/v1`). Thin: parse, call one selector or service, shape the answer."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from core.api import inputs
from core.api.views import StrictQueryView
from dispatch import explain, selectors, services
from dispatch.api.health_out import ScheduleWithHealthDoc, health_out
from dispatch.api.serializers import (
    EmptySerializer,
    ExecutionDetailDoc,
    ExecutionOutDoc,
    ExecutionPageDoc,
    ExplanationDoc,
    JobInSerializer,
    PauseInSerializer,
    PreviewDoc,
    ScheduleInSerializer,
    ScheduleOutDoc,
    SchedulePageDoc,
    SchedulePatchSerializer,
    archived_out,
    event_out,
    execution_out,
    iso_z,
    schedule_out,
    timeline_out,
)
from dispatch.exceptions import InvalidSchedule, PreconditionRequired
from dispatch.history.partitions import READ_DAYS
from dispatch.selectors.calendars import schedule_filter
from dispatch.states import ExecutionState, Trigger
from dispatch.timing import cron
from tenants.roles import Principal, Role

# Bounded: a version is a PositiveIntegerField, and int() of thousands of digits raises.
ETAG = re.compile(r'^\s*(?:W/)?"?(\d{1,10})"?\s*$')


SCHEDULE_ID = OpenApiParameter("id", OpenApiTypes.UUID, OpenApiParameter.PATH)
EXECUTION_ID = OpenApiParameter("id", OpenApiTypes.UUID, OpenApiParameter.PATH)
INSTANT = f"ISO 8601 instant with an offset or Z, {inputs.RANGE_TEXT}"


def limit_param() -> OpenApiParameter:
    return OpenApiParameter(
        "limit",
        {"type": "integer", "minimum": 1, "maximum": selectors.MAX_PAGE, "default": 50},
        description=f"page size, 1..{selectors.MAX_PAGE}",
    )


def principal(request: Request) -> Principal:
    assert isinstance(request.user, Principal)  # noqa: S101 - guaranteed by HasTenantRole
    return request.user


def validate_request(
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
    if raw is None:
        return None
    # Present but empty is an error like any other non-instant, not "absent".
    # An unencoded "+02:00" arrives as " 02:00" from the query string.
    return inputs.parse_instant(raw.replace(" ", "+"), name)


def int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
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
    if raw is None:
        return None
    if raw.lower() in {"true", "1"}:
        return True
    if raw.lower() in {"false", "0"}:
        return False
    raise InvalidSchedule.field(name, "must be true or false")


def _present(request: Request, name: str) -> str | None:
    """A query parameter that, when given, must not be empty (absent means "no filter")."""
    raw = request.query_params.get(name)
    if raw == "":
        raise InvalidSchedule.field(name, "must not be empty; leave it out instead")
    return raw


def _schedule_response(schedule: Any, code: int = status.HTTP_200_OK) -> Response:
    response = Response(schedule_out(schedule), status=code)
    response["ETag"] = f'"{schedule.version}"'
    return response


class ScheduleListView(StrictQueryView):
    query_params_allowed = {
        "get": frozenset({"cursor", "limit", "search", "kind", "paused", "completed", "sort"})
    }

    @extend_schema(
        operation_id="schedules_list",
        responses={200: SchedulePageDoc},
        parameters=[
            OpenApiParameter("cursor", str, description="next_cursor of the previous page"),
            limit_param(),
            OpenApiParameter("search", str, description="substring of the name"),
            OpenApiParameter("kind", str, enum=["cron", "once"]),
            OpenApiParameter("paused", bool),
            OpenApiParameter(
                "completed", bool, description="reached max_runs, or past end_at (see completed)"
            ),
            OpenApiParameter(
                "sort",
                str,
                enum=["created", "health"],
                description="created (default): newest first, paged. health: least healthy "
                "first (most consecutive failures, then most dead runs in 24 h, then name): "
                "the first `limit` schedules only (next_cursor is null), since ranking needs "
                "every schedule's streak; takes no cursor, search, kind or paused",
            ),
        ],
    )
    def get(self, request: Request) -> Response:
        sort = request.query_params.get("sort", "created")
        if sort not in ("created", "health"):
            raise InvalidSchedule.field("sort", "must be created or health")
        if sort == "health":
            return self._by_health(request)
        page = selectors.schedule_list(
            tenant=principal(request).tenant,
            cursor=request.query_params.get("cursor"),
            limit=int_param(request, "limit", 50, 1, selectors.MAX_PAGE),
            search=request.query_params.get("search", ""),
            kind=_present(request, "kind") or "",
            paused=_bool_param(request, "paused"),
            completed=_bool_param(request, "completed"),
        )
        return Response(
            {"results": [schedule_out(s) for s in page.items], "next_cursor": page.next_cursor}
        )

    def _by_health(self, request: Request) -> Response:
        for name in ("cursor", "search", "kind", "paused", "completed"):
            if name in request.query_params:
                raise InvalidSchedule.field(name, "is not supported with sort=health")
        ranked = selectors.schedules_by_health(
            tenant=principal(request).tenant,
            now=services.db_now(),
            limit=int_param(request, "limit", 50, 1, selectors.MAX_PAGE),
        )
        return Response(
            {"results": [schedule_out(r.schedule) for r in ranked], "next_cursor": None}
        )

    @extend_schema(request=ScheduleInSerializer, responses={201: ScheduleOutDoc})
    def post(self, request: Request) -> Response:
        data = _api_data(validate_request(ScheduleInSerializer, request))
        schedule = services.schedule_create(actor=principal(request), data=data)
        response = _schedule_response(schedule, status.HTTP_201_CREATED)
        response["Location"] = f"/v1/schedules/{schedule.id}"
        return response


class ScheduleDetailView(StrictQueryView):
    @extend_schema(parameters=[SCHEDULE_ID], responses={200: ScheduleWithHealthDoc})
    def get(self, request: Request, pk: str) -> Response:
        tenant = principal(request).tenant
        schedule = selectors.schedule_get(tenant=tenant, schedule_id=pk)
        response = _schedule_response(schedule)
        health = selectors.schedule_health(tenant=tenant, schedule=schedule, now=services.db_now())
        response.data["health"] = health_out(health)
        return response

    @extend_schema(
        request=SchedulePatchSerializer,
        responses={200: ScheduleOutDoc},
        parameters=[
            SCHEDULE_ID,
            OpenApiParameter(
                "If-Match",
                {"type": "string", "pattern": r'^\s*(W/)?"?[0-9]{1,10}"?\s*$'},
                OpenApiParameter.HEADER,
                description='the ETag you read, e.g. "3"; this or "version" in the body is '
                "required (428 without either), a stale one is a 409",
            ),
        ],
    )
    def patch(self, request: Request, pk: str) -> Response:
        data = _api_data(validate_request(SchedulePatchSerializer, request))
        expected = data.pop("version", None)
        header = request.headers.get("If-Match")
        if header is not None:
            match = ETAG.match(header)
            if not match:
                raise InvalidSchedule.field("If-Match", 'must be the ETag you read, e.g. "3"')
            if expected is not None and int(match.group(1)) != expected:
                raise InvalidSchedule.field("version", "disagrees with If-Match")
            expected = int(match.group(1))
        if expected is None:
            # An edit that names no version would silently overwrite whatever
            # another client saved in between (RFC 6585: 428).
            reason = 'is required: send the ETag you read, or "version" in the body'
            raise PreconditionRequired(f"If-Match: {reason}", detail={"If-Match": [reason]})
        schedule = services.schedule_update(
            actor=principal(request), schedule_id=pk, data=data, expected_version=expected
        )
        return _schedule_response(schedule)

    @extend_schema(parameters=[SCHEDULE_ID], responses={204: None})
    def delete(self, request: Request, pk: str) -> Response:
        services.schedule_delete(actor=principal(request), schedule_id=pk)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ScheduleActionView(StrictQueryView):
    """`POST /v1/schedules/{id}:pause | :resume | :trigger` (the seed's colon paths).

    One route and one documented operation per action, so each documents the
    body it takes (only :pause takes one) and unknown actions are a 404.
    """

    schedule_action = ""  # set by each subclass
    action_roles = {"pause": Role.OPERATOR, "resume": Role.OPERATOR, "trigger": Role.OPERATOR}

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        self.rbac_action = self.schedule_action
        super().initial(request, *args, **kwargs)

    def post(self, request: Request, pk: str) -> Response:
        actor = principal(request)
        if self.schedule_action == "pause":
            data = validate_request(PauseInSerializer, request) if request.data else {}
            schedule = services.schedule_pause(
                actor=actor, schedule_id=pk, reason=data.get("reason", ""), until=data.get("until")
            )
            return _schedule_response(schedule)
        if request.data:
            validate_request(EmptySerializer, request)
        if self.schedule_action == "resume":
            return _schedule_response(services.schedule_resume(actor=actor, schedule_id=pk))
        execution = services.schedule_trigger(actor=actor, schedule_id=pk)
        return Response(execution_out(execution), status=status.HTTP_202_ACCEPTED)


class SchedulePauseView(ScheduleActionView):
    schedule_action = "pause"

    @extend_schema(
        parameters=[SCHEDULE_ID], request=PauseInSerializer, responses={200: ScheduleOutDoc}
    )
    def post(self, request: Request, pk: str) -> Response:
        return super().post(request, pk)


class ScheduleResumeView(ScheduleActionView):
    schedule_action = "resume"

    @extend_schema(parameters=[SCHEDULE_ID], request=None, responses={200: ScheduleOutDoc})
    def post(self, request: Request, pk: str) -> Response:
        return super().post(request, pk)


class ScheduleTriggerView(ScheduleActionView):
    schedule_action = "trigger"

    @extend_schema(parameters=[SCHEDULE_ID], request=None, responses={202: ExecutionOutDoc})
    def post(self, request: Request, pk: str) -> Response:
        return super().post(request, pk)


class SchedulePreviewView(StrictQueryView):
    query_params_allowed = {"get": frozenset({"count", "from"})}

    @extend_schema(
        responses={200: PreviewDoc},
        parameters=[
            SCHEDULE_ID,
            OpenApiParameter(
                "count",
                {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": settings.PREVIEW_MAX_COUNT,
                    "default": 10,
                },
            ),
            OpenApiParameter("from", OpenApiTypes.DATETIME, description=f"{INSTANT}; default now"),
        ],
    )
    def get(self, request: Request, pk: str) -> Response:
        schedule = selectors.schedule_get(tenant=principal(request).tenant, schedule_id=pk)
        count = int_param(request, "count", 10, 1, settings.PREVIEW_MAX_COUNT)
        after = _instant(request, "from") or services.db_now()
        # A schedule paused until T fires nothing before T: those are not listed.
        try:
            occurrences = selectors.schedule_next_runs(schedule=schedule, after=after, count=count)
        except cron.CronError as exc:
            raise InvalidSchedule.field("from", exc.message) from None
        excluded: list[cron.Excluded] = []
        if schedule.kind == "cron":
            text = selectors.cron_text(schedule.cron, seed=schedule.id)
            description, resolved = text.description, text.resolved
            dates = schedule_filter(schedule.id)
            if dates is not None and occurrences:
                # What the calendars removed within the span the preview shows.
                excluded = cron.excluded_between(
                    schedule.cron,
                    schedule.timezone,
                    start=after,
                    end=occurrences[-1].scheduled_for,
                    seed=str(schedule.id),
                    dates=dates,
                    limit=50,
                )
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
                "excluded": [
                    {
                        "scheduled_for": iso_z(e.scheduled_for),
                        "local": e.local.isoformat(),
                        "reason": e.reason,
                    }
                    for e in excluded
                ],
            }
        )


class JobCreateView(StrictQueryView):
    @extend_schema(
        request=JobInSerializer,
        responses={201: ScheduleOutDoc, 200: ScheduleOutDoc},
        description="A one-off job: now (no run_at) or at run_at. Its misfire policy applies: "
        "found more than misfire_grace_s after it fell due (run_at, or its creation when "
        "run_at was already past), it is recorded as skipped (reason `misfire`) under "
        "`skip`, or runs late (trigger `catch_up`) under `run_once` / `catch_up`.",
    )
    def post(self, request: Request) -> Response:
        data = validate_request(JobInSerializer, request)
        job, created = services.job_create(actor=principal(request), data=data)
        response = _schedule_response(
            job, status.HTTP_201_CREATED if created else status.HTTP_200_OK
        )
        response["Location"] = f"/v1/schedules/{job.id}"
        return response


class ExecutionListView(StrictQueryView):
    """The runs list (the console's runs page reads the same selector)."""

    query_params_allowed = {
        "get": frozenset(
            {
                "schedule_id",
                "state",
                "status",
                "trigger",
                "from",
                "to",
                "error",
                "rerun",
                "total",
                "cursor",
                "limit",
            }
        )
    }

    @extend_schema(
        operation_id="executions_list",
        description="Executions newest first. A page reads at most the newest "
        f"{READ_DAYS} days of history after its cursor: a filter that matches few rows "
        "may come back short, even empty, with a next_cursor that reads on below "
        "(scan_limited is true then). Follow next_cursor until it is null.",
        responses={200: ExecutionPageDoc},
        parameters=[
            OpenApiParameter("schedule_id", OpenApiTypes.UUID),
            OpenApiParameter(
                "state",
                str,
                description="execution states, comma-separated: "
                + ", ".join(ExecutionState.values),
            ),
            OpenApiParameter(
                "status", str, deprecated=True, description="the former name of `state`"
            ),
            OpenApiParameter(
                "trigger",
                str,
                description="triggers, comma-separated: " + ", ".join(Trigger.values),
            ),
            OpenApiParameter(
                "from", OpenApiTypes.DATETIME, description=f"scheduled_for at or after; {INSTANT}"
            ),
            OpenApiParameter(
                "to", OpenApiTypes.DATETIME, description=f"scheduled_for before; {INSTANT}"
            ),
            OpenApiParameter(
                "error",
                {"type": "string", "minLength": 1, "maxLength": selectors.ERROR_TEXT_MAX},
                description="text in the error, any case. Each page reads at most the newest "
                f"{selectors.ERROR_SCAN_ROWS} candidates after the cursor (the executions the "
                "other filters select; with no state filter, those with an error): a page may "
                "come back short, even empty, with a next_cursor that continues the search "
                "(scan_limited is true then)",
            ),
            OpenApiParameter(
                "rerun", bool, description="true: only re-run executions; false: never re-run"
            ),
            OpenApiParameter(
                "total",
                bool,
                description=f"also count the matches, up to {selectors.COUNT_CAP} and over "
                f"the newest {READ_DAYS} days of history (total_capped: there may be more); "
                "not for an error-text search",
            ),
            OpenApiParameter("cursor", str, description="next_cursor of the previous page"),
            limit_param(),
        ],
    )
    def get(self, request: Request) -> Response:
        if "state" in request.query_params and "status" in request.query_params:
            raise InvalidSchedule.field("status", "is the former name of state: give one")
        state_field = "status" if "status" in request.query_params else "state"
        flt = selectors.execution_filter(
            state=request.query_params.get(state_field),
            schedule_id=_present(request, "schedule_id"),
            trigger=request.query_params.get("trigger"),
            since=_instant(request, "from"),
            until=_instant(request, "to"),
            error=request.query_params.get("error"),
            rerun=_bool_param(request, "rerun"),
            state_field=state_field,
        )
        tenant = principal(request).tenant
        page = selectors.execution_list(
            tenant=tenant,
            cursor=request.query_params.get("cursor"),
            limit=int_param(request, "limit", 50, 1, selectors.MAX_PAGE),
            flt=flt,
        )
        body: dict[str, Any] = {
            "results": [execution_out(e) for e in page.items],
            "next_cursor": page.next_cursor,
            "scan_limited": page.scan_limited,
        }
        if _bool_param(request, "total"):
            counted = selectors.execution_count(tenant=tenant, flt=flt)
            body["total"] = counted[0] if counted else None
            body["total_capped"] = counted[1] if counted else None
        return Response(body)


class ExecutionDetailView(StrictQueryView):
    @extend_schema(parameters=[EXECUTION_ID], responses={200: ExecutionDetailDoc})
    def get(self, request: Request, pk: str) -> Response:
        # Once its day was archived and dropped, the same answer is read back from the
        # archive, saying so and where (dispatch/history/archive.py).
        record = selectors.execution_record(tenant=principal(request).tenant, execution_id=pk)
        execution, events = record.execution, record.events
        body = execution_out(execution)
        body["archived"] = None if record.archived is None else archived_out(record.archived)
        body["events"] = [event_out(ev) for ev in events]
        # The whole story in time order: scheduled / due / published / started /
        # finished steps (row timestamps) merged with the events, as the console shows it.
        body["timeline"] = [
            timeline_out(item)
            for item in selectors.execution_timeline(execution=execution, events=events)
        ]
        return Response(body)


class ScheduleExplainView(StrictQueryView):
    """`GET /v1/schedules/{id}/explain?at=ISO-INSTANT`: why it did or didn't run then."""

    query_params_allowed = {"get": frozenset({"at"})}

    @extend_schema(
        parameters=[
            SCHEDULE_ID,
            OpenApiParameter("at", OpenApiTypes.DATETIME, required=True, description=INSTANT),
        ],
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
        return Response(explain.as_json(answer))
