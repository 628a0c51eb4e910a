"""API shapes: strict input serializers (types, unknown and read-only fields)
and plain output functions. Meaning is validated by dispatch/schedule_fields.py."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rest_framework import serializers

from dispatch.explain import CODE_MEANINGS
from dispatch.models import (
    DurationClass,
    Execution,
    ExecutionEvent,
    Misfire,
    Overlap,
    Priority,
    Schedule,
)

SCHEDULE_READ_ONLY = {
    "id",
    "kind",
    "version",
    "next_run_at",
    "created_at",
    "updated_at",
    "paused",
    "paused_at",
    "paused_until",
    "paused_reason",
    "paused_by",
    "partition",
    "description",
    "created_by",
}


def iso_z(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


class StrictSerializer(serializers.Serializer[Any]):
    """Rejects fields it does not know, naming them, and read-only fields sent as input."""

    read_only_names: set[str] = set()

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, dict):
            raise serializers.ValidationError({"non_field_errors": ["expected a JSON object"]})
        errors: dict[str, list[str]] = {}
        for key in data:
            if key in self.read_only_names:
                errors[key] = ["is read-only"]
            elif key not in self.fields:
                errors[key] = ["unknown field"]
        if errors:
            raise serializers.ValidationError(errors)
        return super().to_internal_value(data)


class ScheduleInSerializer(StrictSerializer):
    read_only_names = SCHEDULE_READ_ONLY

    name = serializers.CharField(max_length=200, required=False)
    tenant = serializers.CharField(
        max_length=63, required=False, help_text="must be the token's tenant"
    )
    cron = serializers.CharField(
        max_length=200,
        required=False,
        allow_null=True,
        help_text="5-field cron; H, H(a-b), H/n allowed; macros @hourly…@yearly",
    )
    run_at = serializers.DateTimeField(
        required=False, allow_null=True, help_text="one-off instant (instead of cron)"
    )
    timezone = serializers.CharField(
        max_length=64, required=False, help_text="IANA zone, e.g. Europe/Amsterdam"
    )
    target = serializers.JSONField(required=False)
    retry = serializers.JSONField(required=False)
    concurrency = serializers.ChoiceField(choices=Overlap.values, required=False)
    misfire = serializers.ChoiceField(choices=Misfire.values, required=False)
    misfire_grace_s = serializers.IntegerField(required=False)
    catch_up_limit = serializers.IntegerField(required=False)
    jitter_s = serializers.IntegerField(required=False)
    priority = serializers.ChoiceField(choices=Priority.values, required=False)
    duration = serializers.ChoiceField(choices=DurationClass.values, required=False)
    depends_on = serializers.ListField(child=serializers.UUIDField(), required=False, max_length=20)


class SchedulePatchSerializer(ScheduleInSerializer):
    read_only_names = SCHEDULE_READ_ONLY - {"version"}
    version = serializers.IntegerField(
        required=False,
        min_value=1,
        help_text="optimistic concurrency: the version you read (or If-Match)",
    )


class JobInSerializer(StrictSerializer):
    read_only_names = SCHEDULE_READ_ONLY

    name = serializers.CharField(max_length=200, required=False)
    tenant = serializers.CharField(max_length=63, required=False)
    run_at = serializers.DateTimeField(required=False, allow_null=True, help_text="absent: run now")
    timezone = serializers.CharField(max_length=64, required=False)
    target = serializers.JSONField()
    retry = serializers.JSONField(required=False)
    idempotency_key = serializers.CharField(max_length=200, required=False, allow_null=True)
    priority = serializers.ChoiceField(choices=Priority.values, required=False)
    duration = serializers.ChoiceField(choices=DurationClass.values, required=False)
    misfire = serializers.ChoiceField(
        choices=Misfire.values,
        required=False,
        help_text="when the job is found later than misfire_grace_s after it fell due (e.g. "
        "the scheduler was down, or the job was paused past its time): `skip` (default) "
        "records it as skipped with reason `misfire`; `run_once` / `catch_up` run it late",
    )
    misfire_grace_s = serializers.IntegerField(
        required=False,
        help_text="seconds late the job may still run on time (default 60); it fell due at "
        "run_at, or when it was created if run_at was already past",
    )


class PauseInSerializer(StrictSerializer):
    reason = serializers.CharField(max_length=500, required=False, allow_blank=True)
    until = serializers.DateTimeField(required=False, allow_null=True)


class EmptySerializer(StrictSerializer):
    pass


# --- Output (plain functions: explicit, fast, no ORM surprises) ---


def schedule_out(s: Schedule) -> dict[str, Any]:
    return {
        "id": str(s.id),
        "tenant": s.tenant.slug,
        "name": s.name,
        "kind": s.kind,
        "cron": s.cron or None,
        "run_at": iso_z(s.run_at),
        "timezone": s.timezone,
        "target": s.target,
        "retry": s.retry,
        "concurrency": s.overlap,
        "misfire": s.misfire,
        "misfire_grace_s": s.misfire_grace_s,
        "catch_up_limit": s.catch_up_limit,
        "jitter_s": s.jitter_s,
        "priority": s.priority,
        "duration": s.duration_class,
        "depends_on": [str(d.id) for d in s.depends_on.all()],
        "paused": s.paused,
        "paused_at": iso_z(s.paused_at),
        "paused_until": iso_z(s.paused_until),
        "paused_reason": s.paused_reason or None,
        "paused_by": s.paused_by or None,
        "idempotency_key": s.idempotency_key,
        "next_run_at": iso_z(s.next_run_at),
        "version": s.version,
        "created_at": iso_z(s.created_at),
        "updated_at": iso_z(s.updated_at),
        "created_by": s.created_by,
    }


def execution_out(e: Execution) -> dict[str, Any]:
    return {
        "id": str(e.id),
        "execution_id": str(e.id),
        "schedule_id": str(e.schedule_id),
        "scheduled_for": iso_z(e.scheduled_for),
        "due_at": iso_z(e.due_at),
        "trigger": e.trigger,
        "attempt": e.attempt,
        "state": e.state,
        "queue": e.queue or None,
        "lease_owner": e.lease_owner or None,
        "lease_expires_at": iso_z(e.lease_expires_at),
        "fencing_token": e.fencing_token,
        "next_attempt_at": iso_z(e.next_attempt_at),
        "created_at": iso_z(e.created_at),
        "enqueued_at": iso_z(e.enqueued_at),
        "started_at": iso_z(e.started_at),
        "finished_at": iso_z(e.finished_at),
        "status_code": e.status_code,
        "exit_code": e.exit_code,
        "error": e.error or None,
        "log_excerpt": e.log_excerpt or None,
        "reason_code": e.reason_code or None,
        "reason": e.reason or None,
    }


def event_out(ev: ExecutionEvent) -> dict[str, Any]:
    return {
        "id": ev.id,
        "at": iso_z(ev.at),
        "kind": ev.kind,
        "message": ev.message,
        "data": ev.data,
        "actor": ev.actor or None,
    }


def timeline_out(item: Any) -> dict[str, Any]:
    return {
        "at": iso_z(item.at),
        "kind": item.kind,
        "message": item.message,
        "actor": item.actor or None,
        "data": item.data,
    }


# Documentation-only serializers for the OpenAPI document.
class ScheduleOutDoc(serializers.Serializer[Any]):
    id = serializers.UUIDField()
    tenant = serializers.CharField()
    name = serializers.CharField()
    kind = serializers.ChoiceField(choices=["cron", "once"])
    cron = serializers.CharField(allow_null=True)
    run_at = serializers.DateTimeField(allow_null=True)
    timezone = serializers.CharField()
    target = serializers.JSONField()
    retry = serializers.JSONField()
    concurrency = serializers.CharField()
    misfire = serializers.CharField()
    jitter_s = serializers.IntegerField()
    priority = serializers.CharField()
    duration = serializers.CharField()
    paused = serializers.BooleanField()
    next_run_at = serializers.DateTimeField(allow_null=True)
    version = serializers.IntegerField()


class ExecutionOutDoc(serializers.Serializer[Any]):
    execution_id = serializers.UUIDField()
    schedule_id = serializers.UUIDField()
    scheduled_for = serializers.DateTimeField()
    due_at = serializers.DateTimeField()
    trigger = serializers.CharField()
    attempt = serializers.IntegerField()
    state = serializers.CharField()
    fencing_token = serializers.IntegerField()


class TimelineItemDoc(serializers.Serializer[Any]):
    at = serializers.DateTimeField()
    kind = serializers.CharField(
        help_text="created, scheduled, due, published, republished, started, finished, "
        "or an event kind (claimed, held_*, attempt_*, retry, dead, cancelled, ...)"
    )
    message = serializers.CharField()
    actor = serializers.CharField(allow_null=True)
    # The metaclass moves declared fields off the class: no clash with Serializer.data.
    data = serializers.JSONField(allow_null=True)  # type: ignore[assignment]


class ExecutionDetailDoc(ExecutionOutDoc):
    events = serializers.ListField(child=serializers.JSONField())
    timeline = TimelineItemDoc(many=True, help_text="row steps and events, in time order")


class OccurrenceDoc(serializers.Serializer[Any]):
    scheduled_for = serializers.DateTimeField(help_text="UTC, nominal")
    local = serializers.CharField(help_text="ISO 8601 with the zone's offset")
    due_at = serializers.DateTimeField(help_text="UTC, jitter applied")
    note = serializers.CharField(allow_null=True, help_text="DST annotation")


class PreviewDoc(serializers.Serializer[Any]):
    occurrences = OccurrenceDoc(many=True)
    description = serializers.CharField()
    resolved = serializers.CharField()
    note = serializers.CharField(
        allow_null=True, help_text="set when paused until a time: earlier runs are left out"
    )


class EvidenceDoc(serializers.Serializer[Any]):
    kind = serializers.ChoiceField(choices=["execution", "event", "audit", "schedule"])
    id = serializers.CharField()
    label = serializers.CharField(required=False)  # type: ignore[assignment]
    url = serializers.CharField(required=False, help_text="where an API client reads it")


class ExplanationDoc(serializers.Serializer[Any]):
    code = serializers.ChoiceField(
        choices=list(CODE_MEANINGS),
        help_text="what happened, machine-readable: "
        + "; ".join(f"`{code}`: {meaning}" for code, meaning in CODE_MEANINGS.items()),
    )
    sentence = serializers.CharField(help_text="the answer in words, fit to show a user")
    evidence = EvidenceDoc(many=True)
    at = serializers.DateTimeField()
    occurrence = serializers.DateTimeField(allow_null=True)
    execution_id = serializers.UUIDField(allow_null=True)
    notes = serializers.ListField(child=serializers.CharField(), help_text="DST notes")
