"""Run control of one execution: cancel it, or re-run it.

A re-run is a NEW ATTEMPT CHAIN OF THE SAME EXECUTION ROW, not a new row: the
occurrence keeps its one execution (UNIQUE(schedule, scheduled_for) untouched).
The row goes back to `scheduled`, due now, at the next attempt number with
`attempt_base` = the old attempt (retries within the chain count
`attempt - attempt_base`), a new fencing token and the last chain's outcome
cleared. The beat admits it like a manual trigger (tenant cap, overlap policy);
the target sees a new X-Attempt and fencing token and the same X-Scheduled-For.
Of two concurrent re-runs only one finds the row final; the other is a 409.

A cancel bumps the token: a running worker's heartbeat (every
EXECUTION_LEASE_S / 3) then finds the lease gone and aborts the call, and any
completion it still sends is rejected by the token check and recorded. A
cancelled attempt may still have reached the target.

Each function is one transaction: the row locked, the conditional write
(dispatch/sql/runs.sql), the timeline event and the audit row.
"""

from __future__ import annotations

import functools
import json
import uuid
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from core.db import notify
from dispatch.exceptions import StateConflict
from dispatch.models import Execution
from dispatch.scheduler import dependencies
from dispatch.selectors.paging import tenant_object
from dispatch.services.common import WAKE_CHANNEL, record_event
from dispatch.services.logs import keep_attempt_log
from dispatch.sql import sql
from dispatch.states import (
    ACTIVE_STATES,
    FINAL_STATES,
    AuditAction,
    EventData,
    EventKind,
    ExecutionState,
    ReasonCode,
    state_values,
)
from dispatch.targets import clean_target
from tenants.audit import audit_record
from tenants.roles import Principal

# A cancel's "why" as the row's reason column holds it (the event keeps it whole too).
MAX_REASON = 500


@dataclass(frozen=True)
class CancelResult:
    """The execution after the cancel; `changed` is False when it was already cancelled."""

    execution: Execution
    changed: bool


def _locked(actor: Principal, execution_id: str | uuid.UUID) -> Execution:
    locked = Execution.objects.select_for_update(of=("self",)).select_related("schedule")
    return tenant_object(locked, tenant=actor.tenant, pk=execution_id, what="execution")


def _op_data(*, operation_id: str | None, backfill_id: str | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {}
    if operation_id:
        data[EventData.OPERATION_ID] = str(operation_id)
    if backfill_id:
        data[EventData.BACKFILL_ID] = str(backfill_id)
    return data


@transaction.atomic
def execution_cancel(
    *,
    actor: Principal,
    execution_id: str | uuid.UUID,
    reason: str = "",
    operation_id: str | None = None,
) -> CancelResult:
    """Cancel a scheduled, queued, running or retry-scheduled execution.

    Already cancelled: unchanged (`changed=False`, no new audit row). Another final
    state: StateConflict naming it. Dependents are handled as for a failed upstream
    (recorded skipped, naming this execution), in this transaction.

    Racing a completing worker resolves to one final state: the row is locked
    here, and the worker's completion is conditional on the token this bumps. If
    the completion committed first, this sees the final state and refuses.
    """
    execution = _locked(actor, execution_id)
    before = str(execution.state)
    if before == ExecutionState.CANCELLED:
        return CancelResult(execution, False)
    if before not in ACTIVE_STATES:
        raise StateConflict(
            f"execution is {before}; only a scheduled, queued, running or retry-scheduled "
            "execution can be cancelled"
        )
    why = reason.strip()
    text = f"cancelled by {actor.label}" + (f": {why}" if why else "")
    row = sql.one(
        "cancel_execution",
        {
            "id": str(execution.id),
            "tenant_id": actor.tenant.pk,
            "active": state_values(ACTIVE_STATES),
            "reason_code": ReasonCode.CANCELLED_BY_USER,
            "reason": text[:MAX_REASON],
        },
    )
    assert row is not None  # noqa: S101 - the row is locked and was active just above
    links = _op_data(operation_id=operation_id)
    audit = audit_record(
        actor=actor,
        action=AuditAction.EXECUTION_CANCEL,
        object_type="execution",
        object_id=str(execution.id),
        before={"state": before, "fencing_token": execution.fencing_token},
        after={"state": ExecutionState.CANCELLED.value, "reason": why} | links,
    )
    record_event(
        execution.schedule,
        EventKind.CANCELLED,
        text,
        actor=actor,
        execution=execution,
        data={
            "reason": why,
            "previous_state": before,
            "attempt": execution.attempt,
            "fencing_token": row.fencing_token,
        }
        | links,
        audit=audit,
    )
    dependencies.propagate(execution_ids=[execution.id])
    if before == ExecutionState.RUNNING:
        # The token moved on: the attempt's log takes no more lines, not even the few
        # its worker sends before its heartbeat notices the cancel.
        transaction.on_commit(
            functools.partial(keep_attempt_log, execution.id, execution.attempt, actor=actor.label)
        )
    execution.refresh_from_db()
    return CancelResult(execution, True)


def _target_diff(old: dict[str, Any], new: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The keys the edited target changes: (before, after), absent keys as None."""
    keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    return {k: old.get(k) for k in keys}, {k: new.get(k) for k in keys}


@transaction.atomic
def execution_rerun(
    *,
    actor: Principal,
    execution_id: str | uuid.UUID,
    target: dict[str, Any] | None = None,
    backfill_id: str | None = None,
    operation_id: str | None = None,
) -> Execution:
    """Re-run a final execution as a new attempt chain of the same row (module docstring).

    `target`: a whole target definition for this run only (validated like a
    schedule's, credentials only as secret references; the audit row keeps the
    changed keys before and after). Without it the run uses the schedule's target
    as it is now. A non-final execution: StateConflict naming its state.
    """
    execution = _locked(actor, execution_id)
    before = str(execution.state)
    if before not in FINAL_STATES:
        raise StateConflict(
            f"execution is {before}; only a final execution "
            "(succeeded, dead, skipped, cancelled) can be re-run"
        )
    schedule = execution.schedule
    if schedule.deleted_at is not None:
        raise StateConflict("the execution's schedule is deleted; it cannot be re-run")
    override: dict[str, Any] | None = None
    diff: tuple[dict[str, Any], dict[str, Any]] = ({}, {})
    if target is not None:
        override = clean_target(target, tenant=actor.tenant)
        diff = _target_diff(schedule.target, override)
    row = sql.one(
        "rerun_execution",
        {
            "id": str(execution.id),
            "tenant_id": actor.tenant.pk,
            "final": state_values(FINAL_STATES),
            "target": json.dumps(override) if override is not None else None,
            "backfill_id": str(backfill_id) if backfill_id else None,
        },
    )
    assert row is not None  # noqa: S101 - the row is locked and was final just above
    links = _op_data(operation_id=operation_id, backfill_id=backfill_id)
    edited = {"target": diff[1]} if override is not None else {}
    audit = audit_record(
        actor=actor,
        action=AuditAction.EXECUTION_RERUN,
        object_type="execution",
        object_id=str(execution.id),
        before={"state": before, "attempt": execution.attempt}
        | ({"target": diff[0]} if override is not None else {}),
        after={"state": ExecutionState.SCHEDULED.value, "attempt": row.attempt} | edited | links,
    )
    note = " with an edited target" if override is not None else ""
    record_event(
        schedule,
        EventKind.RERUN,
        f"re-run by {actor.label} as attempt {row.attempt}{note} (was {before})",
        actor=actor,
        execution=execution,
        data={
            "attempt": row.attempt,
            "attempt_base": row.attempt_base,
            "fencing_token": row.fencing_token,
            "previous_state": before,
            "target_edited": override is not None,
        }
        | links,
        audit=audit,
    )
    # Delivered at commit: the beat loads the row at once instead of at its next cycle.
    notify(WAKE_CHANNEL, str(row.partition))
    execution.refresh_from_db()
    return execution
