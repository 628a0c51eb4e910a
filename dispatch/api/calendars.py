"""Calendars (`/v1/calendars`): list, create, read, edit, delete (operators write,
viewers read), and `/v1/calendars/{id}/dates?from=&to=`, the dates a calendar holds
with their names. Schedules use them by name in `exclude_calendars` /
`only_calendars` (dispatch/services/calendars.py); a calendar in use cannot be
deleted (409 naming the schedules).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from core.api.views import StrictQueryView
from dispatch import calendars
from dispatch.api import views
from dispatch.api.serializers import StrictSerializer, iso_z
from dispatch.exceptions import InvalidSchedule
from dispatch.models import Calendar
from dispatch.selectors import calendars as calendar_reads
from dispatch.services import calendars as calendar_writes

CALENDAR_ID = OpenApiParameter("id", OpenApiTypes.UUID, OpenApiParameter.PATH)
SOURCES_HELP = (
    'A list of sources, each one of: {"type": "dates", "dates": ["2026-12-24"], "name": '
    '"office closed"}; {"type": "range", "start": "2026-12-24", "end": "2026-12-31", "name": '
    '"..."} (inclusive; ranges may not overlap); {"type": "holidays", "country": "NL", '
    '"subdivision": null} (public holidays, years computed as needed); {"type": "ics", '
    '"content": "BEGIN:VCALENDAR..."} or {"type": "ics", "url": "https://..."} (fetched once, '
    "through the SSRF guard, and stored; the url follows the target url rules; RRULEs "
    "repeating within a day are refused, and the expansion is bounded in dates, steps and "
    'time); {"type": "preset", "preset": "weekends" | "business_days"}. The dates are '
    "expanded at save and stored."
)


def calendar_out(calendar: Calendar) -> dict[str, Any]:
    return {
        "id": str(calendar.id),
        "name": calendar.name,
        "description": calendar.description,
        "sources": calendars.source_summary(calendar.sources),
        "version": calendar.version,
        "created_at": iso_z(calendar.created_at),
        "updated_at": iso_z(calendar.updated_at),
        "created_by": calendar.created_by or None,
        "updated_by": calendar.updated_by or None,
    }


class CalendarInSerializer(StrictSerializer):
    name = serializers.CharField(max_length=100)
    description = serializers.CharField(max_length=500, required=False, allow_blank=True)
    sources = serializers.JSONField(help_text=SOURCES_HELP)


class CalendarPatchSerializer(StrictSerializer):
    name = serializers.CharField(max_length=100, required=False)
    description = serializers.CharField(max_length=500, required=False, allow_blank=True)
    sources = serializers.JSONField(required=False, help_text=SOURCES_HELP)


class CalendarOutDoc(serializers.Serializer[Any]):
    id = serializers.UUIDField()
    name = serializers.CharField()
    description = serializers.CharField()
    sources = serializers.JSONField(help_text=SOURCES_HELP + " An .ics shows its url and size.")
    version = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    created_by = serializers.CharField(allow_null=True)
    updated_by = serializers.CharField(allow_null=True)


class CalendarListDoc(serializers.Serializer[Any]):
    results = CalendarOutDoc(many=True)


class CalendarDateDoc(serializers.Serializer[Any]):
    date = serializers.DateField()
    name = serializers.CharField(help_text='"Christmas Day", "Saturday", or the source\'s name')


class CalendarDatesDoc(serializers.Serializer[Any]):
    calendar = serializers.CharField()
    results = CalendarDateDoc(many=True)


def _body(serializer_cls: type[StrictSerializer], request: Request) -> dict[str, Any]:
    validated = views.validate_request(serializer_cls, request)
    return {key: request.data[key] for key in validated if key in request.data}


class CalendarListView(StrictQueryView):
    @extend_schema(operation_id="calendars_list", responses={200: CalendarListDoc})
    def get(self, request: Request) -> Response:
        found = calendar_reads.calendar_list(tenant=views.principal(request).tenant)
        return Response({"results": [calendar_out(c) for c in found]})

    @extend_schema(
        operation_id="calendars_create",
        request=CalendarInSerializer,
        responses={201: CalendarOutDoc},
        description="Bad input answers 400 naming the field (`sources[1].country`) and why; "
        "nothing is saved.",
    )
    def post(self, request: Request) -> Response:
        data = _body(CalendarInSerializer, request)
        calendar = calendar_writes.calendar_create(actor=views.principal(request), data=data)
        response = Response(calendar_out(calendar), status=status.HTTP_201_CREATED)
        response["Location"] = f"/v1/calendars/{calendar.id}"
        return response


class CalendarDetailView(StrictQueryView):
    @extend_schema(
        operation_id="calendars_get", parameters=[CALENDAR_ID], responses={200: CalendarOutDoc}
    )
    def get(self, request: Request, pk: str) -> Response:
        tenant = views.principal(request).tenant
        return Response(calendar_out(calendar_reads.calendar_get(tenant=tenant, calendar_id=pk)))

    @extend_schema(
        operation_id="calendars_update",
        parameters=[CALENDAR_ID],
        request=CalendarPatchSerializer,
        responses={200: CalendarOutDoc},
        description="New sources change the future of every schedule listing the calendar: "
        "their staged occurrences are withdrawn and re-planned. 400 if a schedule would "
        "then never run within five years.",
    )
    def patch(self, request: Request, pk: str) -> Response:
        data = _body(CalendarPatchSerializer, request)
        calendar = calendar_writes.calendar_update(
            actor=views.principal(request), calendar_id=pk, data=data
        )
        return Response(calendar_out(calendar))

    @extend_schema(
        operation_id="calendars_delete",
        parameters=[CALENDAR_ID],
        responses={204: None},
        description="409 while a schedule lists the calendar (the answer names them).",
    )
    def delete(self, request: Request, pk: str) -> Response:
        calendar_writes.calendar_delete(actor=views.principal(request), calendar_id=pk)
        return Response(status=status.HTTP_204_NO_CONTENT)


def _date_param(request: Request, name: str, default: dt.date) -> dt.date:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        day = dt.date.fromisoformat(raw)
    except ValueError:
        raise InvalidSchedule.field(name, "must be a date YYYY-MM-DD") from None
    if day > calendar_reads.LAST_DAY:
        raise InvalidSchedule.field(name, f"must be a date up to {calendar_reads.LAST_DAY}")
    return day


class CalendarDatesView(StrictQueryView):
    query_params_allowed = {"get": frozenset({"from", "to"})}

    @extend_schema(
        operation_id="calendars_dates",
        parameters=[
            CALENDAR_ID,
            OpenApiParameter("from", OpenApiTypes.DATE, description="default: today (UTC)"),
            OpenApiParameter(
                "to", OpenApiTypes.DATE, description="default: a year after from; at most 3 years"
            ),
        ],
        responses={200: CalendarDatesDoc},
    )
    def get(self, request: Request, pk: str) -> Response:
        tenant = views.principal(request).tenant
        calendar = calendar_reads.calendar_get(tenant=tenant, calendar_id=pk)
        start = _date_param(request, "from", dt.datetime.now(dt.UTC).date())
        end = _date_param(
            request, "to", min(start + dt.timedelta(days=365), calendar_reads.LAST_DAY)
        )
        dates = calendar_reads.calendar_date_list(calendar, start=start, end=end)
        return Response({"calendar": calendar.name, "results": dates})
