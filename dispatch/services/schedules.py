"""Writes of schedules: create, update, delete, pause and resume. Each is one
transaction with its audit row inside."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.db import transaction

from core.db import db_now
from dispatch import lifecycle
from dispatch.exceptions import InvalidSchedule, StateConflict, VersionConflict
from dispatch.lifecycle import completion
from dispatch.models import Execution, ExecutionState, Kind, Schedule
from dispatch.partitioning import partition_for
from dispatch.schedule_fields import clean_schedule
from dispatch.services.calendars import (
    check_calendars_apply,
    choice_filter,
    clean_calendar_fields,
    store_calendar_links,
)
from dispatch.services.common import (
    check_quota,
    first_run,
    live_schedule,
    record_audit,
    record_event,
    relations_known,
    save_schedule_unique,
    schedule_snapshot,
    store_definition,
    wake_beat,
)
from dispatch.states import AuditAction, EventData, EventKind, ReasonCode, Trigger
from tenants.roles import Principal

# What the beat plans from, or puts in the message: a change to any of these within
# the stage-ahead window withdraws the occurrences already staged (withdraw_staged).
PLAN_FIELDS = (
    "cron",
    "timezone",
    "run_at",
    "jitter_s",
    "misfire",
    "misfire_grace_s",
    "catch_up_limit",
    "priority",
    "duration_class",
    "overlap",
    "concurrency_key",
)
# Occurrences the beat staged from the schedule's timing: the only ones withdrawn.
# Manual runs, re-runs, backfills and dependency runs were asked for as they are.
_STAGED_TRIGGERS = (Trigger.CRON, Trigger.API, Trigger.CATCH_UP)


def withdraw_staged(schedule: Schedule) -> list[datetime]:
    """Delete the occurrences the beat staged ahead that are not published yet (first
    attempt, still `scheduled`, never admitted) and set next_run_at back to the
    earliest, so the beat plans them again from the definition as it is now — as if
    they had never been staged. Returns the occurrences withdrawn.

    Deleted, not cancelled: the unique (schedule, scheduled_for) key must let the
    re-planned occurrence of the same instant in. The row locks decide against a
    beat admitting concurrently: a row it made `queued` first no longer matches
    (and is published); one withdrawn first is gone when its admission runs
    (admit_executions updates only rows still `scheduled`)."""
    staged = list(
        Execution.objects.filter(
            schedule=schedule,
            state=ExecutionState.SCHEDULED,
            attempt=1,
            attempt_base=0,
            enqueued_at__isnull=True,
            trigger__in=_STAGED_TRIGGERS,
        )
        .select_for_update()
        .values_list("id", "scheduled_for")
    )
    if not staged:
        return []
    Execution.objects.filter(id__in=[i for i, _ in staged]).delete()
    withdrawn = sorted(sf for _, sf in staged)
    if schedule.next_run_at is None or withdrawn[0] < schedule.next_run_at:
        schedule.next_run_at = withdrawn[0]
    return withdrawn


def replanned_event(
    schedule: Schedule, actor: Principal, withdrawn: list[datetime], *, what: str, now: datetime
) -> None:
    n = len(withdrawn)
    record_event(
        schedule,
        EventKind.REPLANNED,
        f"re-planned: schedule {what} at {now:%H:%M:%S} UTC by {actor.label} "
        f"({n} staged occurrence{'s' if n != 1 else ''} withdrawn, "
        f"first {withdrawn[0]:%H:%M:%S} UTC)",
        actor=actor,
        data={
            EventData.WITHDRAWN: [w.isoformat() for w in withdrawn[:100]],
            "withdrawn_total": n,
        },
    )


@transaction.atomic
def schedule_create(
    *, actor: Principal, data: dict[str, Any], schedule_id: uuid.UUID | None = None
) -> Schedule:
    """Create a schedule. `schedule_id` lets a form that previewed the schedule keep the
    id it previewed with, so the H values and jitter shown are the ones it will get."""
    schedule_id = schedule_id or uuid.uuid4()
    data = dict(data)
    calendars = clean_calendar_fields(actor, data)
    spec = clean_schedule(tenant=actor.tenant, data=data, schedule_id=schedule_id)
    check_calendars_apply(
        calendars, has_upstreams=bool(spec.depends_on), one_off=spec.values["kind"] == Kind.ONCE
    )
    check_quota(actor)
    now = db_now()
    schedule = Schedule(
        id=schedule_id,
        tenant=actor.tenant,
        partition=partition_for(schedule_id),
        created_by=actor.label,
    )
    store_definition(schedule, spec)
    # A schedule with upstreams is fired by them (dispatch/scheduler/dependencies.py), not by its own timing.
    dates = choice_filter(calendars) if calendars else None
    schedule.next_run_at = None if spec.depends_on else first_run(schedule, now=now, dates=dates)
    save_schedule_unique(schedule, force_insert=True)
    if spec.depends_on:
        schedule.depends_on.set(spec.depends_on)
    if calendars:
        store_calendar_links(schedule, calendars)
    relations_known(schedule, no_upstreams=not spec.depends_on, no_calendars=not calendars)
    audit = record_audit(
        actor,
        AuditAction.SCHEDULE_CREATE,
        schedule,
        after=schedule_snapshot(schedule),
    )
    record_event(
        schedule, EventKind.CREATED, f"schedule created by {actor.label}", actor=actor, audit=audit
    )
    wake_beat(schedule, now=now)
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
    schedule = live_schedule(actor, schedule_id)
    if expected_version is not None and expected_version != schedule.version:
        raise VersionConflict(
            f"schedule was changed concurrently: you sent version {expected_version}, "
            f"it is now {schedule.version}; reload and retry",
            detail={"version": [f"current version is {schedule.version}"]},
        )
    before = schedule_snapshot(schedule)
    data = dict(data)
    calendars = clean_calendar_fields(actor, data, existing=schedule)
    spec = clean_schedule(
        tenant=actor.tenant, data=data, schedule_id=schedule.id, existing=schedule
    )
    upstreams = spec.depends_on if spec.depends_on is not None else schedule.depends_on.exists()
    check_calendars_apply(
        calendars, has_upstreams=bool(upstreams), one_off=schedule.kind == Kind.ONCE
    )
    timing_changed = any(
        spec.values.get(k) != getattr(schedule, k) for k in ("cron", "timezone", "run_at")
    )
    plan_changed = bool(spec.depends_on) or any(
        k in spec.values and spec.values[k] != getattr(schedule, k) for k in PLAN_FIELDS
    )
    if calendars is not None:
        # New calendars move the future like a new expression does.
        store_calendar_links(schedule, calendars)
        timing_changed = plan_changed = True
    # Before the new definition is stored: what was staged from the old one goes.
    withdrawn = withdraw_staged(schedule) if plan_changed else []
    now = db_now()
    was_completed = completion(schedule, now=now)
    store_definition(schedule, spec)
    # A completed schedule re-opens when the edit lifts the bound it reached (a higher
    # max_runs, a later end_at): its next occurrence is computed from now, as for a new
    # schedule, so nothing missed while it was completed is caught up.
    reopened = was_completed is not None and completion(schedule, now=now) is None
    if reopened:
        schedule.completed_at = None
        timing_changed = True
    # Lowered to (or below) the successes already counted: completed by this edit.
    closed = was_completed is None and lifecycle.reached_max_runs(
        max_runs=schedule.max_runs, runs_succeeded=schedule.runs_succeeded
    )
    if closed:
        schedule.completed_at = now
        schedule.next_run_at = None
        withdrawn = withdrawn or withdraw_staged(schedule)
        schedule.next_run_at = None
    if timing_changed and (schedule.kind == Kind.CRON or schedule.next_run_at is not None):
        schedule.next_run_at = first_run(schedule, now=now)
    schedule.version += 1
    schedule.updated_at = now
    save_schedule_unique(schedule)
    if spec.depends_on is not None:
        schedule.depends_on.set(spec.depends_on)
        if spec.depends_on:
            schedule.next_run_at = None
        elif schedule.next_run_at is None and schedule.kind == Kind.CRON:
            schedule.next_run_at = first_run(schedule, now=now)
        schedule.save(update_fields=["next_run_at"])
    audit = record_audit(
        actor,
        AuditAction.SCHEDULE_UPDATE,
        schedule,
        before=before,
        after=schedule_snapshot(schedule),
    )
    record_event(
        schedule,
        EventKind.UPDATED,
        f"definition changed by {actor.label} (version {schedule.version})",
        actor=actor,
        audit=audit,
    )
    if withdrawn:
        replanned_event(schedule, actor, withdrawn, what="edited", now=now)
    if closed:
        record_event(
            schedule,
            EventKind.COMPLETED,
            f"completed: max_runs lowered to {schedule.max_runs} by {actor.label} "
            f"({schedule.runs_succeeded} succeeded already)",
            actor=actor,
            data={"reason": "max_runs", "max_runs": schedule.max_runs},
            audit=audit,
        )
    if reopened and was_completed is not None:
        record_event(
            schedule,
            EventKind.REOPENED,
            f"re-opened by {actor.label}: was {was_completed.sentence}; next run "
            + (f"{schedule.next_run_at:%Y-%m-%d %H:%M:%S} UTC" if schedule.next_run_at else "none"),
            actor=actor,
            data={"was": was_completed.reason, "runs_succeeded": schedule.runs_succeeded},
            audit=audit,
        )
    wake_beat(schedule, now=now)
    return schedule


@transaction.atomic
def schedule_delete(*, actor: Principal, schedule_id: uuid.UUID | str) -> None:
    """Soft delete: history stays; pending occurrences are cancelled with a reason."""
    schedule = live_schedule(actor, schedule_id)
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
    audit = record_audit(
        actor,
        AuditAction.SCHEDULE_DELETE,
        schedule,
        before=before,
    )
    record_event(
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
    schedule = live_schedule(actor, schedule_id)
    now = db_now()
    if until is not None and until <= now:
        raise InvalidSchedule.field("until", "must be in the future")
    if schedule.paused:
        return _pause_update(actor, schedule, reason=reason, until=until)
    before = schedule_snapshot(schedule)
    # Staged occurrences go back to next_run_at: resuming decides them by the
    # misfire policy exactly as if they had never been staged.
    withdrawn = withdraw_staged(schedule)
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
            "next_run_at",
        ]
    )
    msg = f"paused by {actor.label}" + (f' ("{reason}")' if reason else "")
    if until:
        msg += f" until {until.isoformat()}"
    audit = record_audit(
        actor,
        AuditAction.SCHEDULE_PAUSE,
        schedule,
        before=before,
        after=schedule_snapshot(schedule),
    )
    record_event(
        schedule,
        EventKind.PAUSED,
        msg,
        actor=actor,
        data={"reason": reason, "until": until.isoformat() if until else None},
        audit=audit,
    )
    if withdrawn:
        replanned_event(schedule, actor, withdrawn, what="paused", now=now)
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
    audit = record_audit(
        actor,
        AuditAction.SCHEDULE_PAUSE_UPDATE,
        schedule,
        before=before,
        after=_pause_state(schedule),
    )
    record_event(
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
    schedule = live_schedule(actor, schedule_id)
    now = db_now()
    done = completion(schedule, now=now)
    if done is not None:
        # Resuming would run nothing: say so rather than answer "resumed" (an edit that
        # lifts the bound re-opens it; pausing a completed schedule is allowed).
        raise StateConflict(
            f"schedule is {done.sentence}; raise max_runs or move end_at later (PATCH) to "
            "re-open it",
            detail={"status": ["completed"], "completed_reason": [done.reason]},
        )
    if not schedule.paused:
        return schedule
    before = schedule_snapshot(schedule)
    schedule.paused = False
    schedule.paused_until = None
    schedule.version += 1
    schedule.save(update_fields=["paused", "paused_until", "version"])
    audit = record_audit(
        actor,
        AuditAction.SCHEDULE_RESUME,
        schedule,
        before=before,
        after=schedule_snapshot(schedule),
    )
    record_event(
        schedule,
        EventKind.RESUMED,
        f"resumed by {actor.label}",
        actor=actor,
        data={"paused_at": schedule.paused_at.isoformat() if schedule.paused_at else None},
        audit=audit,
    )
    wake_beat(schedule, now=now)
    return schedule
