"""Firing: claim the due schedules of our partitions, plan their occurrences, insert
the executions and advance next_run_at, in one transaction fenced by the partition
epochs. Also what waits for its due time (`Pending`) and the paused-upstream records.

One-off jobs (the burst case) take the set-based path (`fire_due_one_offs`: claim,
insert and advance in one statement, no row leaving the server); cron schedules are
planned here in Python (`_FirePlan`, with dispatch/timing/cron.py) for DST and
misfire exactness. The overlap policy is not decided here but at due time
(admission.py): whether the previous run is still active is only known then.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from core import faults
from core.db import db_clock
from dispatch.alerting import decision
from dispatch.history.ids import execution_id
from dispatch.queues import queue_name
from dispatch.scheduler import dependencies, store
from dispatch.scheduler.partitions import Partitions
from dispatch.selectors.calendars import schedule_filters
from dispatch.states import EventKind, ExecutionState, Kind, Misfire, Overlap, ReasonCode, Trigger
from dispatch.timing import cron
from dispatch.timing.calendars import DateFilter
from dispatch.timing.durations import spell

# Occurrences of one paused upstream recorded per sweep at most; older ones of a
# longer backlog (the beat was down too) get one summary event instead.
PAUSED_RECORD_LIMIT = 100


@dataclass(order=True, slots=True)
class Pending:
    """An execution waiting in the beat's heap for its due time, then to be published.

    Slots: with pre-staging a beat holds every occurrence of the stage-ahead window
    (100k at a top-of-hour burst), and a dict per item doubled its memory."""

    due: float  # epoch seconds, database clock
    id: str = field(compare=False)
    attempt: int = field(compare=False)
    queue: str = field(compare=False)
    tenant_id: int = field(compare=False)
    partition: int = field(compare=False)
    schedule_id: str = field(default="", compare=False)
    overlap: str = field(default=Overlap.ALLOW, compare=False)
    scheduled_for: datetime | None = field(default=None, compare=False)
    trigger: str = field(default="", compare=False)
    # Not yet counted against the daily quota: a first attempt still `scheduled`. An
    # attempt handed back by the rate limiter (retry_scheduled, same attempt) was.
    fresh: bool = field(default=True, compare=False)
    # The attempt the chain started after: 0, or where a re-run continued from. The
    # first attempt of a chain (attempt_base + 1) is decided like a new occurrence.
    attempt_base: int = field(default=0, compare=False)
    # The schedule's concurrency key: (rendered key, limit, on_conflict), or None (one
    # slot, not three: 100k items are held at a burst).
    ckey: tuple[str, int, str] | None = field(default=None, compare=False)

    @property
    def chain_start(self) -> bool:
        return self.attempt == self.attempt_base + 1


def fire_due(partitions: Partitions, *, lookahead_s: float, batch: int) -> tuple[int, int]:
    """Create executions for due schedules of our partitions, in one fenced transaction:
    (schedules claimed, executions inserted)."""
    with transaction.atomic():
        numbers = partitions.fence()
        if not numbers:
            return 0, 0
        one_offs = store.fire_due_one_offs(
            numbers=numbers,
            epochs=[partitions.covered[n] for n in numbers],
            lookahead=lookahead_s,
            batch=batch,
            fired_by=partitions.cfg.name,
        )
        if one_offs.skipped_ids:
            # One-offs skipped by their misfire policy skip their dependents too.
            dependencies.propagate(execution_ids=one_offs.skipped_ids)
        planned_claimed, planned_fired = _fire_planned(
            partitions, numbers, lookahead_s=lookahead_s, batch=batch
        )
        faults.crash_at("before_fire_commit")
    faults.crash_at("after_fire_commit")
    return one_offs.claimed + planned_claimed, one_offs.fired + planned_fired


def _fire_planned(
    partitions: Partitions, numbers: list[int], *, lookahead_s: float, batch: int
) -> tuple[int, int]:
    """The general path, occurrences planned in Python (cron math, misfire, overlap):
    (schedules claimed, executions inserted)."""
    now = db_clock()
    due = store.due_schedules(numbers=numbers, lookahead=lookahead_s, batch=batch)
    if not due:
        return 0, 0
    until = now + timedelta(seconds=lookahead_s)
    plan = _FirePlan(beat=partitions.cfg.name, epochs=partitions.covered)
    # The batch's calendars in one query: an excluded local date has no occurrence.
    filters = schedule_filters(s.id for s in due if s.kind == Kind.CRON)
    # The overlap policy is not applied here: an occurrence is planned up to the
    # lookahead before it is due, and whether the previous run is still active
    # is only known then (the admission decides it at due time).
    for sched in due:
        plan.add_schedule(sched, now=now, until=until, dates=filters.get(sched.id))
    inserted = store.insert_executions(plan.insert_params()) if plan.ids else []
    skipped = [row.id for row in inserted if row.state == ExecutionState.SKIPPED]
    if skipped:
        # A skipped occurrence skips its dependents too, naming the upstream.
        dependencies.propagate(execution_ids=skipped)
    store.advance_schedules(ids=plan.advance_ids, next_run_ats=plan.advance_to)
    if plan.events:
        store.record_events(plan.events)
    if plan.missed.schedule_ids:
        # Only a batch that found occurrences beyond their grace pays for this: one
        # statement, in the transaction that recorded them (the alert outbox rule).
        decision.decide_missed(plan.missed)
    return len(due), len(inserted)


def load_pending(
    numbers: list[int],
    *,
    lookahead_s: float,
    limit: int,
    since: tuple[int, datetime] | None = None,
) -> tuple[list[Pending], tuple[int, datetime]]:
    """Executions of our partitions due within the stage-ahead window, waiting to be
    published — with `since` (a previous load's horizon) only those written after it
    or due after its window's end — page by page, however many; and this load's
    horizon and window end, for the next one."""
    # Taken first: whatever a page misses was written by a transaction newer than it.
    mark = store.horizon(lookahead=lookahead_s)
    items: list[Pending] = []
    after: tuple[datetime, uuid.UUID] | None = None
    while True:
        rows = store.pending_executions(
            numbers=numbers, lookahead=lookahead_s, limit=limit, since=since, after=after
        )
        items.extend(
            Pending(
                row.due.timestamp(),
                str(row.id),
                row.attempt,
                queue_name(row.priority, row.duration_class),
                row.tenant_id,
                row.partition,
                str(row.schedule_id),
                row.overlap,
                row.scheduled_for,
                row.trigger,
                row.state == ExecutionState.SCHEDULED,
                row.attempt_base,
                (row.ckey, row.ckey_limit or 1, row.ckey_on_conflict or "queue")
                if row.ckey is not None
                else None,
            )
            for row in rows
        )
        if len(rows) < limit:
            return items, mark
        after = (rows[-1].due, rows[-1].id)


def record_paused(partitions: Partitions, numbers: list[int], *, batch: int) -> int:
    """Inside the sweep's fenced transaction: record the occurrences of paused
    upstreams that resuming would skip anyway, as they fall due; returns rows written.

    Every occurrence that does not run is recorded with its reason (failure contract
    C4: docs/explanation/failure-contract.md), paused ones too. Without a record, a
    dependent waited "pending" on a paused upstream forever. Recording at due
    time (past the grace) costs what firing would: one cheap row per
    occurrence, no publish, spread over time — never a burst at resume. Only
    upstreams that a live dependent waits on are recorded (the explainer
    answers for the others from the pause's own events). The misfire policy
    still decides at resume: the latest late occurrence (run_once) or the
    latest catch_up_limit (catch_up), and those within the grace, stay
    unrecorded so resuming runs them exactly as before.
    """
    rows = store.paused_upstreams_due(numbers=numbers, limit=batch)
    if not rows:
        return 0
    now = db_clock()
    plan = _FirePlan(beat=partitions.cfg.name, epochs=partitions.covered)
    filters = schedule_filters(sched.id for sched, _, _ in rows)
    for sched, paused_by, paused_reason in rows:
        missed = cron.plan_misfire(
            sched.cron,
            sched.timezone,
            seed=str(sched.id),
            next_run_at=sched.next_run_at,
            now=now,
            until=now,
            grace_s=sched.misfire_grace_s,
            policy=sched.misfire,
            catch_up_limit=sched.catch_up_limit,
            max_listed=PAUSED_RECORD_LIMIT,
            dates=filters.get(sched.id),
        )
        why = f"skipped: the schedule was paused by {paused_by or 'someone'}" + (
            f' ("{paused_reason}")' if paused_reason else ""
        )
        for occ in missed.skipped:
            plan._row(
                sched,
                scheduled_for=occ,
                due_at=occ,
                trigger=Trigger.CRON,
                state=ExecutionState.SKIPPED,
                code=ReasonCode.PAUSED,
                reason=why,
            )
        if missed.skipped_total > len(missed.skipped):
            plan.events.append(
                store.Event(
                    sched.id,
                    sched.tenant_id,
                    None,
                    EventKind.PAUSED_SKIPPED,
                    f"{missed.skipped_total - len(missed.skipped)} older occurrences missed "
                    "while paused were skipped without individual records",
                )
            )
        plan.advance_ids.append(sched.id)
        plan.advance_to.append(min(missed.fire) if missed.fire else missed.next_run_at)
    inserted = store.insert_executions(plan.insert_params()) if plan.ids else []
    if inserted:
        dependencies.propagate(execution_ids=[row.id for row in inserted])
    store.advance_schedules(ids=plan.advance_ids, next_run_ats=plan.advance_to)
    if plan.events:
        store.record_events(plan.events)
    return len(inserted)


class _FirePlan:
    """The rows one firing transaction writes, computed from the due schedules."""

    def __init__(self, *, beat: str, epochs: dict[int, int]) -> None:
        self.beat = beat
        self.epochs = epochs
        self.ids: list[uuid.UUID] = []
        self.schedule_ids: list[uuid.UUID] = []
        self.tenant_ids: list[int] = []
        self.partitions: list[int] = []
        self.scheduled_fors: list[datetime] = []
        self.due_ats: list[datetime] = []
        self.triggers: list[str] = []
        self.states: list[str] = []
        self.reason_codes: list[str] = []
        self.reasons: list[str] = []
        self.row_epochs: list[int] = []
        self.advance_ids: list[uuid.UUID] = []
        self.advance_to: list[datetime | None] = []
        self.events: list[store.Event] = []
        self.missed = decision.Missed()
        # Misfire plans by everything they depend on: the schedules of a top-of-hour
        # burst share a handful of expressions, and one plan costs ~0.4 ms of cron math.
        self._plans: dict[tuple[Any, ...], cron.MisfirePlan] = {}

    def _row(
        self,
        sched: store.DueSchedule,
        *,
        scheduled_for: datetime,
        due_at: datetime,
        trigger: str,
        state: str = ExecutionState.SCHEDULED,
        code: str = "",
        reason: str = "",
    ) -> None:
        sid, tid, partition = sched.id, sched.tenant_id, sched.partition
        self.ids.append(execution_id(scheduled_for))
        self.schedule_ids.append(sid)
        self.tenant_ids.append(tid)
        self.partitions.append(partition)
        self.scheduled_fors.append(scheduled_for)
        self.due_ats.append(due_at)
        self.triggers.append(trigger)
        self.states.append(state)
        self.reason_codes.append(code)
        self.reasons.append(reason[:500])
        self.row_epochs.append(self.epochs[partition])

    def add_schedule(
        self,
        sched: store.DueSchedule,
        *,
        now: datetime,
        until: datetime,
        dates: DateFilter | None = None,
    ) -> None:
        (
            sid,
            _tid,
            _part,
            kind,
            expr,
            tz,
            run_at,
            next_run_at,
            misfire,
            grace,
            catch_up,
            jitter,
            _overlap,
            created_at,
        ) = sched
        seed = str(sid)
        self.advance_ids.append(sid)
        once_late = False
        if kind == Kind.ONCE:
            # As on the fast path (fire_due_one_offs): due at run_at, or at creation
            # when run_at was already past; later than the grace is a misfire.
            once_late = now - max(run_at, created_at) > timedelta(seconds=grace)
            if once_late and misfire == Misfire.SKIP:
                self._row(
                    sched,
                    scheduled_for=run_at,
                    due_at=run_at,
                    trigger=Trigger.API,
                    state=ExecutionState.SKIPPED,
                    code=ReasonCode.MISFIRE,
                    reason=f"skipped by misfire policy (skip): the one-off job was found "
                    f"{spell(now - max(run_at, created_at))} late, beyond the {grace}s grace period",
                )
                self.advance_to.append(None)
                return
            fire, skipped, total, nxt = [run_at], [], 0, None
        else:
            memo: tuple[Any, ...] = (expr, tz, cron.effective_seed(expr, seed), next_run_at)
            memo += (now, until, grace, misfire, catch_up, dates)
            plan = self._plans.get(memo)
            if plan is None:
                plan = self._plans[memo] = cron.plan_misfire(
                    expr,
                    tz,
                    seed=seed,
                    next_run_at=next_run_at,
                    now=now,
                    until=until,
                    grace_s=grace,
                    policy=misfire,
                    catch_up_limit=catch_up,
                    dates=dates,
                )
            fire, skipped, total, nxt = (
                plan.fire,
                plan.skipped,
                plan.skipped_total,
                plan.next_run_at,
            )
        self.advance_to.append(nxt)
        late_cutoff = now - timedelta(seconds=grace)
        for occ in skipped:
            self._row(
                sched,
                scheduled_for=occ,
                due_at=occ,
                trigger=Trigger.CRON,
                state=ExecutionState.SKIPPED,
                code=ReasonCode.MISFIRE,
                reason=f"skipped by misfire policy ({misfire}): the occurrence was found "
                f"{spell(now - occ)} late, beyond the {grace}s grace period",
            )
        if total > len(skipped):
            self.events.append(
                store.Event(
                    sid,
                    sched.tenant_id,
                    None,
                    EventKind.MISFIRE_SKIPPED,
                    f"{total - len(skipped)} older missed occurrences were skipped "
                    f"by the misfire policy ({misfire}) without individual records",
                )
            )
        if kind != Kind.ONCE:
            self._note_missed(sid, skipped, total, fire, late_cutoff, next_run_at)
        for occ in fire:
            if kind == Kind.ONCE:
                due = occ
                trigger = Trigger.CATCH_UP if once_late else Trigger.API
            else:
                due = occ + timedelta(
                    seconds=cron.jitter_seconds(seed=seed, scheduled_for=occ, jitter_s=jitter)
                )
                trigger = Trigger.CATCH_UP if occ < late_cutoff else Trigger.CRON
            self._row(sched, scheduled_for=occ, due_at=due, trigger=trigger)

    def _note_missed(
        self,
        sid: uuid.UUID,
        skipped: list[datetime],
        total: int,
        fire: list[datetime],
        late_cutoff: datetime,
        next_run_at: datetime,
    ) -> None:
        """Remember the occurrences found beyond the grace (skipped, or fired late by
        run_once / catch_up): what the `missed` alert of this outage reports."""
        late_fired = [occ for occ in fire if occ < late_cutoff]
        if not total and not late_fired:
            return
        listed = skipped + late_fired
        # Older skipped ones without a record start at the schedule's next_run_at,
        # the first occurrence the plan considered.
        first = next_run_at if total > len(skipped) else min(listed)
        self.missed.add(
            sid, missed=total + len(late_fired), skipped=total, first=first, last=max(listed)
        )

    def insert_params(self) -> dict[str, Any]:
        return {
            "ids": self.ids,
            "schedule_ids": self.schedule_ids,
            "tenant_ids": self.tenant_ids,
            "partitions": self.partitions,
            "scheduled_fors": self.scheduled_fors,
            "due_ats": self.due_ats,
            "triggers": self.triggers,
            "states": self.states,
            "reason_codes": self.reason_codes,
            "reasons": self.reasons,
            "epochs": self.row_epochs,
            "fired_by": self.beat,
        }
