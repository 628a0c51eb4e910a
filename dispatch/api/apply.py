"""Schedules as code (`/v1`): POST /v1/schedules:apply makes a file of definitions
true in one transaction (dispatch/services/apply.py); GET /v1/schedules:export
gives the tenant's definitions in the shape apply takes
(dispatch/selectors/definitions.py), so apply(export()) changes nothing."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from core.api.views import StrictQueryView
from dispatch import selectors, services
from dispatch.api.calendars import CalendarInSerializer
from dispatch.api.jobs import item_error
from dispatch.api.serializers import (
    MAX_VERSION,
    SCHEDULE_READ_ONLY,
    ScheduleInSerializer,
    iso_z,
)
from dispatch.api.views import principal
from dispatch.exceptions import InvalidSchedule
from dispatch.services.apply import (
    APPLY_MAX,
    CHANGE_ACTIONS,
    NEXT_RUNS,
    PAUSE_REASON,
    ApplyResult,
    Change,
)
from dispatch.services.apply_calendars import CalendarChange
from tenants.models import Tenant

ENVELOPE = ("schedules", "calendars", "prune", "dry_run")


class DefinitionSerializer(ScheduleInSerializer):
    """A definition: the body of POST /v1/schedules, upstreams by name, and two controls."""

    read_only_names = SCHEDULE_READ_ONLY - {"version", "paused"}

    depends_on = serializers.ListField(
        child=serializers.CharField(max_length=200),
        required=False,
        max_length=20,
        help_text="upstream schedules by NAME: the file's own first, then the tenant's live ones",
    )
    version = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=MAX_VERSION,
        help_text="apply only if the live schedule is still at this version (else 409, "
        "nothing applied); absent or null: whatever it is",
    )
    paused = serializers.BooleanField(
        required=False,
        allow_null=True,
        help_text=f'present: make the pause state match (pause with reason "{PAUSE_REASON}" / '
        "resume); absent or null: leave it as it is",
    )


class ApplyInSerializer(serializers.Serializer[Any]):
    """The body of POST /v1/schedules:apply (documentation; the view checks it item by item)."""

    schedules = DefinitionSerializer(many=True, help_text=f"at most {APPLY_MAX}, names unique")
    calendars = CalendarInSerializer(
        many=True,
        required=False,
        help_text="the calendars the schedules name, keyed by name, applied first (the body of "
        "POST /v1/calendars; an .ics with content and url keeps the url as its origin, no "
        "fetch); absent: the tenant's calendars are left alone, prune included",
    )
    prune = serializers.BooleanField(
        required=False,
        default=False,
        help_text="delete (soft) the tenant's live definitions not in the request; one-off "
        "jobs of /v1/jobs are never touched; with `calendars`, also the calendars not in it "
        "(409 naming the schedules if one is still listed)",
    )
    dry_run = serializers.BooleanField(
        required=False, default=False, help_text="the same validation and answer, nothing written"
    )


class NextRunsDoc(serializers.Serializer[Any]):
    before = serializers.ListField(child=serializers.DateTimeField())
    after = serializers.ListField(child=serializers.DateTimeField())


class FieldChangeDoc(serializers.Serializer[Any]):
    before = serializers.JSONField(allow_null=True)
    after = serializers.JSONField(allow_null=True)


class ChangeDoc(serializers.Serializer[Any]):
    name = serializers.CharField()
    action = serializers.ChoiceField(choices=CHANGE_ACTIONS)
    id = serializers.UUIDField(allow_null=True, help_text="null for a create in a dry run")
    version = serializers.IntegerField(allow_null=True, help_text="the version after applying")
    fields = serializers.DictField(  # type: ignore[assignment]  # a field, not Serializer.fields
        child=FieldChangeDoc(), required=False, help_text="update only: what changes"
    )
    next_runs = NextRunsDoc(help_text=f"the next {NEXT_RUNS} runs before and after")


class SummaryDoc(serializers.Serializer[Any]):
    # Fields, not Serializer.create / .update (the metaclass takes them out of the class).
    create = serializers.IntegerField()  # type: ignore[assignment]
    update = serializers.IntegerField()  # type: ignore[assignment]
    unchanged = serializers.IntegerField()
    delete = serializers.IntegerField()


class CalendarChangeDoc(serializers.Serializer[Any]):
    name = serializers.CharField()
    action = serializers.ChoiceField(choices=CHANGE_ACTIONS)
    id = serializers.UUIDField(allow_null=True, help_text="null for a create in a dry run")
    version = serializers.IntegerField(allow_null=True)
    fields = serializers.DictField(  # type: ignore[assignment]  # a field, not Serializer.fields
        child=FieldChangeDoc(), required=False, help_text="update only: what changes"
    )


class CalendarsOutDoc(serializers.Serializer[Any]):
    summary = SummaryDoc()
    changes = CalendarChangeDoc(many=True, help_text="in request order, then the deletions")


class ApplyOutDoc(serializers.Serializer[Any]):
    dry_run = serializers.BooleanField()
    summary = SummaryDoc()
    changes = ChangeDoc(many=True, help_text="in request order, then the deletions by name")
    calendars = CalendarsOutDoc(required=False, help_text="only when the request had calendars")


class ExportOutDoc(serializers.Serializer[Any]):
    schedules = DefinitionSerializer(many=True)
    calendars = CalendarInSerializer(many=True, help_text="every live calendar, by name")


def _definitions(
    request: Request, tenant: Tenant
) -> tuple[list[dict[str, Any]], list[Any] | None, bool, bool]:
    """The request's definitions (each checked as POST /v1/schedules checks its body, its
    errors under `schedules[i]`), prune and dry_run; a 400 naming what is wrong."""
    body = request.data
    if not isinstance(body, dict):
        raise InvalidSchedule.field(
            "non_field_errors", 'expected a JSON object {"schedules": [...]}'
        )
    unknown = sorted(k for k in body if k not in ENVELOPE)
    if unknown:
        raise InvalidSchedule.field(unknown[0], "unknown field")
    raw = body.get("schedules")
    if not isinstance(raw, list):
        raise InvalidSchedule.field("schedules", "must be a list of schedule definitions")
    if len(raw) > APPLY_MAX:
        raise InvalidSchedule.field("schedules", f"at most {APPLY_MAX} definitions per request")
    flags = []
    for flag in ("prune", "dry_run"):
        value = body.get(flag, False)
        if not isinstance(value, bool):
            raise InvalidSchedule.field(flag, "must be true or false")
        flags.append(value)
    ser = DefinitionSerializer()  # one for every item: building its fields is the cost
    out: list[dict[str, Any]] = []
    for index, item in enumerate(raw):
        try:
            data = dict(ser.run_validation(item))
        except serializers.ValidationError as exc:
            raise item_error(index, exc.detail, "schedules") from None
        slug = data.pop("tenant", None)
        if slug is not None and slug != tenant.slug:
            raise item_error(
                index, {"tenant": ["must be the tenant of your token (or omitted)"]}, "schedules"
            )
        out.append(data)
    calendars = body.get("calendars")
    if "calendars" in body and not isinstance(calendars, list):
        # null is not "absent": absent leaves the tenant's calendars alone.
        raise InvalidSchedule.field("calendars", "must be a list of calendar definitions")
    # The items are checked by the service, which cleans sources as POST /v1/calendars does.
    return out, calendars, flags[0], flags[1]


def change_out(change: Change) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": change.name,
        "action": change.action,
        "id": str(change.id) if change.id else None,
        "version": change.version,
    }
    if change.action == "update":
        out["fields"] = change.fields
    out["next_runs"] = {
        "before": [iso_z(t) for t in change.next_before],
        "after": [iso_z(t) for t in change.next_after],
    }
    return out


def calendar_change_out(change: CalendarChange, *, dry_run: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": change.name,
        "action": change.action,
        "id": None if dry_run and change.action == "create" else str(change.id),
        "version": change.version,
    }
    if change.action == "update":
        out["fields"] = change.fields
    return out


def apply_out(result: ApplyResult) -> dict[str, Any]:
    out: dict[str, Any] = {
        "dry_run": result.dry_run,
        "summary": result.summary,
        "changes": [change_out(c) for c in result.changes],
    }
    if result.calendars is not None:
        summary = dict.fromkeys(CHANGE_ACTIONS, 0)
        for change in result.calendars:
            summary[change.action] += 1
        out["calendars"] = {
            "summary": summary,
            "changes": [calendar_change_out(c, dry_run=result.dry_run) for c in result.calendars],
        }
    return out


class ScheduleApplyView(StrictQueryView):
    @extend_schema(
        operation_id="schedules_apply",
        request=ApplyInSerializer,
        responses={200: ApplyOutDoc},
        description=f"Apply up to {APPLY_MAX} schedule definitions, keyed by name, in ONE "
        "transaction: a missing name is created, a differing definition updated (version "
        "bump, audited, staged runs withdrawn, as PATCH), an equal one left unchanged (no "
        "write). With prune, the tenant's other live definitions are deleted (soft, as "
        "DELETE); one-off jobs of /v1/jobs never. Each definition is the body of POST "
        "/v1/schedules with depends_on as names, an optional `version` (stale: 409) and an "
        "optional `paused`. Any error (400 naming `schedules[i].<field>`, 409, 422 quota) "
        "applies nothing. dry_run: the same answer, nothing written (creates have no id). "
        f"Body limit API_BULK_MAX_BODY_BYTES = {settings.API_BULK_MAX_BODY_BYTES} bytes (413).",
    )
    def post(self, request: Request) -> Response:
        actor = principal(request)
        definitions, calendars, prune, dry_run = _definitions(request, actor.tenant)
        result = services.schedules_apply(
            actor=actor, definitions=definitions, calendars=calendars, prune=prune, dry_run=dry_run
        )
        return Response(apply_out(result))


class ScheduleExportView(StrictQueryView):
    @extend_schema(
        operation_id="schedules_export",
        responses={200: ExportOutDoc},
        description="Every live schedule of the tenant that is a definition (not the one-off "
        "jobs of /v1/jobs), ordered by name, each with only the fields that differ from the "
        "default (name, cron or run_at, and target always), depends_on as names, "
        "`paused: true` for paused ones, and every live calendar (an .ics with its content). "
        "POST it back to /v1/schedules:apply with prune: all unchanged.",
    )
    def get(self, request: Request) -> Response:
        tenant = principal(request).tenant
        return Response(
            {
                "schedules": selectors.definitions_export(tenant=tenant),
                "calendars": selectors.calendar_definitions_export(tenant=tenant),
            }
        )
