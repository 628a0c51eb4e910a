"""What the writes share: the beat wake-up, the audit snapshot and the timeline
event with its audit row, the live-schedule lock, the quota check, and the
unique-constraint mapping."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, models, transaction

from core.db import notify
from core.errors import constraint_name
from dispatch.exceptions import InvalidSchedule, QuotaExceeded
from dispatch.lifecycle import reached_max_runs
from dispatch.models import Execution, ExecutionEvent, Kind, Schedule
from dispatch.schedule_fields import ScheduleSpec
from dispatch.selectors import schedule_fields
from dispatch.selectors.paging import tenant_object
from dispatch.states import EventData, EventKind
from dispatch.timing import cron
from dispatch.timing.calendars import DateFilter
from tenants.audit import audit_record
from tenants.models import AuditEvent, TenantQuota
from tenants.roles import Principal

WAKE_CHANNEL = "scheduler_wakeup"
# Wakes the control pump's backfill step (dispatch/scheduler/control.py): a backfill
# was started, or one of its runs ended (worker.sql finish_attempt notifies it too).
BACKFILL_WAKE_CHANNEL = "dispatch_backfill"
# One-offs and triggers due sooner than this wake the beat at once instead of
# waiting for its next cycle: at least the beat's stage-ahead window, so a job due
# inside it is staged now rather than at the next incremental load.
WAKE_HORIZON = timedelta(seconds=max(60.0, float(settings.BEAT_STAGE_AHEAD_S)))


def schedule_snapshot(schedule: Schedule) -> dict[str, Any]:
    """A JSON-safe view of a definition for audit before/after (secret references only)."""
    return schedule_fields(schedule) | {
        "cron": schedule.cron or None,
        "run_at": schedule.run_at.isoformat() if schedule.run_at else None,
        "target": schedule.target,
        "retry": schedule.retry,
        "paused": schedule.paused,
        "version": schedule.version,
    }


def first_run(
    schedule: Schedule, *, now: datetime, dates: DateFilter | None = None
) -> datetime | None:
    """The first run after ``now``: of a stored schedule under its stored calendars, of
    a new one under ``dates``; 400 on its calendar field if the calendars leave none."""
    if schedule.kind == Kind.ONCE:
        return schedule.run_at
    if reached_max_runs(max_runs=schedule.max_runs, runs_succeeded=schedule.runs_succeeded):
        return None  # completed: only an edit that raises max_runs re-opens it
    if dates is None and not schedule._state.adding:
        from dispatch.selectors.calendars import schedule_filter

        dates = schedule_filter(schedule.id)
    if dates is None:
        # None once an end_at has passed: out of the due index (cron.next_or_none).
        return cron.next_or_none(schedule.cron, schedule.timezone, after=now, seed=str(schedule.id))
    from dispatch.services.calendars import next_run

    field = "only_calendars" if dates.only and not dates.exclude else "exclude_calendars"
    return next_run(schedule, now=now, dates=dates, field=field)


def wake_beat(schedule: Schedule, *, now: datetime) -> None:
    if schedule.next_run_at is not None and schedule.next_run_at <= now + WAKE_HORIZON:
        notify(WAKE_CHANNEL, str(schedule.partition))


def record_event(
    schedule: Schedule,
    kind: EventKind,
    message: str,
    *,
    actor: Principal | None,
    execution: Execution | None = None,
    data: dict[str, Any] | None = None,
    audit: AuditEvent | None = None,
) -> None:
    """A timeline event; `audit` is the audit row the same change wrote (written
    first), named in `data.audit_id` so readers link the two by id."""
    data = dict(data or {})
    if audit is not None:
        data[EventData.AUDIT_ID] = audit.pk
    ExecutionEvent.objects.create(
        tenant_id=schedule.tenant_id,
        schedule=schedule,
        execution=execution,
        kind=kind,
        message=message,
        data=data,
        actor=actor.label if actor else "system",
    )


def record_audit(
    actor: Principal,
    action: str,
    schedule: Schedule,
    *,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> AuditEvent:
    return audit_record(
        actor=actor,
        action=action,
        object_type="schedule",
        object_id=str(schedule.id),
        before=before,
        after=after,
    )


def live_schedule(actor: Principal, schedule_id: uuid.UUID | str, *, lock: bool = True) -> Schedule:
    qs = Schedule.objects.filter(deleted_at__isnull=True)
    if lock:
        qs = qs.select_for_update()
    return tenant_object(qs, tenant=actor.tenant, pk=schedule_id, what="schedule")


def check_quota(actor: Principal) -> None:
    room, cap = quota_room(actor, wanted=1)
    if room < 1:
        raise QuotaExceeded(quota_message(actor, cap))


def quota_room(actor: Principal, *, wanted: int) -> tuple[int, int | None]:
    """(how many of `wanted` new live schedules the tenant's cap admits now, the cap);
    (`wanted`, None) without a cap. Locks the quota row so two concurrent creates
    cannot both take the last slot; a batch takes it once for all its jobs, not
    once per job.

    The count stops at the cap (a subquery with LIMIT): a tenant at its cap of
    1,000 does not count its million finished one-offs' live siblings past 1,000."""
    quota = TenantQuota.objects.select_for_update().filter(tenant=actor.tenant).first()
    if quota is None:
        return wanted, None
    cap = quota.max_schedules
    live = Schedule.objects.filter(
        tenant=actor.tenant, deleted_at__isnull=True, next_run_at__isnull=False
    )[:cap].count()
    return max(0, min(wanted, cap - live)), cap


def quota_message(actor: Principal, cap: int | None) -> str:
    return f"tenant {actor.tenant.slug} has reached its limit of {cap} active schedules"


def relations_known(schedule: Schedule, *, no_upstreams: bool, no_calendars: bool) -> Schedule:
    """Tell a schedule just created that it has no upstreams / no calendars, so that the
    answer and the audit snapshot (`depends_on.all()`, `calendar_links.all()`) do not ask
    the database for what this request just wrote (a query each per schedule answered).
    A schedule created with some reads them (in the order the database keeps)."""
    relations_known_all([schedule], no_upstreams=no_upstreams, no_calendars=no_calendars)
    return schedule


def relations_known_all(
    schedules: list[Schedule], *, no_upstreams: bool, no_calendars: bool
) -> None:
    """relations_known for many schedules at once (a batch's jobs): one evaluated empty
    upstream list for all of them, not a queryset clone per schedule (each keeps its
    own cache dict: a later write to one's relations drops its entry only)."""
    upstreams = _evaluated(Schedule.objects.none(), []) if no_upstreams else None
    for schedule in schedules:
        known: dict[str, Any] = {}
        if upstreams is not None:
            known["depends_on"] = upstreams
        if no_calendars:
            known["calendar_links"] = _evaluated(schedule.calendar_links.none(), [])
        schedule._prefetched_objects_cache = known  # type: ignore[attr-defined]


def _evaluated(queryset: Any, rows: list[Any]) -> Any:
    queryset._result_cache = rows  # evaluated: iterating it compiles no SQL
    return queryset


def store_definition(schedule: Schedule, spec: ScheduleSpec) -> None:
    for key, value in spec.values.items():
        setattr(schedule, key, value)


# A schedule's unique constraints, by the name PostgreSQL reports, as the field
# error a user sees.
_UNIQUE_VIOLATIONS = {
    "schedule_name_unique_live": ("name", "a schedule with this name already exists"),
    # A resubmitted form (or a forged id): never reveal whose id it was.
    "dispatch_schedule_pkey": ("id", "this form was already submitted; reload it"),
}


def _raise_unique_violation(exc: IntegrityError) -> None:
    """Raise the field error for a schedule unique constraint `exc` violated; return otherwise."""
    violated = _UNIQUE_VIOLATIONS.get(constraint_name(exc) or "")
    if violated is not None:
        raise InvalidSchedule.field(*violated) from None


def save_unique(
    obj: models.Model, violations: Mapping[str, tuple[str, str]], **kwargs: Any
) -> None:
    """Save `obj` in a savepoint; a unique constraint of `violations` (by the name
    PostgreSQL reports) that the save violates is the 400 on its (field, reason)."""
    try:
        with transaction.atomic():
            obj.save(**kwargs)
    except IntegrityError as exc:
        violated = violations.get(constraint_name(exc) or "")
        if violated is not None:
            raise InvalidSchedule.field(*violated) from None
        raise


def save_schedule_unique(schedule: Schedule, **kwargs: Any) -> None:
    """Save, a unique violation raised as its field error. Called inside the caller's
    transaction.atomic (schedule_create, schedule_update), which the error leaves and so
    rolls back: no savepoint of its own (two round trips on every create and edit)."""
    assert transaction.get_connection().in_atomic_block  # noqa: S101 - see above
    try:
        schedule.save(**kwargs)
    except IntegrityError as exc:
        _raise_unique_violation(exc)
        raise
