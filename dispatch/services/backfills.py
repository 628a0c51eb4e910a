"""Backfills: run a schedule's occurrences of a past range now, or see what that
would do (the dry run). The plan is fixed when the backfill is created; the
beats' control pump (dispatch/scheduler/backfills.py) carries it out."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import transaction

from core.db import db_now, notify
from dispatch.exceptions import RunningLimit, StateConflict
from dispatch.models import Backfill
from dispatch.selectors import BackfillPlan, backfill_plan, check_backfill_request
from dispatch.selectors.paging import tenant_object
from dispatch.services.common import BACKFILL_WAKE_CHANNEL, live_schedule, record_event
from dispatch.sql import sql
from dispatch.states import (
    AuditAction,
    BackfillOrder,
    ControlState,
    EventData,
    EventKind,
    Reprocess,
)
from tenants.audit import audit_record
from tenants.roles import Principal


@dataclass(frozen=True)
class BackfillResult:
    plan: BackfillPlan
    backfill: Backfill | None  # None for a dry run: nothing was written


@transaction.atomic
def backfill_create(
    *,
    actor: Principal,
    schedule_id: uuid.UUID | str,
    range_from: datetime,
    range_to: datetime,
    reprocess: str = Reprocess.NONE,
    max_concurrent: int = 1,
    order: str = BackfillOrder.OLDEST,
    skip_paused: bool = False,
    dry_run: bool = False,
) -> BackfillResult:
    """Plan a backfill of [range_from, range_to) and, unless `dry_run`, store it running.

    The dry run and the stored backfill come from the same plan, so what the dry
    run lists is what the pump does (an execution that appears in between is
    counted as skipped, not duplicated: the occurrence keeps its one execution).
    """
    # Locked for the real one: the plan reads the schedule's executions and pauses.
    schedule = live_schedule(actor, schedule_id, lock=not dry_run)
    check_backfill_request(
        schedule=schedule,
        range_from=range_from,
        range_to=range_to,
        reprocess=reprocess,
        order=order,
        max_concurrent=max_concurrent,
        now=db_now(),
    )
    if not dry_run:
        _check_running_bound(actor)  # before the plan: a refused request costs no planning
    plan = backfill_plan(
        schedule=schedule,
        range_from=range_from,
        range_to=range_to,
        reprocess=reprocess,
        order=order,
        skip_paused=skip_paused,
    )
    if dry_run:
        return BackfillResult(plan=plan, backfill=None)
    backfill = Backfill.objects.create(
        tenant=actor.tenant,
        schedule=schedule,
        range_from=range_from,
        range_to=range_to,
        reprocess=reprocess,
        skip_paused=skip_paused,
        max_concurrent=max_concurrent,
        order=order,
        plan=plan.stored(),
        created_by=actor.label,
    )
    request = {
        "schedule_id": str(schedule.id),
        "from": range_from.isoformat(),
        "to": range_to.isoformat(),
        "reprocess": str(reprocess),
        "max_concurrent": max_concurrent,
        "order": str(order),
        "skip_paused": skip_paused,
    }
    audit = audit_record(
        actor=actor,
        action=AuditAction.BACKFILL_CREATE,
        object_type="backfill",
        object_id=str(backfill.id),
        after=request | {"counts": plan.counts},
    )
    todo = plan.counts["create"] + plan.counts["rerun"]
    record_event(
        schedule,
        EventKind.BACKFILLED,
        f"backfill of {range_from.isoformat()} to {range_to.isoformat()} started by "
        f"{actor.label}: {len(plan.items)} occurrences, {plan.counts['create']} to create, "
        f"{plan.counts['rerun']} to re-run, {len(plan.items) - todo} left as they are",
        actor=actor,
        data={EventData.BACKFILL_ID: str(backfill.id), "counts": plan.counts},
        audit=audit,
    )
    # The pump starts on it at once, not at its next interval (delivered at commit).
    notify(BACKFILL_WAKE_CHANNEL, str(backfill.id))
    return BackfillResult(plan=plan, backfill=backfill)


def _check_running_bound(actor: Principal) -> None:
    """Refuse a backfill beyond the tenant's BACKFILL_MAX_RUNNING_PER_TENANT running ones.

    Held to commit, the tenant's lock makes two concurrent creates count one after
    the other (the second sees the first's row), so the bound is never overshot."""
    params = {"tenant_id": actor.tenant.pk, "running": str(ControlState.RUNNING)}
    sql.one("backfill_tenant_lock", params)
    running = int(sql.scalar("backfill_tenant_running", params))
    bound = int(settings.BACKFILL_MAX_RUNNING_PER_TENANT)
    if running >= bound:
        raise RunningLimit(
            f"this tenant already has {running} running backfills, the most it may have at "
            f"once (BACKFILL_MAX_RUNNING_PER_TENANT = {bound}); start this one when one of "
            "them finishes or is cancelled",
            detail={"running": [str(running)], "limit": [str(bound)]},
        )


@transaction.atomic
def backfill_cancel(*, actor: Principal, backfill_id: uuid.UUID | str) -> Backfill:
    """Stop releasing the backfill's remaining occurrences. Runs already released go
    on; the occurrences not reached yet are left alone (no execution is made for them).

    Idempotent: cancelling a cancelled backfill changes nothing and audits nothing.
    A finished one (done) is a 409 naming its state.
    """
    # Waits for a pump's chunk in progress (it holds the row): after this commits,
    # no pump releases anything more.
    backfill = tenant_object(
        Backfill.objects.select_for_update(), tenant=actor.tenant, pk=backfill_id, what="backfill"
    )
    if backfill.state == ControlState.CANCELLED:
        return backfill
    if backfill.state != ControlState.RUNNING:
        raise StateConflict(
            f"backfill is {backfill.state}; only a running backfill can be cancelled",
            detail={"state": [str(backfill.state)]},
        )
    before = {"state": str(backfill.state), "position": backfill.position}
    backfill.state = ControlState.CANCELLED
    backfill.cancelled_by = actor.label
    backfill.finished_at = db_now()
    backfill.save(update_fields=["state", "cancelled_by", "finished_at"])
    audit_record(
        actor=actor,
        action=AuditAction.BACKFILL_CANCEL,
        object_type="backfill",
        object_id=str(backfill.id),
        before=before,
        after={"state": str(backfill.state), "position": backfill.position},
    )
    return backfill
