"""Run now: a manual occurrence, admitted against the tenant's caps and fired by the beat."""

from __future__ import annotations

import uuid
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F
from django.db.models.functions import Now

from core.db import db_clock, notify
from dispatch import selectors
from dispatch.exceptions import TriggerLimited
from dispatch.history.partitions import violates_occurrence_key
from dispatch.models import Execution, ExecutionState, Overlap, Trigger
from dispatch.services.common import WAKE_CHANNEL, live_schedule, record_audit, record_event
from dispatch.states import AuditAction, EventData, EventKind, ReasonCode
from tenants.audit import audit_record
from tenants.models import TenantQuota
from tenants.roles import Principal

TRIGGER_RETRY_AFTER_S = 5


def schedule_trigger(*, actor: Principal, schedule_id: uuid.UUID | str) -> Execution:
    """Run now: a manual occurrence at the database's current instant, fired by the beat.

    Manual runs count against the tenant's concurrency limit: with its
    executions in flight (IN_FLIGHT_STATES: queued + running) at the limit the
    trigger is refused with 429 (and the refusal audited). An accepted run is
    `scheduled` and the beat admits it under the same cap. The schedule's
    overlap policy applies to accepted triggers as it does to timed ones, and so
    does its concurrency key: the beat decides it at admission like any
    occurrence's (queue: held until a holder ends; skip; replace) — a manual run
    is no way around "never two invoice runs for one customer".
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
    schedule = live_schedule(actor, schedule_id)
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
        # The rule the beat's admission uses (selectors.tenant_slots: in-flight
        # executions, dispatch/states.py, counted up to the cap on the partial index
        # execution_inflight_tenant, plus the slots beats hold as admission grants),
        # read after the lock as admission reads it. Counted up to the cap: a tenant
        # with 100,000 queued must not make each click count them all while holding its
        # quota row. Staged (`scheduled`) rows are not in flight and not in that index.
        cap = quota.max_concurrent
        (slots,) = selectors.tenant_slots(tenant_ids=[actor.tenant.pk])
        if not slots.free:
            return None, cap
    # An occurrence the beat planned ahead (scheduled, not yet due) is not a
    # previous run: its own overlap is decided when it comes due.
    running = list(
        Execution.objects.filter(schedule=schedule, state__in=active_states)
        # STATEMENT_TIMESTAMP() in the query, not a round trip for the clock first.
        .exclude(state=ExecutionState.SCHEDULED, due_at__gt=Now())
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
            if not violates_occurrence_key(exc):
                raise
    audit = record_audit(
        actor,
        AuditAction.SCHEDULE_TRIGGER,
        schedule,
        after={"execution_id": str(execution.id), "scheduled_for": now.isoformat(), "state": state},
    )
    record_event(
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
