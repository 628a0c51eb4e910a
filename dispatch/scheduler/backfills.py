"""Control pump step for backfills: release a running backfill's occurrences.

One chunk is one transaction holding the backfill's row (FOR UPDATE SKIP
LOCKED: any beat's pump may carry it on, never two at once). It walks the
stored plan from `position`: entries left alone (skip-existing, skip-active,
skip-paused-time) are only counted; `create` and `rerun` entries are released
while the backfill's active executions stay below its `max_concurrent` and the
schedule's overlap policy allows one more (forbid / replace: one active run of
the schedule at a time, whatever made it; allow: up to the cap). The position
and the counters are written in the same transaction, so a crash repeats
nothing: the next pump goes on from the last committed chunk, and a `create`
that lands on an occurrence that got a row meanwhile is dropped by the unique
key (counted as skipped), never duplicated.

Released runs are `scheduled` and due now: the beat admits them like any other
(tenant caps, daily quota, overlap at due time) and publishes them. Nothing is
released while the schedule is paused (the backfill waits for the resume); a
deleted schedule's backfill ends cancelled. A backfill is done once its plan is
walked and none of its runs is active.

Fair turns: each round takes the backfills that could progress now (a paused
schedule's, or one waiting for its runs, is not looked at, so any number of
those cannot hold up the rest), each tenant's oldest first, the tenants in turn
after the one this process served last. A tenant has at most
BACKFILL_MAX_RUNNING_PER_TENANT running (services/backfills.py refuses more).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction

from core.db import notify
from dispatch.exceptions import DispatchError
from dispatch.scheduler.turns import TenantTurn
from dispatch.services import WAKE_CHANNEL, execution_rerun
from dispatch.sql import sql
from dispatch.states import (
    ACTIVE_STATES,
    BackfillAction,
    ControlState,
    EventData,
    EventKind,
    ExecutionState,
    Overlap,
    Trigger,
    state_values,
)
from tenants.models import Tenant
from tenants.roles import Principal, Role

# Plan entries walked per chunk (skips are only counted, so a chunk stays short).
CHUNK = 500
# Backfills that could progress looked at per round, in their fair order, until one has
# work (one is passed over only when another pump holds it or it changed meanwhile).
CANDIDATES = 50
_RELEASED = frozenset({BackfillAction.CREATE, BackfillAction.RERUN})


@dataclass
class _Chunk:
    position: int
    creates: list[datetime] = field(default_factory=list)
    reruns: list[datetime] = field(default_factory=list)
    skipped: int = 0


# The tenant this process's pump served last: the next round starts after it. Per process
# (each beat's pump keeps its own turn); a lost update between two threads only repeats a
# turn, the order stays fair.
_turn = TenantTurn()


def pump_once() -> int:
    """One chunk of the first backfill, in the fair order, that has work; the entries
    it walked (plus one for a backfill it finished), 0 when none had anything to do."""
    params = {
        "running": str(ControlState.RUNNING),
        "active": state_values(ACTIVE_STATES),
        "scheduled": str(ExecutionState.SCHEDULED),
        "allow": str(Overlap.ALLOW),
        "after": _turn.after,
        "limit": CANDIDATES,
    }
    for row in sql.rows("backfill_candidates", params):
        done = _step(row.id)
        if done:
            _turn.served(row.tenant_id)
            return done
    return 0


def _step(backfill_id: uuid.UUID) -> int:
    with transaction.atomic():
        b = sql.one(
            "backfill_lock",
            {
                "id": backfill_id,
                "running": str(ControlState.RUNNING),
                "active": state_values(ACTIVE_STATES),
            },
        )
        if b is None:
            return 0  # another pump holds it, or it ended meanwhile
        if b.deleted:
            # Nothing more may run for a deleted schedule; what was released stays as it is.
            return _finish(b.id, ControlState.CANCELLED, "system: schedule deleted")
        if b.position >= b.total:
            return _finish(b.id, ControlState.DONE, "") if b.active == 0 else 0
        if b.paused:
            return 0  # a paused schedule runs nothing: the backfill waits for the resume
        chunk = _walk(b, room=_room(b))
        if chunk.position == b.position:
            return 0
        created = _create(b, chunk.creates)
        rerun = _rerun(b, chunk.reruns)
        sql.execute(
            "backfill_advance",
            {
                "id": b.id,
                "position": chunk.position,
                "created": created,
                "rerun": rerun,
                "skipped": chunk.skipped + len(chunk.creates) - created + len(chunk.reruns) - rerun,
            },
        )
        if created:
            notify(WAKE_CHANNEL, str(b.partition))
        return int(chunk.position - b.position)


def _room(b: Any) -> int:
    """How many runs this chunk may release: the backfill's cap, and under overlap
    forbid / replace one at most, only while no run of the schedule is active."""
    room = max(0, int(b.max_concurrent) - int(b.active))
    if room and b.overlap != Overlap.ALLOW:
        # Held to commit: the count below then sees what another pump released before.
        sql.one("backfill_schedule_lock", {"schedule_id": str(b.schedule_id)})
        active = sql.scalar(
            "backfill_schedule_active",
            {
                "schedule_id": b.schedule_id,
                "active": state_values(ACTIVE_STATES),
                "scheduled": str(ExecutionState.SCHEDULED),
            },
        )
        room = 0 if active else 1
    return room


def _walk(b: Any, *, room: int) -> _Chunk:
    chunk = _Chunk(position=b.position)
    items = sql.rows("backfill_items", {"id": b.id, "position": b.position, "limit": CHUNK})
    for item in items:
        if item.action in _RELEASED:
            if room == 0:
                break
            room -= 1
            (chunk.creates if item.action == BackfillAction.CREATE else chunk.reruns).append(
                item.scheduled_for
            )
        else:
            chunk.skipped += 1
        chunk.position = item.n
    return chunk


def _create(b: Any, scheduled_fors: list[datetime]) -> int:
    if not scheduled_fors:
        return 0
    rows = sql.rows(
        "backfill_insert_executions",
        {
            "schedule_id": b.schedule_id,
            "tenant_id": b.tenant_id,
            "partition": b.partition,
            "trigger": str(Trigger.BACKFILL),
            "state": str(ExecutionState.SCHEDULED),
            "backfill_id": b.id,
            "scheduled_fors": scheduled_fors,
            "kind": str(EventKind.BACKFILLED),
            "message": f"created by backfill {b.id} (started by {b.created_by or 'unknown'})",
            "data": json.dumps({EventData.BACKFILL_ID: str(b.id)}),
            "actor": b.created_by,
        },
    )
    return len(rows)


def _rerun(b: Any, scheduled_fors: list[datetime]) -> int:
    """Re-run each entry's execution as the backfill's creator would (the re-run's
    own checks, audit and event, each in a savepoint)."""
    if not scheduled_fors:
        return 0
    found = sql.rows(
        "backfill_existing", {"schedule_id": b.schedule_id, "scheduled_fors": scheduled_fors}
    )
    actor = Principal(
        tenant=Tenant.objects.get(pk=b.tenant_id),
        role=Role.OPERATOR,
        actor_kind="system",
        actor_id=f"backfill:{b.id}",
        label=b.created_by or "backfill",
    )
    done = 0
    for row in found:
        try:
            with transaction.atomic():
                execution_rerun(actor=actor, execution_id=row.id, backfill_id=str(b.id))
        except DispatchError:
            # No longer final (re-run by someone else meanwhile), or its schedule is gone:
            # left alone and counted as skipped, so one entry never stalls the backfill.
            continue
        done += 1
    return done


def _finish(backfill_id: uuid.UUID, state: ControlState, cancelled_by: str) -> int:
    return sql.execute(
        "backfill_finish",
        {
            "id": backfill_id,
            "state": str(state),
            "cancelled_by": cancelled_by,
            "running": str(ControlState.RUNNING),
        },
    )
