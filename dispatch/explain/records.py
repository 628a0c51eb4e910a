"""What the explainer reads: recorded decisions, followed by id.

The definition in force at an instant (the audit log's before-snapshots), the
pause intervals (paused / resumed events with the audit row each names in
`data.audit_id`), and the execution a decision was about (an event's
`data.related_execution_id`, or the structure of the records: the upstream run
of the same occurrence, the run of the schedule that was still active). Pure
reads; nothing here branches on a message's wording.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q

from dispatch.explain.present import Evidence, who
from dispatch.models import Backfill, Execution, ExecutionEvent, Kind, Schedule, Trigger
from dispatch.selectors import as_uuid
from dispatch.states import AuditAction, EventData, EventKind, ExecutionState, ReasonCode
from dispatch.timing import cron
from tenants.models import AuditEvent


@dataclass(frozen=True)
class PauseInterval:
    start: datetime
    end: datetime | None  # None: still paused
    by: str
    reason: str
    until: str | None
    resumed_by: str
    evidence: tuple[Evidence, ...]


def definition_at(schedule: Schedule, instant: datetime) -> tuple[str, str, datetime | None]:
    """(cron, timezone, run_at) in force at `instant`.

    The audit log keeps each update's before/after snapshot: the first update
    after `instant` holds, in its `before`, the definition that was in force then.
    """
    later = (
        AuditEvent.objects.filter(
            tenant_id=schedule.tenant_id,
            object_type="schedule",
            object_id=str(schedule.id),
            action=AuditAction.SCHEDULE_UPDATE,
            at__gt=instant,
        )
        .order_by("at", "id")
        .values_list("before", flat=True)
        .first()
    )
    if isinstance(later, dict):
        run_at_raw = later.get("run_at")
        run_at = datetime.fromisoformat(run_at_raw) if isinstance(run_at_raw, str) else None
        return str(later.get("cron") or ""), str(later.get("timezone") or "UTC"), run_at
    return schedule.cron, schedule.timezone, schedule.run_at


def _data(event: ExecutionEvent) -> dict[str, Any]:
    return event.data if isinstance(event.data, dict) else {}


def linked_audit(
    event: ExecutionEvent,
    action: str,
    audits: list[AuditEvent],
    *,
    before: datetime | None,
) -> AuditEvent | None:
    """The audit row the service wrote with `event` (same transaction).

    The event names it (`data.audit_id`). Rows written before events carried the
    id: the service wrote the event, then its audit row, so the row is the first
    of that action and actor from the event on, and before the next event of the
    same kind (`before`): each pause or resume writes exactly one of each.
    """
    audit_id = _data(event).get(EventData.AUDIT_ID)
    if audit_id is not None:
        return next((a for a in audits if str(a.pk) == str(audit_id)), None)
    candidates = [
        a
        for a in audits
        if a.action == action
        and (not event.actor or a.actor_label == event.actor)
        and a.at >= event.at
        and (before is None or a.at < before)
    ]
    return min(candidates, key=lambda a: (a.at, a.pk), default=None)


def _audit_item(audit: AuditEvent) -> Evidence:
    return Evidence("audit", str(audit.pk), f"{audit.action} by {audit.actor_label}")


def pause_intervals(schedule: Schedule) -> list[PauseInterval]:
    """Every pause of the schedule, from its paused / resumed events and audit rows."""
    events = list(
        ExecutionEvent.objects.filter(
            tenant_id=schedule.tenant_id,
            schedule=schedule,
            kind__in=(EventKind.PAUSED, EventKind.RESUMED),
        ).order_by("at", "id")
    )
    audits = list(
        AuditEvent.objects.filter(
            tenant_id=schedule.tenant_id,
            object_type="schedule",
            object_id=str(schedule.id),
            action__in=(AuditAction.SCHEDULE_PAUSE, AuditAction.SCHEDULE_RESUME),
        )
    )
    # For each event, when the next one of its kind came (bounds the legacy audit match).
    following: dict[int, datetime | None] = {}
    last: dict[str, ExecutionEvent] = {}
    for ev in events:
        if ev.kind in last:
            following[last[ev.kind].pk] = ev.at
        last[ev.kind] = ev
    out: list[PauseInterval] = []
    current: ExecutionEvent | None = None
    for ev in events:
        if ev.kind == EventKind.PAUSED:
            if current is not None:
                # Paused again while paused: the earlier pause still began the interval.
                continue
            current = ev
            continue
        if current is None:
            continue
        out.append(_interval(current, ev, audits, following))
        current = None
    if current is not None:
        out.append(_interval(current, None, audits, following))
    return out


def _interval(
    paused: ExecutionEvent,
    resumed: ExecutionEvent | None,
    audits: list[AuditEvent],
    following: dict[int, datetime | None],
) -> PauseInterval:
    evidence: list[Evidence] = [Evidence("event", str(paused.pk), paused.message)]
    audit = linked_audit(
        paused, AuditAction.SCHEDULE_PAUSE, audits, before=following.get(paused.pk)
    )
    if audit is not None:
        evidence.append(_audit_item(audit))
    if resumed is not None:
        evidence.append(Evidence("event", str(resumed.pk), resumed.message))
        audit = linked_audit(
            resumed, AuditAction.SCHEDULE_RESUME, audits, before=following.get(resumed.pk)
        )
        if audit is not None:
            evidence.append(_audit_item(audit))
    data = _data(paused)
    return PauseInterval(
        start=paused.at,
        end=resumed.at if resumed is not None else None,
        by=who(paused.actor),
        reason=str(data.get("reason") or ""),
        until=data.get("until") if isinstance(data.get("until"), str) else None,
        resumed_by=who(resumed.actor) if resumed is not None else "",
        evidence=tuple(evidence),
    )


def pause_covering(
    schedule: Schedule, instant: datetime, *, now: datetime | None = None
) -> PauseInterval | None:
    for interval in pause_intervals(schedule):
        end = interval.end
        if end is None and now is not None and instant > now:
            # A pause still in force with an end time: the beat resumes it then,
            # so it covers only the future up to that end.
            end = schedule.paused_until if schedule.paused else None
        if interval.start <= instant and (end is None or instant < end):
            return interval
    return None


def audit_evidence(schedule: Schedule, action: str) -> list[Evidence]:
    audit = (
        AuditEvent.objects.filter(
            tenant_id=schedule.tenant_id,
            object_type="schedule",
            object_id=str(schedule.id),
            action=action,
        )
        .order_by("at", "id")
        .first()
    )
    return [] if audit is None else [_audit_item(audit)]


def events_of(execution: Execution, kinds: frozenset[EventKind]) -> list[ExecutionEvent]:
    return list(
        ExecutionEvent.objects.filter(
            tenant_id=execution.tenant_id, execution=execution, kind__in=sorted(kinds)
        ).order_by("at", "id")
    )


def latest_event(execution: Execution, kind: EventKind) -> ExecutionEvent | None:
    """The execution's latest event of `kind` (the current cancel, the latest re-run)."""
    return (
        ExecutionEvent.objects.filter(tenant_id=execution.tenant_id, execution=execution, kind=kind)
        .order_by("-at", "-id")
        .first()
    )


@dataclass(frozen=True)
class BackfillOrigin:
    """The backfill that created an execution, and when it did."""

    id: str
    on: datetime
    evidence: Evidence


def backfill_origin(execution: Execution) -> BackfillOrigin | None:
    """For a row created by a backfill (trigger `backfill`): that backfill, by the
    row's link, or — the backfill row gone — by the `backfilled` event's
    `data.backfill_id`."""
    if execution.trigger != Trigger.BACKFILL:
        return None
    if execution.backfill_id is not None:
        backfill = Backfill.objects.filter(
            tenant_id=execution.tenant_id, pk=execution.backfill_id
        ).first()
        if backfill is not None:
            label = f"backfill of {backfill.range_from:%Y-%m-%d}..{backfill.range_to:%Y-%m-%d}"
            return BackfillOrigin(
                str(backfill.id), backfill.created_at, Evidence("backfill", str(backfill.id), label)
            )
    event = latest_event(execution, EventKind.BACKFILLED)
    if event is None or not (event.data or {}).get(EventData.BACKFILL_ID):
        return None
    return BackfillOrigin(
        str(event.data[EventData.BACKFILL_ID]),
        event.at,
        Evidence("event", str(event.pk), event.message),
    )


def related_execution(execution: Execution, schedule: Schedule) -> Evidence | None:
    """The execution a skip or cancellation was about, as recorded.

    An event of the execution names it (`data.related_execution_id`); a manual run
    that replaced it lists it in its `triggered` event. Otherwise the records'
    structure does: an upstream skip is about the upstream run of
    the same occurrence that did not succeed (dependencies fire per occurrence);
    an overlap skip is about the schedule's earlier run that was active when the
    skip was recorded.
    """
    named = (
        ExecutionEvent.objects.filter(
            tenant_id=execution.tenant_id,
            execution=execution,
            data__has_key=EventData.RELATED_EXECUTION_ID,
        )
        .order_by("at", "id")
        .values_list("data", flat=True)
        .first()
    )
    found: Any = None
    if isinstance(named, dict):
        pk = as_uuid(str(named[EventData.RELATED_EXECUTION_ID]))
        found = (
            Execution.objects.filter(tenant_id=execution.tenant_id, pk=pk)
            .values_list("id", flat=True)
            .first()
            if pk is not None
            else None
        )
    elif execution.reason_code == ReasonCode.REPLACED:
        # Replaced by a manual run: its `triggered` event lists the runs it cancelled.
        found = (
            ExecutionEvent.objects.filter(
                tenant_id=execution.tenant_id,
                schedule_id=execution.schedule_id,
                kind=EventKind.TRIGGERED,
                data__replaced_execution_ids__contains=[str(execution.id)],
            )
            .order_by("at", "id")
            .values_list("execution_id", flat=True)
            .first()
        )
    elif execution.reason_code == ReasonCode.UPSTREAM:
        found = (
            Execution.objects.filter(
                tenant_id=execution.tenant_id,
                schedule__in=schedule.depends_on.all(),
                scheduled_for=execution.scheduled_for,
            )
            .exclude(state=ExecutionState.SUCCEEDED)
            .order_by("finished_at", "id")
            .values_list("id", flat=True)
            .first()
        )
    elif execution.reason_code == ReasonCode.OVERLAP_FORBID:
        decided = execution.finished_at or execution.created_at
        found = (
            Execution.objects.filter(
                tenant_id=execution.tenant_id,
                schedule_id=execution.schedule_id,
                scheduled_for__lt=execution.scheduled_for,
                created_at__lte=decided,
            )
            .exclude(pk=execution.pk)
            .exclude(state=ExecutionState.SKIPPED)
            .filter(Q(finished_at__isnull=True) | Q(finished_at__gte=decided))
            .order_by("-scheduled_for", "-id")
            .values_list("id", flat=True)
            .first()
        )
    return Evidence("execution", str(found), "related execution") if found else None


def upstream_occurrence(schedule: Schedule, at: datetime) -> datetime | None:
    """The occurrence of one of the schedule's upstreams at `at` (its minute), if any."""
    for up in schedule.depends_on.filter(deleted_at__isnull=True).order_by("name"):
        if up.kind == Kind.CRON and up.cron:
            try:
                would = cron.would_run_at(up.cron, up.timezone, seed=str(up.id), at=at)
            except cron.CronError:
                continue
            if would.is_occurrence and would.scheduled_for is not None:
                return would.scheduled_for
        elif up.run_at is not None and up.run_at.replace(second=0, microsecond=0) == at.replace(
            second=0, microsecond=0
        ):
            return up.run_at
    return None


def manual_near(schedule: Schedule, at: datetime) -> Execution | None:
    """A manual or API run started within the minute asked about."""
    minute = at.replace(second=0, microsecond=0)
    return (
        Execution.objects.filter(
            tenant_id=schedule.tenant_id,
            schedule=schedule,
            trigger__in=(Trigger.MANUAL, Trigger.API),
            scheduled_for__gte=minute,
            scheduled_for__lt=minute + timedelta(minutes=1),
        )
        .order_by("scheduled_for")
        .first()
    )


def completed_event(schedule: Schedule) -> ExecutionEvent | None:
    """The latest `completed` event of the schedule (max_runs reached), if any."""
    return (
        ExecutionEvent.objects.filter(
            tenant_id=schedule.tenant_id, schedule=schedule, kind=EventKind.COMPLETED
        )
        .order_by("-at", "-id")
        .first()
    )
