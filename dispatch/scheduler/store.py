"""Every statement the scheduler runs, by name.

Thin typed functions over the named statements of `dispatch/sql/beat.sql`
and `dispatch/sql/sweeper.sql` (run by `dispatch.sql.sql`, core/db.py's
runner): the rest of the scheduler reads fields by name, never `row[12]`,
and passes state sets as parameters (`dispatch.states`), never literals.
The two ORM writes of the beat (its timeline events and the audit row of an
automatic resume) are here too, so this module is the scheduler's whole
footprint on the database.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from django.db import transaction

from dispatch.models import ExecutionEvent, Schedule
from dispatch.partitioning import LOGICAL_PARTITIONS
from dispatch.services import schedule_snapshot
from dispatch.sql import sql
from dispatch.states import (
    ACTIVE_STATES,
    IN_FLIGHT_STATES,
    AuditAction,
    EventData,
    EventKind,
    state_values,
)
from tenants.models import AuditEvent


class Event(NamedTuple):
    """One timeline event the beat writes; `data` links it to other records by id
    (dispatch.states.EventData)."""

    schedule_id: Any
    tenant_id: Any
    execution_id: Any
    kind: EventKind
    message: str
    data: dict[str, Any] | None = None


class Grant(NamedTuple):
    number: int
    epoch: int
    lo: int  # the logical partitions the range covers: [lo, hi)
    hi: int


class OneOffFiring(NamedTuple):
    claimed: int
    fired: int
    skipped_ids: list[uuid.UUID]


class DueSchedule(NamedTuple):
    id: uuid.UUID
    tenant_id: int
    partition: int
    kind: str
    cron: str
    timezone: str
    # Typed loosely: NULL where the kind has none (run_at of a cron schedule), but
    # set on every row the firing statements return for the path that reads it.
    run_at: Any
    next_run_at: Any
    misfire: str
    misfire_grace_s: int
    catch_up_limit: int
    jitter_s: int
    overlap: str
    created_at: datetime


class PausedUpstream(NamedTuple):
    schedule: DueSchedule
    paused_by: str
    paused_reason: str


class Inserted(NamedTuple):
    id: uuid.UUID
    state: str


class PendingRow(NamedTuple):
    id: uuid.UUID
    attempt: int
    due: datetime
    priority: str
    duration_class: str
    tenant_id: int
    partition: int
    schedule_id: uuid.UUID
    overlap: str
    scheduled_for: datetime | None
    trigger: str
    state: str
    attempt_base: int
    ckey: str | None
    ckey_limit: int | None
    ckey_on_conflict: str | None


class KeyHolder(NamedTuple):
    tenant_id: int
    concurrency_key: str
    id: uuid.UUID
    state: str


class ActiveRun(NamedTuple):
    schedule_id: uuid.UUID
    id: uuid.UUID
    state: str
    scheduled_for: datetime | None
    due: bool
    trigger: str


class Touched(NamedTuple):
    """An execution a statement changed, with what its timeline event needs."""

    id: uuid.UUID
    schedule_id: uuid.UUID
    tenant_id: int


class StaleQueued(NamedTuple):
    id: uuid.UUID
    attempt: int
    queue: str


class Resumed(NamedTuple):
    id: uuid.UUID
    tenant_id: int
    paused_until: datetime | None


class ExpiredRun(NamedTuple):
    id: uuid.UUID
    tenant_id: int
    schedule_id: uuid.UUID
    attempt: int
    fencing_token: int
    lease_owner: str
    lease_expires_at: datetime | None
    started_at: datetime | None
    retry: Any
    timeout_s: int
    lease_expired: bool
    attempt_base: int


class Swept(NamedTuple):
    id: uuid.UUID
    attempt: int
    fencing_token: int


# --- the beat's session and registration ----------------------------------------------


def set_session_limits(*, idle_ms: int, statement_timeout: str) -> None:
    sql.rows(
        "beat_session_limits",
        {"idle_ms": str(idle_ms), "statement_timeout": statement_timeout},
    )


def register_beat(*, name: str, hostname: str, pid: int) -> None:
    sql.rows("beat_register", {"name": name, "hostname": hostname, "pid": pid})


class Kept(NamedTuple):
    """What the lease keeper's round trip returned."""

    now: datetime  # the database clock
    renewed: set[int]
    live: list[str]
    ranges: int  # how many partition ranges the installation has now


def keep_leases(
    *,
    numbers: list[int],
    epochs: list[int],
    name: str,
    partitions: str,
    rejected: int,
    fired: int,
    published: int,
    failing: bool,
    ttl: float,
) -> Kept:
    """Renew the leases held at their epochs, heartbeat with the counters; the database
    clock, the partitions renewed and the names of the live beats. Run on the calling
    thread's connection (Django's are per thread: the lease keeper's is its own)."""
    (row,) = sql.rows(
        "beat_keep",
        {
            "numbers": numbers,
            "epochs": epochs,
            "name": name,
            "partitions": partitions,
            "rejected": rejected,
            "fired": fired,
            "published": published,
            "failing": failing,
            "ttl": ttl,
        },
    )
    return Kept(row.now, set(row.renewed), list(row.live), int(row.ranges))


class Probe(NamedTuple):
    due: bool  # a schedule of our partitions is due within the lookahead
    unloaded: bool  # a pending execution in the window was written since the last load
    sweep: bool  # the sweep has something to do (False when it was not asked)


def probe(
    *,
    numbers: list[int],
    lookahead: float,
    since: tuple[int, datetime] | None,
    sweep: bool,
    republish_s: float,
    grace_s: float,
) -> Probe:
    (row,) = sql.rows(
        "beat_probe",
        {
            "numbers": numbers,
            "lookahead": lookahead,
            "since": since[0] if since else None,
            "until": since[1] if since else None,
            "sweep": sweep,
            "republish_s": republish_s,
            "grace_s": grace_s,
        },
    )
    return Probe(bool(row.due), bool(row.unloaded), bool(row.sweep))


def beat_stopped(*, name: str) -> None:
    sql.rows("beat_stopped", {"name": name})


# --- partitions -----------------------------------------------------------------------


def ensure_partitions(*, count: int) -> int:
    """The lease ranges, created (`count` of them) if there are none: how many there are."""
    with transaction.atomic():
        sql.rows("partitions_ensure_lock")
        ranges: int = sql.scalar(
            "partitions_ensure", {"count": count, "logical": LOGICAL_PARTITIONS}
        )
    return ranges


def recut_partitions(*, count: int) -> int:
    """Cut the logical partitions into `count` ranges, fencing every lease (beats take the
    new ranges within a cycle or two); the new epoch."""
    with transaction.atomic():
        sql.execute("partitions_recut_lock")
        rows = sql.rows("partitions_recut", {"count": count, "logical": LOGICAL_PARTITIONS})
    return int(rows[0].epoch)


def acquire_partitions(*, want: int, owner: str, ttl: float) -> list[Grant]:
    rows = sql.rows("partitions_acquire", {"want": want, "owner": owner, "ttl": ttl})
    return [Grant(r.number, r.epoch, r.lo, r.hi) for r in rows]


def release_partitions(*, numbers: list[int], epochs: list[int], owner: str) -> set[int]:
    rows = sql.rows("partitions_release", {"numbers": numbers, "epochs": epochs, "owner": owner})
    return {r.number for r in rows}


def partitions_free(*, numbers: list[int]) -> int:
    free: int = sql.scalar("partitions_free", {"numbers": numbers})
    return free


# --- hand-over after a publish stall (handover.py) -------------------------------------


def step_out(*, name: str, ttl: float) -> bool:
    """Stand by, when another live beat takes part to take the partitions over: whether
    it did. Inside the hand-over's transaction: the lock makes hand-overs take turns."""
    sql.rows("beat_handover_lock")
    return bool(sql.rows("beat_step_out", {"name": name, "ttl": ttl}))


def rejoin(*, name: str) -> None:
    sql.rows("beat_rejoin", {"name": name})


def hand_back_unpublished(*, ids: list[str], attempts: list[int], numbers: list[int]) -> int:
    """Admitted rows that never reached the broker: their next owner publishes them at once."""
    rows = sql.rows("hand_back_unpublished", {"ids": ids, "attempts": attempts, "numbers": numbers})
    return len(rows)


def fence_partitions(*, numbers: list[int], epochs: list[int], owner: str) -> set[int]:
    rows = sql.rows("fence_partitions", {"numbers": numbers, "epochs": epochs, "owner": owner})
    return {r.number for r in rows}


# --- firing ---------------------------------------------------------------------------


def fire_due_one_offs(
    *, numbers: list[int], epochs: list[int], lookahead: float, batch: int, fired_by: str
) -> OneOffFiring:
    (row,) = sql.rows(
        "fire_due_one_offs",
        {
            "numbers": numbers,
            "epochs": epochs,
            "lookahead": lookahead,
            "batch": batch,
            "fired_by": fired_by,
        },
    )
    return OneOffFiring(int(row.claimed), int(row.fired), list(row.skipped_ids))


def due_schedules(*, numbers: list[int], lookahead: float, batch: int) -> list[DueSchedule]:
    rows = sql.rows("due_schedules", {"numbers": numbers, "lookahead": lookahead, "batch": batch})
    return [DueSchedule._make(r) for r in rows]


def paused_upstreams_due(*, numbers: list[int], limit: int) -> list[PausedUpstream]:
    rows = sql.rows("paused_upstreams_due", {"numbers": numbers, "limit": limit})
    return [PausedUpstream(DueSchedule._make(r[:14]), r.paused_by, r.paused_reason) for r in rows]


def insert_executions(params: dict[str, Any]) -> list[Inserted]:
    return [Inserted(r.id, r.state) for r in sql.rows("insert_executions", params)]


def advance_schedules(*, ids: list[uuid.UUID], next_run_ats: list[datetime | None]) -> None:
    sql.rows("advance_schedules", {"ids": ids, "next_run_ats": next_run_ats})


def horizon(*, lookahead: float) -> tuple[int, datetime]:
    """The load watermark (beat_horizon): rows written by older transactions are visible
    now; and the end of the window loaded now."""
    (row,) = sql.rows("beat_horizon", {"lookahead": lookahead})
    return int(row.horizon), row.until


def pending_executions(
    *,
    numbers: list[int],
    lookahead: float,
    limit: int,
    since: tuple[int, datetime] | None = None,
    after: tuple[datetime, uuid.UUID] | None = None,
) -> list[PendingRow]:
    rows = sql.rows(
        "pending_executions",
        {
            "numbers": numbers,
            "lookahead": lookahead,
            "limit": limit,
            "since": since[0] if since else None,
            "until": since[1] if since else None,
            "after_due": after[0] if after else None,
            "after_id": after[1] if after else None,
        },
    )
    return [PendingRow._make(r) for r in rows]


# --- admission ------------------------------------------------------------------------


def lock_admission_global() -> None:
    sql.rows("admission_lock_global")


def lock_admission_tenants(*, tenant_ids: list[int]) -> None:
    sql.rows("admission_lock_tenants", {"tenant_ids": tenant_ids})


def active_executions(*, ids: list[str], candidates: list[str]) -> list[ActiveRun]:
    rows = sql.rows(
        "active_executions",
        {"ids": ids, "candidates": candidates, "active": state_values(ACTIVE_STATES)},
    )
    return [ActiveRun._make(r) for r in rows]


def cancel_for_replace(*, ids: list[str], reasons: list[str], code: str) -> list[Touched]:
    rows = sql.rows(
        "cancel_for_replace",
        {"ids": ids, "reasons": reasons, "code": code, "active": state_values(ACTIVE_STATES)},
    )
    return [Touched._make(r) for r in rows]


def mark_admission_skipped(*, ids: list[str], reasons: list[str], code: str) -> list[uuid.UUID]:
    rows = sql.rows("mark_admission_skipped", {"ids": ids, "reasons": reasons, "code": code})
    return [r.id for r in rows]


def lock_admission_keys(*, locks: list[int]) -> None:
    sql.rows("admission_lock_keys", {"locks": locks})


def key_holders(
    *, tenant_ids: list[int], keys: list[str], candidates: list[str]
) -> list[KeyHolder]:
    rows = sql.rows(
        "key_holders", {"tenant_ids": tenant_ids, "keys": keys, "candidates": candidates}
    )
    return [KeyHolder._make(r) for r in rows]


def clear_admission_grants(*, beat: str) -> None:
    sql.execute("admission_grants_clear", {"beat": beat})


def use_admission_grants(*, beat: str, used: dict[int, int]) -> None:
    sql.execute(
        "admission_grants_use",
        {"beat": beat, "tenant_ids": list(used), "used": list(used.values())},
    )


def take_admission_grants(
    *, beat: str, range_number: int, epoch: int, slots: dict[int, int]
) -> None:
    sql.execute(
        "admission_grants_take",
        {
            "beat": beat,
            "range_number": range_number,
            "epoch": epoch,
            "tenant_ids": list(slots),
            "slots": list(slots.values()),
        },
    )


def inflight_total() -> int:
    return int(sql.scalar("inflight_total", {"in_flight": state_values(IN_FLIGHT_STATES)}))


def occurrence_span(occurred: Sequence[datetime | None]) -> dict[str, datetime | str]:
    """`lo` and `hi` for a statement that names executions by id: the earliest and the
    latest of their scheduled_for. History is partitioned by day on scheduled_for, and
    an id alone makes PostgreSQL plan every day partition and probe each one's primary
    key for every id; the span prunes the partitions outside it at planning. Unbounded
    when one is not known (the span only narrows where to look, never what matches)."""
    if not occurred or any(at is None for at in occurred):
        return {"lo": "-infinity", "hi": "infinity"}
    known = [at for at in occurred if at is not None]
    return {"lo": min(known), "hi": max(known)}


def admit_executions(
    *,
    ids: list[str],
    attempts: list[int],
    partitions: list[int],
    queues: list[str],
    ckeys: list[str | None],
    numbers: list[int],
    occurred: Sequence[datetime | None],
) -> set[str]:
    rows = sql.rows(
        "admit_executions",
        {
            "ids": ids,
            "attempts": attempts,
            "partitions": partitions,
            "queues": queues,
            "ckeys": ckeys,
            "numbers": numbers,
        }
        | occurrence_span(occurred),
    )
    return {str(r.id) for r in rows}


def mark_held(
    *, ids: list[str], code: str, reason: str, occurred: Sequence[datetime | None]
) -> list[Touched]:
    rows = sql.rows(
        "mark_held", {"ids": ids, "code": code, "reason": reason} | occurrence_span(occurred)
    )
    return [Touched._make(r) for r in rows]


def mark_held_each(
    *, ids: list[str], reasons: list[str], code: str, occurred: Sequence[datetime | None]
) -> list[Touched]:
    rows = sql.rows(
        "mark_held_each",
        {"ids": ids, "reasons": reasons, "code": code} | occurrence_span(occurred),
    )
    return [Touched._make(r) for r in rows]


def mark_quota_exhausted(
    *, ids: list[str], reason: str, occurred: Sequence[datetime | None]
) -> list[Touched]:
    rows = sql.rows(
        "mark_quota_exhausted", {"ids": ids, "reason": reason} | occurrence_span(occurred)
    )
    return [Touched._make(r) for r in rows]


# --- sweeping -------------------------------------------------------------------------


def stale_queued(*, numbers: list[int], timeout: float, limit: int) -> list[StaleQueued]:
    rows = sql.rows("stale_queued", {"numbers": numbers, "timeout": timeout, "limit": limit})
    return [StaleQueued._make(r) for r in rows]


def auto_resume(*, numbers: list[int]) -> list[Resumed]:
    return [Resumed._make(r) for r in sql.rows("auto_resume", {"numbers": numbers})]


def sweep_lock_expired(
    *, grace_s: float, partitions: list[int] | None, limit: int
) -> list[ExpiredRun]:
    rows = sql.rows(
        "sweep_lock_expired",
        {
            "grace_s": grace_s,
            "all_partitions": partitions is None,
            "partitions": list(partitions or []),
            "limit": limit,
        },
    )
    return [ExpiredRun._make(r) for r in rows]


def sweep_apply(
    *,
    ids: list[str],
    tokens: list[int],
    states: list[str],
    delays: list[float],
    codes: list[str],
    reasons: list[str],
) -> list[Swept]:
    rows = sql.rows(
        "sweep_apply",
        {
            "ids": ids,
            "tokens": tokens,
            "states": states,
            "delays": delays,
            "codes": codes,
            "reasons": reasons,
        },
    )
    return [Swept._make(r) for r in rows]


# --- the beat's ORM writes ------------------------------------------------------------


def record_events(items: Iterable[Event]) -> None:
    """The beat's timeline events (actor `beat`)."""
    ExecutionEvent.objects.bulk_create(
        [
            ExecutionEvent(
                schedule_id=sid,
                tenant_id=tid,
                execution_id=eid,
                kind=kind,
                message=msg[:1000],
                data=dict(data or {}),
                actor="beat",
            )
            for sid, tid, eid, kind, msg, data in items
        ]
    )


def record_auto_resumed(rows: Sequence[Resumed]) -> None:
    """The records of schedules that resumed by themselves (their pause's end passed):
    one audit row each, as a user's resume writes one (the audit log must show every
    pause ending, not only the ones a person ended), written first, then the
    `resumed` event naming it in `data.audit_id`."""
    ends = {r.id: r.paused_until for r in rows}
    audits = []
    for schedule in Schedule.objects.filter(id__in=list(ends)):
        after = schedule_snapshot(schedule) | {"paused_until": None}
        until = ends[schedule.id]
        before = after | {
            "paused": True,
            "paused_until": until.isoformat() if until else None,
            "version": schedule.version - 1,
        }
        audits.append(
            AuditEvent(
                tenant_id=schedule.tenant_id,
                actor_kind="system",
                actor_label="beat",
                action=AuditAction.SCHEDULE_RESUME,
                object_type="schedule",
                object_id=str(schedule.id),
                before=before,
                after=after,
            )
        )
    audit_ids = {a.object_id: a.pk for a in AuditEvent.objects.bulk_create(audits)}
    record_events(
        Event(
            r.id,
            r.tenant_id,
            None,
            EventKind.RESUMED,
            "resumed automatically: the pause's end time passed",
            {EventData.AUDIT_ID: audit_ids[str(r.id)]} if str(r.id) in audit_ids else None,
        )
        for r in rows
    )
