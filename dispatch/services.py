"""Writes of the dispatch app: schedules and one-off jobs.

Every function is one transaction with its audit row inside; the beat is woken
with NOTIFY, which PostgreSQL delivers only when the transaction commits.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F

from core.db import db_clock, notify
from core.db import db_now as db_now  # re-exported: the clock callers of services use
from core.errors import constraint_name
from dispatch.exceptions import (
    IdempotencyConflict,
    InvalidSchedule,
    NotFound,
    QuotaExceeded,
    TriggerLimited,
    VersionConflict,
)
from dispatch.models import (
    Execution,
    ExecutionEvent,
    ExecutionState,
    Kind,
    Overlap,
    Schedule,
    Trigger,
)
from dispatch.schedule_fields import ScheduleSpec, clean_schedule, partition_for
from dispatch.selectors import as_uuid, schedule_fields
from dispatch.states import IN_FLIGHT_STATES, AuditAction, EventData, EventKind, ReasonCode
from dispatch.timing import cron
from tenants.audit import audit_record
from tenants.models import AuditEvent, TenantQuota
from tenants.roles import Principal

WAKE_CHANNEL = "scheduler_wakeup"
# One-offs and triggers due sooner than this wake the beat at once instead of
# waiting for its next cycle.
WAKE_HORIZON = timedelta(seconds=60)
TRIGGER_RETRY_AFTER_S = 5


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


def _first_run(schedule: Schedule, *, now: datetime) -> datetime | None:
    if schedule.kind == Kind.ONCE:
        return schedule.run_at
    return cron.next_after(schedule.cron, schedule.timezone, after=now, seed=str(schedule.id))


def _wake_beat(schedule: Schedule, *, now: datetime) -> None:
    if schedule.next_run_at is not None and schedule.next_run_at <= now + WAKE_HORIZON:
        notify(WAKE_CHANNEL, str(schedule.partition))


def _event(
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


def _audit(
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


def _live(actor: Principal, schedule_id: uuid.UUID | str, *, lock: bool = True) -> Schedule:
    # Tenant first: another tenant's schedule is indistinguishable from a missing one.
    pk = as_uuid(schedule_id)
    if pk is None:
        raise NotFound("schedule not found")
    qs = Schedule.objects.filter(tenant=actor.tenant, deleted_at__isnull=True, pk=pk)
    if lock:
        qs = qs.select_for_update()
    schedule = qs.first()
    if schedule is None:
        raise NotFound("schedule not found")
    return schedule


def _check_quota(actor: Principal) -> None:
    # Lock the quota row so two concurrent creates cannot both take the last slot.
    quota = TenantQuota.objects.select_for_update().filter(tenant=actor.tenant).first()
    if quota is None:
        return
    live = Schedule.objects.filter(
        tenant=actor.tenant, deleted_at__isnull=True, next_run_at__isnull=False
    ).count()
    if live >= quota.max_schedules:
        raise QuotaExceeded(
            f"tenant {actor.tenant.slug} has reached its limit of {quota.max_schedules} active schedules"
        )


def _store(schedule: Schedule, spec: ScheduleSpec) -> None:
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


def _save_unique(schedule: Schedule, **kwargs: Any) -> None:
    try:
        with transaction.atomic():
            schedule.save(**kwargs)
    except IntegrityError as exc:
        _raise_unique_violation(exc)
        raise


@transaction.atomic
def schedule_create(
    *, actor: Principal, data: dict[str, Any], schedule_id: uuid.UUID | None = None
) -> Schedule:
    """Create a schedule. `schedule_id` lets a form that previewed the schedule keep the
    id it previewed with, so the H values and jitter shown are the ones it will get."""
    schedule_id = schedule_id or uuid.uuid4()
    spec = clean_schedule(tenant=actor.tenant, data=data, schedule_id=schedule_id)
    _check_quota(actor)
    now = db_now()
    schedule = Schedule(
        id=schedule_id,
        tenant=actor.tenant,
        partition=partition_for(schedule_id),
        created_by=actor.label,
    )
    _store(schedule, spec)
    # A schedule with upstreams is fired by them (dispatch/scheduler/dependencies.py), not by its own timing.
    schedule.next_run_at = None if spec.depends_on else _first_run(schedule, now=now)
    _save_unique(schedule, force_insert=True)
    if spec.depends_on:
        schedule.depends_on.set(spec.depends_on)
    audit = _audit(
        actor,
        AuditAction.SCHEDULE_CREATE,
        schedule,
        after=schedule_snapshot(schedule),
    )
    _event(
        schedule, EventKind.CREATED, f"schedule created by {actor.label}", actor=actor, audit=audit
    )
    _wake_beat(schedule, now=now)
    return schedule


@transaction.atomic
def schedule_update(
    *,
    actor: Principal,
    schedule_id: uuid.UUID | str,
    data: dict[str, Any],
    expected_version: int | None,
) -> Schedule:
    """Apply a partial update. With `expected_version`, a concurrent edit makes this a 409."""
    schedule = _live(actor, schedule_id)
    if expected_version is not None and expected_version != schedule.version:
        raise VersionConflict(
            f"schedule was changed concurrently: you sent version {expected_version}, "
            f"it is now {schedule.version}; reload and retry",
            detail={"version": [f"current version is {schedule.version}"]},
        )
    before = schedule_snapshot(schedule)
    spec = clean_schedule(
        tenant=actor.tenant, data=data, schedule_id=schedule.id, existing=schedule
    )
    timing_changed = any(
        spec.values.get(k) != getattr(schedule, k) for k in ("cron", "timezone", "run_at")
    )
    _store(schedule, spec)
    now = db_now()
    if timing_changed and (schedule.kind == Kind.CRON or schedule.next_run_at is not None):
        schedule.next_run_at = _first_run(schedule, now=now)
    schedule.version += 1
    schedule.updated_at = now
    _save_unique(schedule)
    if spec.depends_on is not None:
        schedule.depends_on.set(spec.depends_on)
        if spec.depends_on:
            schedule.next_run_at = None
        elif schedule.next_run_at is None and schedule.kind == Kind.CRON:
            schedule.next_run_at = _first_run(schedule, now=now)
        schedule.save(update_fields=["next_run_at"])
    audit = _audit(
        actor,
        AuditAction.SCHEDULE_UPDATE,
        schedule,
        before=before,
        after=schedule_snapshot(schedule),
    )
    _event(
        schedule,
        EventKind.UPDATED,
        f"definition changed by {actor.label} (version {schedule.version})",
        actor=actor,
        audit=audit,
    )
    _wake_beat(schedule, now=now)
    return schedule


@transaction.atomic
def schedule_delete(*, actor: Principal, schedule_id: uuid.UUID | str) -> None:
    """Soft delete: history stays; pending occurrences are cancelled with a reason."""
    schedule = _live(actor, schedule_id)
    before = schedule_snapshot(schedule)
    now = db_now()
    schedule.deleted_at = now
    schedule.next_run_at = None
    schedule.version += 1
    schedule.save(update_fields=["deleted_at", "next_run_at", "version"])
    Execution.objects.filter(
        schedule=schedule, state__in=[ExecutionState.SCHEDULED, ExecutionState.RETRY_SCHEDULED]
    ).update(
        state=ExecutionState.CANCELLED,
        finished_at=now,
        reason_code=ReasonCode.SCHEDULE_DELETED,
        reason=f"schedule deleted by {actor.label}",
    )
    audit = _audit(
        actor,
        AuditAction.SCHEDULE_DELETE,
        schedule,
        before=before,
    )
    _event(
        schedule, EventKind.DELETED, f"schedule deleted by {actor.label}", actor=actor, audit=audit
    )


@transaction.atomic
def schedule_pause(
    *,
    actor: Principal,
    schedule_id: uuid.UUID | str,
    reason: str = "",
    until: datetime | None = None,
) -> Schedule:
    """Pause, with an optional reason and end (the beat resumes it at `until`).

    Pausing a schedule that is already paused changes the pause: its reason and
    end are replaced, and that is audited (`schedule.pause_update`, before and
    after) instead of silently overwriting the first pause. The pause keeps its
    start time and who started it: it is still the same interval.
    """
    schedule = _live(actor, schedule_id)
    now = db_now()
    if until is not None and until <= now:
        raise InvalidSchedule.field("until", "must be in the future")
    if schedule.paused:
        return _pause_update(actor, schedule, reason=reason, until=until)
    before = schedule_snapshot(schedule)
    schedule.paused = True
    schedule.paused_at = now
    schedule.paused_until = until
    schedule.paused_reason = reason[:500]
    schedule.paused_by = actor.label
    schedule.version += 1
    schedule.save(
        update_fields=[
            "paused",
            "paused_at",
            "paused_until",
            "paused_reason",
            "paused_by",
            "version",
        ]
    )
    msg = f"paused by {actor.label}" + (f' ("{reason}")' if reason else "")
    if until:
        msg += f" until {until.isoformat()}"
    audit = _audit(
        actor,
        AuditAction.SCHEDULE_PAUSE,
        schedule,
        before=before,
        after=schedule_snapshot(schedule),
    )
    _event(
        schedule,
        EventKind.PAUSED,
        msg,
        actor=actor,
        data={"reason": reason, "until": until.isoformat() if until else None},
        audit=audit,
    )
    return schedule


def _pause_state(schedule: Schedule) -> dict[str, Any]:
    return schedule_snapshot(schedule) | {
        "paused_at": schedule.paused_at.isoformat() if schedule.paused_at else None,
        "paused_until": schedule.paused_until.isoformat() if schedule.paused_until else None,
        "paused_reason": schedule.paused_reason,
        "paused_by": schedule.paused_by,
    }


def _pause_update(
    actor: Principal, schedule: Schedule, *, reason: str, until: datetime | None
) -> Schedule:
    before = _pause_state(schedule)
    schedule.paused_until = until
    schedule.paused_reason = reason[:500]
    schedule.version += 1
    schedule.save(update_fields=["paused_until", "paused_reason", "version"])
    msg = f"pause changed by {actor.label}" + (f' ("{reason}")' if reason else "")
    msg += f" until {until.isoformat()}" if until else "; no end time"
    audit = _audit(
        actor,
        AuditAction.SCHEDULE_PAUSE_UPDATE,
        schedule,
        before=before,
        after=_pause_state(schedule),
    )
    _event(
        schedule,
        EventKind.PAUSE_UPDATED,
        msg,
        actor=actor,
        data={
            "reason": reason,
            "until": until.isoformat() if until else None,
            "before": {"reason": before["paused_reason"], "until": before["paused_until"]},
        },
        audit=audit,
    )
    return schedule


@transaction.atomic
def schedule_resume(*, actor: Principal, schedule_id: uuid.UUID | str) -> Schedule:
    """Resume; occurrences missed while paused are handled by the schedule's misfire policy.

    Resuming a schedule that is not paused changes nothing (no version bump, no
    event, no audit row): resume is idempotent, so a retried request is harmless.
    """
    schedule = _live(actor, schedule_id)
    if not schedule.paused:
        return schedule
    before = schedule_snapshot(schedule)
    now = db_now()
    schedule.paused = False
    schedule.paused_until = None
    schedule.version += 1
    schedule.save(update_fields=["paused", "paused_until", "version"])
    audit = _audit(
        actor,
        AuditAction.SCHEDULE_RESUME,
        schedule,
        before=before,
        after=schedule_snapshot(schedule),
    )
    _event(
        schedule,
        EventKind.RESUMED,
        f"resumed by {actor.label}",
        actor=actor,
        data={"paused_at": schedule.paused_at.isoformat() if schedule.paused_at else None},
        audit=audit,
    )
    _wake_beat(schedule, now=now)
    return schedule


def schedule_trigger(*, actor: Principal, schedule_id: uuid.UUID | str) -> Execution:
    """Run now: a manual occurrence at the database's current instant, fired by the beat.

    Manual runs count against the tenant's concurrency limit: with its
    executions in flight (IN_FLIGHT_STATES: queued + running) at the limit the
    trigger is refused with 429 (and the refusal audited). An accepted run is
    `scheduled` and the beat admits it under the same cap. The schedule's
    overlap policy applies to accepted triggers as it does to timed ones.
    """
    execution, limit = _trigger(actor=actor, schedule_id=schedule_id)
    if execution is None:
        with transaction.atomic():
            audit_record(
                actor=actor,
                action=AuditAction.SCHEDULE_TRIGGER,
                object_type="schedule",
                object_id=str(schedule_id),
                outcome="denied",
                after={"reason": f"tenant at its concurrency limit {limit}"},
            )
        raise TriggerLimited(
            f"tenant {actor.tenant.slug} is at its concurrency limit {limit}; retry later",
            retry_after=TRIGGER_RETRY_AFTER_S,
        )
    return execution


@transaction.atomic
def _trigger(*, actor: Principal, schedule_id: uuid.UUID | str) -> tuple[Execution | None, int]:
    schedule = _live(actor, schedule_id)
    # Serialise triggers of one tenant on its quota row: the count and the insert
    # must not interleave, or 200 concurrent clicks would all see room for one more.
    quota = TenantQuota.objects.select_for_update().filter(tenant=actor.tenant).first()
    active_states = [
        ExecutionState.SCHEDULED,
        ExecutionState.QUEUED,
        ExecutionState.RUNNING,
        ExecutionState.RETRY_SCHEDULED,
    ]
    if quota is not None:
        # The one "in flight" (dispatch/states.py) the beat's admission uses too.
        in_flight = Execution.objects.filter(
            tenant=actor.tenant, state__in=IN_FLIGHT_STATES
        ).count()
        if in_flight >= quota.max_concurrent:
            return None, quota.max_concurrent
    # An occurrence the beat planned ahead (scheduled, not yet due) is not a
    # previous run: its own overlap is decided when it comes due.
    running = list(
        Execution.objects.filter(schedule=schedule, state__in=active_states)
        .exclude(state=ExecutionState.SCHEDULED, due_at__gt=db_clock())
        .values_list("id", "state")
    )
    state, code, reason = ExecutionState.SCHEDULED, "", ""
    links: dict[str, Any] = {}
    if running and schedule.overlap == Overlap.FORBID:
        state, code = ExecutionState.SKIPPED, ReasonCode.OVERLAP_FORBID
        reason = f"skipped: previous run {running[0][0]} still {running[0][1]} (overlap forbid)"
        links[EventData.RELATED_EXECUTION_ID] = str(running[0][0])
    elif running and schedule.overlap == Overlap.REPLACE:
        # Locked as the update would lock them: the ids named below are the ones cancelled.
        replaced = list(
            Execution.objects.select_for_update()
            .filter(id__in=[r[0] for r in running], state__in=active_states)
            .values_list("id", flat=True)
        )
        Execution.objects.filter(id__in=replaced, state__in=active_states).update(
            state=ExecutionState.CANCELLED,
            fencing_token=F("fencing_token") + 1,
            finished_at=db_clock(),
            reason_code=ReasonCode.REPLACED,
            reason="cancelled: replaced by a manual run (overlap replace)",
        )
        if replaced:
            links[EventData.REPLACED_EXECUTION_IDS] = sorted(str(r) for r in replaced)
    # The occurrence key of a manual run is the moment it was asked for. Use the
    # wall clock of the database (clock_timestamp), not the transaction start,
    # so two triggers in one transaction are two occurrences; on the rare
    # same-microsecond collision, take the next instant.
    while True:
        now = db_clock()
        try:
            with transaction.atomic():
                execution = Execution.objects.create(
                    schedule=schedule,
                    tenant=schedule.tenant,
                    partition=schedule.partition,
                    scheduled_for=now,
                    due_at=now,
                    trigger=Trigger.MANUAL,
                    state=state,
                    reason_code=code,
                    reason=reason,
                )
            break
        except IntegrityError as exc:
            if constraint_name(exc) != "execution_one_per_occurrence":
                raise
    audit = _audit(
        actor,
        AuditAction.SCHEDULE_TRIGGER,
        schedule,
        after={"execution_id": str(execution.id), "scheduled_for": now.isoformat(), "state": state},
    )
    _event(
        schedule,
        EventKind.TRIGGERED,
        f"triggered manually by {actor.label}" + (f"; {reason}" if reason else ""),
        actor=actor,
        execution=execution,
        data=links,
        audit=audit,
    )
    if state == ExecutionState.SCHEDULED:
        notify(WAKE_CHANNEL, str(schedule.partition))
    return execution, 0


def request_digest(data: dict[str, Any]) -> str:
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def job_create(*, actor: Principal, data: dict[str, Any]) -> tuple[Schedule, bool]:
    """A one-off job (run now, or at `run_at`). Returns (job, created).

    The same idempotency key with the same body returns the existing job;
    with a different body it is a conflict — a retried request can never
    create a second job, nor silently mean something else.
    """
    key = data.get("idempotency_key")
    digest = request_digest(data)
    if key:
        existing = _job_by_key(actor, key)
        if existing is not None:
            return _same_job(existing, digest), False
    try:
        return _job_insert(actor=actor, data=data, digest=digest), True
    except IntegrityError as exc:
        # Lost a race with a concurrent request carrying the same key (its
        # default name collides first, or the key itself does).
        if key:
            existing = _job_by_key(actor, key)
            if existing is not None:
                return _same_job(existing, digest), False
        _raise_unique_violation(exc)
        raise


def _job_by_key(actor: Principal, key: str) -> Schedule | None:
    return Schedule.objects.filter(tenant=actor.tenant, idempotency_key=key).first()


def _same_job(existing: Schedule, digest: str) -> Schedule:
    if existing.request_digest != digest:
        raise IdempotencyConflict(
            "this idempotency_key was already used with a different request body",
            detail={"idempotency_key": ["already used with a different request body"]},
        )
    return existing


@transaction.atomic
def _job_insert(*, actor: Principal, data: dict[str, Any], digest: str) -> Schedule:
    schedule_id = uuid.uuid4()
    now = db_now()
    key = data.get("idempotency_key")
    fields = {k: v for k, v in data.items() if k not in {"idempotency_key"}}
    # The default name is a label only (the key itself is unique): a key too
    # long to fit in a name gets the id-based one rather than an error about
    # `name`, a field the client never sent.
    default_name = f"job-{key}" if key and len(key) <= 196 else f"job-{schedule_id.hex[:12]}"
    fields.setdefault("name", default_name)
    if fields.get("run_at") is None:
        fields["run_at"] = now
    spec = clean_schedule(tenant=actor.tenant, data=fields, schedule_id=schedule_id)
    _check_quota(actor)
    schedule = Schedule(
        id=schedule_id,
        tenant=actor.tenant,
        partition=partition_for(schedule_id),
        created_by=actor.label,
        idempotency_key=key,
        request_digest=digest,
    )
    _store(schedule, spec)
    schedule.next_run_at = schedule.run_at
    # A unique-key race surfaces as IntegrityError to job_create, which re-reads.
    schedule.save(force_insert=True)
    audit = _audit(
        actor,
        AuditAction.JOB_CREATE,
        schedule,
        after=schedule_snapshot(schedule) | {"idempotency_key": key},
    )
    _event(
        schedule,
        EventKind.CREATED,
        f"one-off job created by {actor.label}",
        actor=actor,
        audit=audit,
    )
    _wake_beat(schedule, now=now)
    return schedule
