"""API shapes: strict input serializers (types, unknown and read-only fields)
and plain output functions. Meaning is validated by dispatch/schedule_fields.py."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.fields import empty

from core.api import inputs
from dispatch.explain import CODE_MEANINGS
from dispatch.history.archive import ArchivedExecution
from dispatch.lifecycle import completion
from dispatch.models import (
    DurationClass,
    Execution,
    ExecutionEvent,
    Misfire,
    Overlap,
    Priority,
    Schedule,
)
from dispatch.selectors import schedule_fields
from dispatch.timing import cron

# Schedule.version is a PositiveIntegerField; a larger number could never match.
MAX_VERSION = 2**31 - 1
TARGET_HELP = (
    'one of {"type": "http", "url", "method", "headers", "body", "timeout_s", "auth"}, '
    '{"type": "queue", "routing_key", "exchange", "broker", "body", "timeout_s", "auth"} or '
    '{"type": "command", "command", "args", "env", "timeout_s", "auth"}; credentials only as '
    'secret references {"secret": "vault:kv/<tenant>/path#key"}; "auth": {"type": "oidc", '
    '"audience"} adds a workload identity token per run'
)
RETRY_HELP = (
    '{"max_attempts": 1..100, "backoff": "exponential"|"fixed", "initial_s": 0..86400, '
    '"max_s": 0..86400}'
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
    "runs_succeeded",
    "completed",
    "completed_at",
    "completed_reason",
    "partition",
    "description",
    "created_by",
}


def iso_z(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


@extend_schema_field(
    {
        "type": "object",
        "required": ["type"],
        "properties": {"type": {"type": "string", "enum": ["http", "queue", "command"]}},
    }
)
class _ParsedJSONField(serializers.JSONField):
    """A JSON value of a request body the API's parser already read: DRF's JSONField
    would serialise it again only to prove it serialisable (once per item of a
    1,000-job batch)."""

    def to_internal_value(self, data: Any) -> Any:
        return data


class TargetField(_ParsedJSONField):
    """A target definition (checked in depth by dispatch/targets)."""


@extend_schema_field(
    {
        "type": "object",
        "properties": {
            "max_attempts": {"type": "integer", "minimum": 1, "maximum": 100},
            "backoff": {"type": "string", "enum": ["exponential", "fixed"]},
            "initial_s": {"type": "integer", "minimum": 0, "maximum": 86400},
            "max_s": {"type": "integer", "minimum": 0, "maximum": 86400},
        },
        "additionalProperties": False,
    }
)
class RetryField(_ParsedJSONField):
    """A retry policy (checked by dispatch/schedule_fields.clean_retry)."""


_SPEC_SCHEMA = {
    "type": "object",
    "properties": {
        "cron": {"type": "string", "maxLength": 200},
        "every": {"type": "string", "example": "90m"},
        "anchor": {"type": "string", "example": "2026-01-01T00:15:00"},
    },
    "additionalProperties": False,
}


@extend_schema_field({"type": "array", "minItems": 1, "maxItems": 20, "items": _SPEC_SCHEMA})
class SpecsField(serializers.JSONField):
    """A schedule's specs (checked in depth by dispatch/schedule_fields.clean_timing)."""


CONCURRENCY_KEY_HELP = (
    "keyed concurrency across every schedule and job of the tenant: at most `limit` "
    "runs with the same rendered key are active (queued, running or retrying) at once. "
    "`key` is a template of definition fields, e.g. customer-{target.body.customer_id} "
    "or {args.customer}; `on_conflict`: queue (held until a holder ends), skip, or "
    "replace (the oldest holder is cancelled). null: no key"
)


@extend_schema_field(
    {
        "type": "object",
        "nullable": True,
        "required": ["key"],
        "properties": {
            "key": {"type": "string", "maxLength": 200},
            "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 1},
            "on_conflict": {
                "type": "string",
                "enum": ["queue", "skip", "replace"],
                "default": "queue",
            },
        },
        "additionalProperties": False,
    }
)
class ConcurrencyKeyField(serializers.JSONField):
    """A keyed-concurrency definition (checked by dispatch/concurrency_keys.clean)."""


def delete_after_field() -> serializers.CharField:
    return serializers.CharField(
        max_length=32,
        required=False,
        allow_null=True,
        help_text="one-off jobs only: remove the job (soft delete, as DELETE does; its "
        'executions stay) this long after its run ended, e.g. "1h", "7d" (units s m h d w, '
        "at most 3650d). Absent or null: keep it.",
    )


class InstantField(serializers.DateTimeField):
    """An ISO 8601 instant that carries its offset, inside core.api.inputs' range.

    DRF's DateTimeField reads a naive value in the server's zone before any
    later check could see it was naive; a naive `run_at` would silently mean UTC.
    """

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("help_text", f"ISO 8601 instant with an offset or Z, {inputs.RANGE_TEXT}")
        super().__init__(**kwargs)

    def enforce_timezone(self, value: datetime) -> datetime:
        try:
            inputs.check_instant(value, self.field_name or "")
        except inputs.InvalidInput as exc:
            raise serializers.ValidationError(exc.reason) from None
        return super().enforce_timezone(value)


def _printable(value: str) -> None:
    if not value.isprintable():
        raise serializers.ValidationError("must be printable characters (no control characters)")


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


# Item values the memo of ItemValidator keys by (field, type, value): immutable, hashable.
_MEMO_TYPES = (str, int, float, bool, type(None))
_UNSEEN = object()


class ItemValidator:
    """`serializer_class`'s validation of many items (the jobs of a batch), paying per item
    only for the fields it sends.

    A serializer (StrictSerializer) refuses unknown and read-only keys, then validates an
    item field by field (each field's `run_validation` on its value, absent optional ones
    skipped), then runs its own validators. An item that is an
    object of known fields with every required one is put through those same field
    objects, one by one, and a field's scalar value already accepted in this request
    (the batch's shared `run_at`, `priority`, ...) reuses what that field returned for
    it (a field of a serializer with no instance and no context sees nothing but its
    value). Anything else — an item that is not such an object, or any field refusing its
    value — is validated by the whole serializer, whose error is the answer: the rules,
    and the errors' wording and order, stay the serializer's alone. A serializer with
    more than field rules (defaults, a field stored under another name, `validate_<field>`
    methods, object-level validation) is always run whole."""

    def __init__(self, serializer_class: type[StrictSerializer]) -> None:
        self.serializer = serializer_class()
        self.fields = [(n, f) for n, f in self.serializer.fields.items() if not f.read_only]
        self.names = frozenset(name for name, _ in self.fields)
        self.required = frozenset(name for name, f in self.fields if f.required)
        self.memo: dict[tuple[str, type, Any], Any] = {}
        self.field_rules_only = (
            serializer_class.to_internal_value is StrictSerializer.to_internal_value
            and serializer_class.run_validation is serializers.Serializer.run_validation
            and serializer_class.validate is serializers.Serializer.validate
            and not self.serializer.get_validators()
            and all(f.default is empty and f.source_attrs == [n] for n, f in self.fields)
            and not any(hasattr(self.serializer, f"validate_{name}") for name in self.names)
        )

    def validate(self, raw: Any) -> dict[str, Any]:
        """The item's validated data, or serializers.ValidationError as the serializer raises it."""
        if (
            self.field_rules_only
            and type(raw) is dict
            and raw.keys() <= self.names
            and self.required <= raw.keys()
        ):
            try:
                return self._by_fields(raw)
            except (serializers.ValidationError, DjangoValidationError):
                pass  # the whole serializer names every wrong field (it takes both kinds)
        return dict(self.serializer.run_validation(raw))

    def _by_fields(self, raw: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, field in self.fields:  # the serializer's order
            if name not in raw:
                continue
            value = raw[name]
            if not isinstance(value, _MEMO_TYPES):
                out[name] = field.run_validation(value)
                continue
            key = (name, type(value), value)
            known = self.memo.get(key, _UNSEEN)
            if known is _UNSEEN:
                known = self.memo[key] = field.run_validation(value)
            out[name] = known
        return out


class ScheduleInSerializer(StrictSerializer):
    read_only_names = SCHEDULE_READ_ONLY

    name = serializers.CharField(max_length=200, required=False)
    tenant = serializers.CharField(
        max_length=63, required=False, help_text="must be the token's tenant"
    )
    cron = serializers.CharField(
        max_length=5000,
        required=False,
        allow_null=True,
        help_text="5-field cron (minute hour day-of-month month day-of-week); ranges, lists, "
        "steps, names (MON, JAN), H, H(a-b), H/n; or a macro @hourly @daily @weekly @monthly "
        "@yearly. One spec; for several give `specs` instead (not both). A timing text read "
        "back from `cron` is accepted whole. Give exactly one of cron/specs or run_at.",
    )
    specs = SpecsField(
        required=False,
        allow_null=True,
        help_text='1 to 20 specs, their occurrences united: {"cron": "0 6 * * 1-5"} or '
        '{"every": "90m", "anchor": "2026-01-01T00:15:00"} (elapsed time from a local wall '
        "time in the schedule's timezone; at least 1m, whole minutes). Instead of cron.",
    )
    start_at = InstantField(
        required=False,
        allow_null=True,
        help_text="recurring only: no occurrence before this instant (inclusive); null clears",
    )
    end_at = InstantField(
        required=False,
        allow_null=True,
        help_text="recurring only: no occurrence at or after this instant (exclusive); after "
        "it next_run_at is null; null clears",
    )
    run_at = InstantField(
        required=False,
        allow_null=True,
        help_text=f"one-off instant (instead of cron), with an offset or Z, {inputs.RANGE_TEXT}",
    )
    timezone = serializers.CharField(
        max_length=64, required=False, help_text="IANA zone, e.g. Europe/Amsterdam"
    )
    target = TargetField(required=False, help_text=TARGET_HELP)
    retry = RetryField(required=False, help_text=RETRY_HELP)
    concurrency = serializers.ChoiceField(choices=Overlap.values, required=False)
    concurrency_key = ConcurrencyKeyField(
        required=False, allow_null=True, help_text=CONCURRENCY_KEY_HELP
    )
    misfire = serializers.ChoiceField(choices=Misfire.values, required=False)
    misfire_grace_s = serializers.IntegerField(required=False)
    catch_up_limit = serializers.IntegerField(required=False)
    jitter_s = serializers.IntegerField(required=False)
    priority = serializers.ChoiceField(choices=Priority.values, required=False)
    duration = serializers.ChoiceField(choices=DurationClass.values, required=False)
    depends_on = serializers.ListField(child=serializers.UUIDField(), required=False, max_length=20)
    exclude_calendars = serializers.ListField(
        child=serializers.CharField(max_length=100),
        required=False,
        max_length=10,
        help_text="calendars (names, or ids) whose dates do not run: every occurrence on an "
        "excluded LOCAL date (in the schedule's timezone) is skipped",
    )
    only_calendars = serializers.ListField(
        child=serializers.CharField(max_length=100),
        required=False,
        max_length=10,
        help_text="when given, the schedule runs only on dates in at least one of these "
        "calendars (names, or ids); exclude_calendars still apply",
    )
    max_runs = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text="cron only: the schedule is `completed` once this many occurrences have "
        "SUCCEEDED (failed, dead, skipped and cancelled ones do not count; an occurrence "
        "re-run to success counts once). null: no bound. Raising it re-opens a completed "
        "schedule.",
    )
    delete_after = delete_after_field()


class SchedulePatchSerializer(ScheduleInSerializer):
    read_only_names = SCHEDULE_READ_ONLY - {"version"}
    version = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_VERSION,
        help_text="optimistic concurrency: the version you read (or If-Match); one of the two "
        "is required (428 without)",
    )


class JobInSerializer(StrictSerializer):
    read_only_names = SCHEDULE_READ_ONLY

    name = serializers.CharField(max_length=200, required=False)
    tenant = serializers.CharField(max_length=63, required=False)
    run_at = InstantField(
        required=False,
        allow_null=True,
        help_text=f"absent: run now; else an instant with an offset or Z, {inputs.RANGE_TEXT}",
    )
    timezone = serializers.CharField(max_length=64, required=False)
    target = TargetField(help_text=TARGET_HELP)
    retry = RetryField(required=False, help_text=RETRY_HELP)
    idempotency_key = serializers.CharField(
        max_length=200,
        required=False,
        allow_null=True,
        validators=[_printable],
        help_text="same key + same body → the same job (200); different body → 409",
    )
    priority = serializers.ChoiceField(choices=Priority.values, required=False)
    duration = serializers.ChoiceField(choices=DurationClass.values, required=False)
    concurrency_key = ConcurrencyKeyField(
        required=False, allow_null=True, help_text=CONCURRENCY_KEY_HELP
    )
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
    delete_after = delete_after_field()


class PauseInSerializer(StrictSerializer):
    reason = serializers.CharField(max_length=500, required=False, allow_blank=True)
    until = InstantField(required=False, allow_null=True)


class EmptySerializer(StrictSerializer):
    pass


# --- Output (plain functions: explicit, fast, no ORM surprises) ---


def timing_out(s: Schedule) -> dict[str, Any]:
    """`specs` and the bounds of a recurring schedule, read from its timing text (a
    one-off: no specs, no bounds)."""
    if not s.cron:
        return {"specs": [], "start_at": None, "end_at": None}
    specs, start_at, end_at = cron.decompose(s.cron)
    return {
        "specs": [
            {"cron": x.cron} if x.cron is not None else {"every": x.every, "anchor": x.anchor}
            for x in specs
        ],
        "start_at": iso_z(start_at),
        "end_at": iso_z(end_at),
    }


def schedule_out(s: Schedule) -> dict[str, Any]:
    return {
        "id": str(s.id),
        "tenant": s.tenant.slug,
        **schedule_fields(s),
        "cron": s.cron or None,
        **timing_out(s),
        "run_at": iso_z(s.run_at),
        "target": s.target,
        "retry": s.retry,
        "depends_on": [str(d.id) for d in s.depends_on.all()],
        "paused": s.paused,
        "paused_at": iso_z(s.paused_at),
        "paused_until": iso_z(s.paused_until),
        "paused_reason": s.paused_reason or None,
        "paused_by": s.paused_by or None,
        **completion_out(s),
        "idempotency_key": s.idempotency_key,
        "next_run_at": iso_z(s.next_run_at),
        "version": s.version,
        "created_at": iso_z(s.created_at),
        "updated_at": iso_z(s.updated_at),
        "created_by": s.created_by,
    }


def completion_out(s: Schedule) -> dict[str, Any]:
    """`completed` is shown like `paused`: a flag with when and why (dispatch/lifecycle.py)."""
    done = completion(s, now=timezone.now())
    return {
        "runs_succeeded": s.runs_succeeded,
        "completed": done is not None,
        "completed_at": iso_z(done.at) if done else None,
        "completed_reason": done.reason if done else None,
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
        "output": e.output,
        "reason_code": e.reason_code or None,
        "reason": e.reason or None,
        # Run control: re-runs so far, the attempt the current chain started after
        # (its retries count attempt - attempt_base), the backfill that made or re-ran it.
        "reruns": e.reruns,
        "attempt_base": e.attempt_base,
        "backfill_id": str(e.backfill_id) if e.backfill_id else None,
        "concurrency_key": e.concurrency_key,
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


def archived_out(where: ArchivedExecution) -> dict[str, Any]:
    return {
        "day": where.day.isoformat(),
        "location": where.location,
        "manifest": where.manifest,
        "archived_at": iso_z(where.archived_at),
    }


def timeline_out(item: Any) -> dict[str, Any]:
    return {
        "at": iso_z(item.at),
        "kind": item.kind,
        "message": item.message,
        "actor": item.actor or None,
        "data": item.data,
    }


# Documentation-only serializers for the OpenAPI document. They describe what
# schedule_out / execution_out / event_out return, field for field (the
# schemathesis test checks every response against them).
class ScheduleOutDoc(serializers.Serializer[Any]):
    id = serializers.UUIDField()
    tenant = serializers.CharField()
    name = serializers.CharField()
    kind = serializers.ChoiceField(choices=["cron", "once"])
    cron = serializers.CharField(
        allow_null=True,
        help_text="a single-spec schedule without bounds: its cron expression; otherwise the "
        "whole timing as one text (specs joined by ' | ', then 'start_at <instant>' / "
        "'end_at <instant>'), which cron also accepts back",
    )
    specs = SpecsField()
    start_at = serializers.DateTimeField(allow_null=True)
    end_at = serializers.DateTimeField(allow_null=True)
    run_at = serializers.DateTimeField(allow_null=True)
    timezone = serializers.CharField()
    target = serializers.JSONField()
    retry = serializers.JSONField()
    concurrency = serializers.ChoiceField(choices=Overlap.values)
    concurrency_key = ConcurrencyKeyField(allow_null=True)
    misfire = serializers.ChoiceField(choices=Misfire.values)
    misfire_grace_s = serializers.IntegerField()
    catch_up_limit = serializers.IntegerField()
    jitter_s = serializers.IntegerField()
    priority = serializers.ChoiceField(choices=Priority.values)
    duration = serializers.ChoiceField(choices=DurationClass.values)
    depends_on = serializers.ListField(child=serializers.UUIDField())
    exclude_calendars = serializers.ListField(child=serializers.CharField())
    only_calendars = serializers.ListField(child=serializers.CharField())
    paused = serializers.BooleanField()
    paused_at = serializers.DateTimeField(allow_null=True)
    paused_until = serializers.DateTimeField(allow_null=True)
    paused_reason = serializers.CharField(allow_null=True)
    paused_by = serializers.CharField(allow_null=True)
    max_runs = serializers.IntegerField(allow_null=True)
    delete_after = serializers.CharField(allow_null=True)
    runs_succeeded = serializers.IntegerField(
        help_text="occurrences that succeeded, counted only while max_runs is set"
    )
    completed = serializers.BooleanField(
        help_text="reached max_runs, or past end_at: no further timed runs (manual runs work)"
    )
    completed_at = serializers.DateTimeField(allow_null=True)
    completed_reason = serializers.ChoiceField(choices=["max_runs", "end_at"], allow_null=True)
    idempotency_key = serializers.CharField(allow_null=True)
    next_run_at = serializers.DateTimeField(allow_null=True)
    version = serializers.IntegerField(help_text="also the ETag; send it back as If-Match")
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    created_by = serializers.CharField()


def next_cursor_doc() -> serializers.CharField:
    return serializers.CharField(
        allow_null=True, help_text="pass as ?cursor= for the next page; null on the last"
    )


class SchedulePageDoc(serializers.Serializer[Any]):
    results = ScheduleOutDoc(many=True)
    next_cursor = next_cursor_doc()


class ExecutionOutDoc(serializers.Serializer[Any]):
    id = serializers.UUIDField()
    execution_id = serializers.UUIDField()
    schedule_id = serializers.UUIDField()
    scheduled_for = serializers.DateTimeField()
    due_at = serializers.DateTimeField()
    trigger = serializers.CharField()
    attempt = serializers.IntegerField()
    state = serializers.CharField()
    queue = serializers.CharField(allow_null=True)
    lease_owner = serializers.CharField(allow_null=True)
    lease_expires_at = serializers.DateTimeField(allow_null=True)
    fencing_token = serializers.IntegerField()
    next_attempt_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    enqueued_at = serializers.DateTimeField(allow_null=True)
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    status_code = serializers.IntegerField(allow_null=True)
    exit_code = serializers.IntegerField(allow_null=True)
    error = serializers.CharField(allow_null=True)
    log_excerpt = serializers.CharField(allow_null=True)
    output = serializers.JSONField(
        allow_null=True, help_text="the result the target reported with its completion callback"
    )
    reason_code = serializers.CharField(allow_null=True)
    reason = serializers.CharField(allow_null=True)
    reruns = serializers.IntegerField()
    attempt_base = serializers.IntegerField()
    backfill_id = serializers.UUIDField(allow_null=True)
    concurrency_key = serializers.CharField(
        allow_null=True, help_text="the rendered concurrency key it holds (set at admission)"
    )


class ExecutionPageDoc(serializers.Serializer[Any]):
    results = ExecutionOutDoc(many=True)
    next_cursor = next_cursor_doc()
    scan_limited = serializers.BooleanField(
        help_text="the page stopped at what a page reads (the newest days of history after "
        "the cursor; for an error-text search, also its candidates) before it was full; "
        "next_cursor continues below what was read"
    )
    total = serializers.IntegerField(
        required=False, allow_null=True, help_text="with ?total=true: matches, counted up to a cap"
    )
    total_capped = serializers.BooleanField(
        required=False,
        allow_null=True,
        help_text="with ?total=true: there may be more than total (past the cap, or in older "
        "history than the count reads)",
    )


class EventDoc(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    at = serializers.DateTimeField()
    kind = serializers.CharField()
    message = serializers.CharField()
    data = serializers.JSONField()  # type: ignore[assignment]  # a field, not Serializer.data
    actor = serializers.CharField(allow_null=True)


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


class ArchivedDoc(serializers.Serializer[Any]):
    day = serializers.DateField(help_text="the UTC day of history it was archived with")
    location = serializers.CharField(help_text="its file: s3://bucket/... or file:///...")
    manifest = serializers.CharField(help_text="the day's manifest (files, rows, SHA-256)")
    archived_at = serializers.DateTimeField()


class ExecutionDetailDoc(ExecutionOutDoc):
    archived = ArchivedDoc(
        allow_null=True,
        help_text="null while the execution is in the database; once its day was archived"
        " and dropped (retention), where it was read back from",
    )
    events = EventDoc(many=True, help_text="the execution's events, oldest first")
    timeline = TimelineItemDoc(many=True, help_text="row steps and events, in time order")


class OccurrenceDoc(serializers.Serializer[Any]):
    scheduled_for = serializers.DateTimeField(help_text="UTC, nominal")
    local = serializers.CharField(help_text="ISO 8601 with the zone's offset")
    due_at = serializers.DateTimeField(help_text="UTC, jitter applied")
    note = serializers.CharField(allow_null=True, help_text="DST annotation")


class ExcludedDoc(serializers.Serializer[Any]):
    scheduled_for = serializers.DateTimeField()
    local = serializers.CharField()
    reason = serializers.CharField(help_text="excluded by calendar 'NL holidays': 2026-12-25 ...")


class PreviewDoc(serializers.Serializer[Any]):
    occurrences = OccurrenceDoc(many=True)
    description = serializers.CharField()
    resolved = serializers.CharField()
    timezone = serializers.CharField()
    note = serializers.CharField(
        allow_null=True, help_text="set when paused until a time: earlier runs are left out"
    )
    excluded = ExcludedDoc(
        many=True,
        help_text="occurrences of the expression within the previewed span that the "
        "schedule's calendars exclude (at most 50), with the reason",
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


# --- POST /v1/jobs:batch -----------------------------------------------------------------


class JobBatchInDoc(serializers.Serializer[Any]):
    """The request of POST /v1/jobs:batch (each item is validated on its own)."""

    # Items are documented as any JSON value, not as JobIn: the request accepts any
    # item and answers each on its own (an invalid one is a 400 in its result, the
    # others go ahead), so a schema-invalid item is not an invalid request.
    jobs = serializers.ListField(
        child=serializers.JSONField(),
        min_length=1,
        max_length=1000,
        help_text="1..1000 jobs, each the body of a POST /v1/jobs (JobIn) with an "
        "idempotency_key (required here, distinct within the request); each item is "
        "validated on its own and answered in its result",
    )


class BatchErrorDoc(serializers.Serializer[Any]):
    code = serializers.CharField(help_text="invalid, idempotency_conflict or quota_exceeded")
    message = serializers.CharField()
    detail = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        help_text="field path (e.g. `jobs[3].target.url`) -> reasons",
    )


class JobBatchItemDoc(serializers.Serializer[Any]):
    index = serializers.IntegerField(help_text="the item's position in `jobs`")
    status = serializers.IntegerField(
        help_text="201 created; 200 an existing job with the same key and body; 409 the key "
        "was used with another body; 400 invalid (detail names the field); 422 over the "
        "tenant's schedule quota"
    )
    idempotency_key = serializers.CharField(allow_null=True)
    job = ScheduleOutDoc(allow_null=True, help_text="the job (201 and 200), else null")
    error = BatchErrorDoc(allow_null=True, help_text="the item's error, else null")


class JobBatchOutDoc(serializers.Serializer[Any]):
    results = JobBatchItemDoc(many=True, help_text="one per item, in request order")
    created = serializers.IntegerField(help_text="items answered 201")
    existing = serializers.IntegerField(help_text="items answered 200")
    failed = serializers.IntegerField(help_text="items answered 4xx")
