"""Reads of backfills: the plan of a backfill (what a dry run answers and what the
real one stores), one backfill with its progress, and a schedule's backfills.

The occurrences of the range are the preview's (`schedule_preview`, paged):
the same DST, `H` and fold rules, so a dry run, the executions a backfill
creates and `GET /v1/schedules/{id}/preview?from=` over the range always list
the same instants.
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.db.models import Count, F, Func, IntegerField, Q, QuerySet

from dispatch.exceptions import InvalidSchedule, NotFound
from dispatch.models import Backfill, Execution, Kind, Schedule
from dispatch.selectors.paging import Page, as_uuid, keyset_page, tenant_object
from dispatch.selectors.schedules import schedule_preview
from dispatch.states import (
    ACTIVE_STATES,
    FINAL_STATES,
    BackfillAction,
    BackfillOrder,
    ExecutionState,
    Reprocess,
)
from dispatch.timing import cron
from tenants.models import Tenant

if TYPE_CHECKING:
    from dispatch.explain import PauseInterval

# One backfill releases at most this many runs at once (its `max_concurrent`).
BACKFILL_MAX_CONCURRENT = 100
# The final states `reprocess: failed` re-runs: everything that did not succeed.
REPROCESS_FAILED_STATES = FINAL_STATES - {ExecutionState.SUCCEEDED}
_TICK = timedelta(microseconds=1)


@dataclass(frozen=True)
class PlanItem:
    scheduled_for: datetime
    local: datetime  # in the schedule's zone
    action: BackfillAction
    execution_id: uuid.UUID | None  # the occurrence's execution, when one exists


@dataclass(frozen=True)
class BackfillPlan:
    schedule: Schedule
    range_from: datetime
    range_to: datetime
    reprocess: Reprocess
    order: BackfillOrder
    skip_paused: bool
    items: list[PlanItem]
    counts: dict[str, int] = field(default_factory=dict)  # action -> occurrences

    def stored(self) -> list[list[str]]:
        """The plan as `Backfill.plan` keeps it: [[scheduled_for ISO, action], ...]."""
        return [[item.scheduled_for.isoformat(), str(item.action)] for item in self.items]


def check_backfill_request(
    *,
    schedule: Schedule,
    range_from: datetime,
    range_to: datetime,
    reprocess: str,
    order: str,
    max_concurrent: int,
    now: datetime,
) -> None:
    """The meaning checks of a backfill request (types are the API's): each names its field."""
    if schedule.kind == Kind.ONCE:
        raise InvalidSchedule.field(
            "schedule", "is a one-off job: it has no occurrences to backfill (re-run it instead)"
        )
    if range_to <= range_from:
        raise InvalidSchedule.field("to", "must be after from (the range is [from, to))")
    if range_to > now:
        # The occurrences from now on are the beat's: a backfill would race it for them.
        raise InvalidSchedule.field(
            "to", f"must not be in the future (now is {now.isoformat()}); later runs are the beat's"
        )
    if reprocess not in Reprocess.values:
        raise InvalidSchedule.field("reprocess", f"must be one of {', '.join(Reprocess.values)}")
    if order not in BackfillOrder.values:
        raise InvalidSchedule.field("order", f"must be one of {', '.join(BackfillOrder.values)}")
    if not 1 <= max_concurrent <= BACKFILL_MAX_CONCURRENT:
        raise InvalidSchedule.field("max_concurrent", f"must be in 1..{BACKFILL_MAX_CONCURRENT}")


def backfill_occurrences(
    schedule: Schedule, *, range_from: datetime, range_to: datetime
) -> list[cron.Occurrence]:
    """The occurrences o with range_from <= o < range_to, oldest first: the preview's,
    page after page. More than BACKFILL_MAX_OCCURRENCES is a 400 naming `to`, with
    the end that would fit."""
    bound = int(settings.BACKFILL_MAX_OCCURRENCES)
    found: list[cron.Occurrence] = []
    after = range_from - _TICK  # the preview lists strictly after: from itself is in the range
    while True:
        try:
            page = schedule_preview(schedule=schedule, after=after, count=cron.PREVIEW_MAX)
        except cron.CronError as exc:
            raise InvalidSchedule.field("from", exc.message) from None
        for occurrence in page:
            if occurrence.scheduled_for >= range_to:
                return found
            if len(found) == bound:
                raise InvalidSchedule.field(
                    "to",
                    f"the range holds more than {bound} occurrences (BACKFILL_MAX_OCCURRENCES); "
                    f"end it at or before {occurrence.scheduled_for.isoformat()} and backfill "
                    "the rest in another request",
                )
            found.append(occurrence)
        if len(page) < cron.PREVIEW_MAX:
            return found  # the schedule has no occurrence after the last one listed
        after = page[-1].scheduled_for


def _paused_at(intervals: list[PauseInterval], instant: datetime) -> bool:
    # A backfill's instants are all past, so a pause still in force covers
    # everything from its start (the explainer's rule for past instants).
    return any(p.start <= instant and (p.end is None or instant < p.end) for p in intervals)


def _action(
    existing: tuple[uuid.UUID, str] | None, *, reprocess: str, paused: bool
) -> BackfillAction:
    if existing is not None and existing[1] in ACTIVE_STATES:
        return BackfillAction.SKIP_ACTIVE
    if paused:
        # Asked to leave paused times alone: also when a record of them exists
        # (a paused time's skipped run is not "failed" work to redo).
        return BackfillAction.SKIP_PAUSED_TIME
    if existing is None:
        return BackfillAction.CREATE
    if reprocess == Reprocess.ALL or (
        reprocess == Reprocess.FAILED and existing[1] in REPROCESS_FAILED_STATES
    ):
        return BackfillAction.RERUN
    return BackfillAction.SKIP_EXISTING


def backfill_plan(
    *,
    schedule: Schedule,
    range_from: datetime,
    range_to: datetime,
    reprocess: str = Reprocess.NONE,
    order: str = BackfillOrder.OLDEST,
    skip_paused: bool = False,
) -> BackfillPlan:
    """Each occurrence of [range_from, range_to) with what a backfill does with it, in
    the requested order (call check_backfill_request first)."""
    occurrences = backfill_occurrences(schedule, range_from=range_from, range_to=range_to)
    existing: dict[datetime, tuple[uuid.UUID, str]] = {}
    if occurrences:
        rows = Execution.objects.filter(
            tenant_id=schedule.tenant_id,
            schedule=schedule,
            scheduled_for__gte=occurrences[0].scheduled_for,
            scheduled_for__lte=occurrences[-1].scheduled_for,
        ).values_list("scheduled_for", "id", "state")
        existing = {at: (pk, state) for at, pk, state in rows}
    intervals: list[PauseInterval] = []
    if skip_paused:
        # Imported here: the explainer's modules import the selectors package.
        from dispatch.explain import pause_intervals

        intervals = pause_intervals(schedule)
    items = [
        PlanItem(
            scheduled_for=o.scheduled_for,
            local=o.local,
            action=_action(
                existing.get(o.scheduled_for),
                reprocess=reprocess,
                paused=bool(intervals) and _paused_at(intervals, o.scheduled_for),
            ),
            execution_id=existing[o.scheduled_for][0] if o.scheduled_for in existing else None,
        )
        for o in occurrences
    ]
    if order == BackfillOrder.NEWEST:
        items.reverse()
    tally = Counter(item.action for item in items)
    return BackfillPlan(
        schedule=schedule,
        range_from=range_from,
        range_to=range_to,
        reprocess=Reprocess(reprocess),
        order=BackfillOrder(order),
        skip_paused=skip_paused,
        items=items,
        counts={str(action): tally.get(action, 0) for action in BackfillAction},
    )


# --- backfill objects -------------------------------------------------------------------


@dataclass(frozen=True)
class BackfillProgress:
    total: int  # occurrences in the plan
    position: int  # how far the pump has gone
    created: int
    rerun: int
    skipped: int
    active: int  # its executions not final yet
    done: int  # its executions that succeeded
    failed: int  # its executions that ended dead, skipped or cancelled
    counts: dict[str, int] | None  # the plan's actions (one backfill's read only)


def backfill_get(*, tenant: Tenant, backfill_id: uuid.UUID | str) -> Backfill:
    return tenant_object(Backfill.objects.all(), tenant=tenant, pk=backfill_id, what="backfill")


def _without_plan(qs: QuerySet[Backfill]) -> QuerySet[Backfill]:
    """Backfills with `plan_total` instead of the plan (up to BACKFILL_MAX_OCCURRENCES
    entries, ~40 bytes each): for lists and for progress that is polled."""
    return qs.defer("plan").annotate(
        plan_total=Func(F("plan"), function="jsonb_array_length", output_field=IntegerField())
    )


def backfill_list(
    *, tenant: Tenant, schedule: Schedule, cursor: str | None = None, limit: int = 50
) -> Page[Backfill]:
    """A schedule's backfills, newest first, each with `plan_total` (see `_without_plan`)."""
    qs = _without_plan(Backfill.objects.filter(tenant=tenant, schedule=schedule))
    return keyset_page(qs, field="created_at", cursor=cursor, limit=limit)


def backfill_summary(
    *, tenant: Tenant, backfill_id: uuid.UUID | str
) -> tuple[Backfill, BackfillProgress]:
    """One backfill and its progress without reading its plan (no per-action counts):
    what a page polling it every few seconds needs, in two small queries."""
    pk = as_uuid(backfill_id)
    found = _without_plan(Backfill.objects.filter(tenant=tenant, pk=pk)).first() if pk else None
    if found is None:
        raise NotFound("backfill not found")
    return found, backfill_list_progress([found])[found.id]


def _outcomes(ids: list[uuid.UUID]) -> dict[uuid.UUID, dict[str, int]]:
    """Per backfill: its executions (`Execution.backfill`) active, succeeded, failed; one query."""
    rows = (
        Execution.objects.filter(backfill_id__in=ids)
        .values("backfill_id")
        .annotate(
            active=Count("id", filter=Q(state__in=ACTIVE_STATES)),
            done=Count("id", filter=Q(state=ExecutionState.SUCCEEDED)),
            failed=Count("id", filter=Q(state__in=REPROCESS_FAILED_STATES)),
        )
    )
    return {r["backfill_id"]: r for r in rows}


def _progress(
    backfill: Backfill, *, total: int, outcome: dict[str, int] | None, counts: dict[str, int] | None
) -> BackfillProgress:
    outcome = outcome or {}
    return BackfillProgress(
        total=total,
        position=backfill.position,
        created=backfill.created,
        rerun=backfill.rerun,
        skipped=backfill.skipped,
        active=int(outcome.get("active", 0)),
        done=int(outcome.get("done", 0)),
        failed=int(outcome.get("failed", 0)),
        counts=counts,
    )


def backfill_progress(backfill: Backfill) -> BackfillProgress:
    """One backfill's progress: the pump's counters, the outcome of the executions it
    created or re-ran, and the plan's actions."""
    plan = backfill.plan if isinstance(backfill.plan, list) else []
    tally = Counter(str(entry[1]) for entry in plan)
    return _progress(
        backfill,
        total=len(plan),
        outcome=_outcomes([backfill.id]).get(backfill.id),
        counts={str(action): tally.get(action, 0) for action in BackfillAction},
    )


def backfill_list_progress(backfills: list[Backfill]) -> dict[uuid.UUID, BackfillProgress]:
    """The progress of a page of `backfill_list` (no plan counts), in one query."""
    outcomes = _outcomes([b.id for b in backfills])
    return {
        b.id: _progress(
            b, total=int(getattr(b, "plan_total", 0)), outcome=outcomes.get(b.id), counts=None
        )
        for b in backfills
    }
