"""Reads of schedules: one, a page, the pickers' search, their upstreams and
dependents, their next runs, and the dashboard's upcoming fires. Every query
starts from the tenant (fails closed)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import islice
from typing import Any

from django.db.models import Case, F, Q, QuerySet, Value, When
from django.db.models.expressions import RawSQL
from django.db.models.functions import Now

from dispatch import concurrency_keys
from dispatch.exceptions import InvalidSchedule
from dispatch.lifecycle import spell_delete_after
from dispatch.models import Execution, Kind, Schedule
from dispatch.selectors.calendars import schedule_filter, schedule_filters
from dispatch.selectors.executions import ExecutionFilter, execution_list, reading_windows
from dispatch.selectors.paging import Page, as_uuid, keyset_page, tenant_object, within
from dispatch.states import NOT_STARTED_STATES, state_values
from dispatch.timing import cron
from dispatch.timing.calendars import DateFilter
from tenants.models import Tenant


def schedule_fields(schedule: Schedule) -> dict[str, Any]:
    """The definition fields shown alike by the API (`schedule_out`), the audit
    snapshot (`services.schedule_snapshot`) and the console's edit form, under
    their API names. Each adds the fields it renders its own way (cron, run_at,
    target, retry)."""
    return {
        "name": schedule.name,
        "kind": schedule.kind,
        "timezone": schedule.timezone,
        "priority": schedule.priority,
        "duration": schedule.duration_class,
        "concurrency": schedule.overlap,
        "misfire": schedule.misfire,
        "misfire_grace_s": schedule.misfire_grace_s,
        "catch_up_limit": schedule.catch_up_limit,
        "jitter_s": schedule.jitter_s,
        "max_runs": schedule.max_runs,
        "delete_after": spell_delete_after(schedule.delete_after),
        "concurrency_key": concurrency_keys.definition(schedule.concurrency_key),
        **calendar_names(schedule),
    }


# A schedule's end_at, read from its timing text ("... | end_at 2026-12-24T00:00:00Z",
# written only by dispatch/timing/cron.py's compose); 'infinity' without one, never NULL,
# so that excluding the completed ones keeps the schedules without an end_at.
END_AT_SQL = RawSQL(
    "COALESCE(CASE WHEN kind = 'cron' THEN substring(cron from 'end_at ([^ |]+)')::timestamptz"
    " END, 'infinity')",
    [],
)


def completed_q() -> Q:
    """The schedules that are completed (dispatch/lifecycle.py's `completion`, in SQL);
    the queryset must carry `.alias(ends=END_AT_SQL)`."""
    return Q(max_runs__isnull=False, runs_succeeded__gte=F("max_runs")) | Q(ends__lte=Now())


def calendar_names(schedule: Schedule) -> dict[str, list[str]]:
    """`exclude_calendars` / `only_calendars` by name, in the order given (prefetch
    `calendar_links__calendar` for lists; a schedule being created has none yet, and a
    one-off none at all: no query for them, so a batch of jobs costs no read per job)."""
    out: dict[str, list[str]] = {"exclude_calendars": [], "only_calendars": []}
    if schedule._state.adding or schedule.kind == Kind.ONCE:
        return out
    for link in schedule.calendar_links.all():
        out[f"{link.role}_calendars"].append(link.calendar.name)
    return out


def schedule_get(*, tenant: Tenant, schedule_id: uuid.UUID | str) -> Schedule:
    live = Schedule.objects.filter(deleted_at__isnull=True)
    return tenant_object(live, tenant=tenant, pk=schedule_id, what="schedule")


def schedule_list(
    *,
    tenant: Tenant,
    cursor: str | None = None,
    limit: int = 50,
    search: str = "",
    kind: str = "",
    paused: bool | None = None,
    completed: bool | None = None,
) -> Page[Schedule]:
    qs = Schedule.objects.filter(tenant=tenant, deleted_at__isnull=True)
    if completed is not None:
        qs = qs.alias(ends=END_AT_SQL)
        done = completed_q()
        qs = qs.filter(done) if completed else qs.exclude(done)
    if search:
        qs = qs.filter(name__icontains=search)
    if kind:
        if kind not in Kind.values:
            raise InvalidSchedule.field("kind", f"must be one of {', '.join(Kind.values)}")
        qs = qs.filter(kind=kind)
    if paused is not None:
        qs = qs.filter(paused=paused)
    # Each row's output names its tenant and upstreams: fetched with the page, not per row.
    return keyset_page(
        qs.select_related("tenant").prefetch_related("depends_on", "calendar_links__calendar"),
        field="created_at",
        cursor=cursor,
        limit=limit,
    )


def schedule_preview(
    *,
    schedule: Schedule,
    after: datetime,
    count: int,
    filters: dict[uuid.UUID, DateFilter] | None = None,
) -> list[cron.Occurrence]:
    """`count` occurrences after `after`, calendars applied. `filters`: the date filters
    of a whole list, loaded at once by its caller (`schedule_filters`), instead of one
    query per schedule."""
    if schedule.kind == Kind.ONCE:
        run_at = schedule.run_at
        if run_at is None or run_at <= after:
            return []
        local = run_at.astimezone(cron.get_zone(schedule.timezone))
        return [cron.Occurrence(scheduled_for=run_at, local=local, due_at=run_at, note=None)]
    return cron.preview(
        schedule.cron,
        schedule.timezone,
        seed=str(schedule.id),
        after=after,
        count=count,
        jitter_s=schedule.jitter_s,
        dates=filters.get(schedule.id) if filters is not None else schedule_filter(schedule.id),
    )


def schedule_next_runs(
    *,
    schedule: Schedule,
    after: datetime,
    count: int,
    filters: dict[uuid.UUID, DateFilter] | None = None,
) -> list[cron.Occurrence]:
    """The runs a user will see happen: a schedule paused until T runs nothing before T
    (the beat resumes it then), so the occurrences inside the pause are left out."""
    until = schedule.paused_until if schedule.paused else None
    if until is not None and until > after:
        after = until - timedelta(microseconds=1)
    return schedule_preview(schedule=schedule, after=after, count=count, filters=filters)


def schedule_get_including_deleted(*, tenant: Tenant, schedule_id: uuid.UUID | str) -> Schedule:
    """A schedule of the tenant even if soft-deleted (the explainer answers for those too)."""
    return tenant_object(Schedule.objects.all(), tenant=tenant, pk=schedule_id, what="schedule")


# --- the dashboard ----------------------------------------------------------------


def _due_within(*, tenant: Tenant, end: datetime) -> QuerySet[Schedule]:
    """Live, unpaused schedules whose next run is due by `end`, soonest first."""
    return Schedule.objects.filter(
        tenant=tenant,
        deleted_at__isnull=True,
        paused=False,
        next_run_at__isnull=False,
        next_run_at__lte=end,
    ).order_by("next_run_at", "id")


def _occurrences_until(
    schedule: Schedule,
    *,
    now: datetime,
    end: datetime,
    count: int,
    filters: dict[uuid.UUID, DateFilter],
) -> list[cron.Occurrence]:
    """At most `count` of the schedule's occurrences from now (or its overdue next run)
    to `end`."""
    next_run = schedule.next_run_at or now
    after = min(now, next_run) - timedelta(microseconds=1)
    occurrences = schedule_preview(schedule=schedule, after=after, count=count, filters=filters)
    return [occ for occ in occurrences if occ.scheduled_for <= end]


def _per_schedule_max(horizon: timedelta) -> int:
    # A cron fires at most once a minute: no schedule has more occurrences than this.
    return min(int(horizon.total_seconds() // 60) + 1, cron.PREVIEW_MAX)


def upcoming_fires(
    *, tenant: Tenant, now: datetime, horizon: timedelta, limit: int = 50
) -> list[tuple[Schedule, cron.Occurrence]]:
    """Occurrences due within `horizon` of live, unpaused schedules, soonest first."""
    end = now + horizon
    schedules = list(_due_within(tenant=tenant, end=end)[:limit])
    per_schedule = min(limit, _per_schedule_max(horizon))
    filters = schedule_filters(s.id for s in schedules)
    out = [
        (schedule, occ)
        for schedule in schedules
        for occ in _occurrences_until(
            schedule, now=now, end=end, count=per_schedule, filters=filters
        )
    ]
    out.sort(key=lambda pair: (pair[1].due_at, str(pair[0].id)))
    return out[:limit]


@dataclass(frozen=True)
class UpcomingGroup:
    """One schedule's fires within the horizon: the first, how many, and the ones after."""

    schedule: Schedule
    first: cron.Occurrence
    count: int
    then: list[cron.Occurrence]


def upcoming_by_schedule(
    *, tenant: Tenant, now: datetime, horizon: timedelta, limit: int = 20, shown: int = 3
) -> tuple[list[UpcomingGroup], int]:
    """The dashboard's upcoming fires, one row a schedule (an every-minute schedule is
    one row of 60, not 60 rows), soonest first; and how many schedules are due in all."""
    end = now + horizon
    due = _due_within(tenant=tenant, end=end)
    schedules = list(due[:limit])
    filters = schedule_filters(s.id for s in schedules)
    groups = []
    for schedule in schedules:
        occurrences = _occurrences_until(
            schedule, now=now, end=end, count=_per_schedule_max(horizon), filters=filters
        )
        if occurrences:
            groups.append(
                UpcomingGroup(
                    schedule=schedule,
                    first=occurrences[0],
                    count=len(occurrences),
                    then=occurrences[1 : 1 + shown],
                )
            )
    total = len(schedules) if len(schedules) < limit else due.count()
    return groups, total


UPCOMING_COUNT_CAP = 2_000
COUNT_CHUNK = 500


def upcoming_count(*, tenant: Tenant, now: datetime, horizon: timedelta) -> tuple[int, bool]:
    """How many occurrences `upcoming_fires` would list without its limit, and whether
    the count stopped at UPCOMING_COUNT_CAP (a dashboard must say "50 of 426", not stop
    silently at 50, yet not expand every schedule of a huge tenant on each refresh)."""
    end = now + horizon
    per_schedule = _per_schedule_max(horizon)
    total = 0
    rows = _due_within(tenant=tenant, end=end).iterator(chunk_size=COUNT_CHUNK)
    while True:
        chunk = list(islice(rows, COUNT_CHUNK))
        if not chunk:
            return total, False
        # The chunk's calendars in one query, not one per schedule.
        filters = schedule_filters(s.id for s in chunk)
        for schedule in chunk:
            room = UPCOMING_COUNT_CAP - total
            total += len(
                _occurrences_until(
                    schedule, now=now, end=end, count=min(room, per_schedule), filters=filters
                )
            )
            if total >= UPCOMING_COUNT_CAP:
                return UPCOMING_COUNT_CAP, True


def last_executions(
    *, tenant: Tenant, schedule_ids: list[uuid.UUID], started: bool = False
) -> dict[uuid.UUID, Execution]:
    """The latest execution of each schedule: one query (DISTINCT ON) per window of days,
    newest first (reading_windows), for the schedules not found in a newer one.
    `started`: the latest that has run or is running (a schedule's "last run"), not an
    upcoming one still waiting (NOT_STARTED_STATES) — a job's own execution is whatever
    state it is in, a schedule's last run is never its next."""
    found: dict[uuid.UUID, Execution] = {}
    missing = set(schedule_ids)
    base = Execution.objects.filter(tenant=tenant)
    if started:
        base = base.exclude(state__in=state_values(NOT_STARTED_STATES))
    # Every day held: a schedule's last run may be of any of them.
    for lo, hi in reading_windows(ExecutionFilter(), every_day=True)(None):
        if not missing:
            break
        rows = within(
            base.filter(schedule_id__in=missing),
            field="scheduled_for",
            lo=lo,
            hi=hi,
        )
        for e in rows.order_by("schedule_id", "-scheduled_for").distinct("schedule_id"):
            found[e.schedule_id] = e
            missing.discard(e.schedule_id)
    return found


def schedule_history(*, tenant: Tenant, schedule: Schedule, limit: int = 50) -> list[Execution]:
    """The schedule's newest executions (read as the runs page reads them: by windows of
    days), however old: a schedule that seldom runs still shows its last ones."""
    flt = ExecutionFilter(schedule_id=schedule.id)
    return execution_list(tenant=tenant, limit=limit, flt=flt, every_day=True).items


def schedule_upstreams(*, schedule: Schedule) -> list[Schedule]:
    """The live schedules `schedule` depends on, by name."""
    return list(schedule.depends_on.filter(deleted_at__isnull=True).order_by("name"))


def schedule_dependents(*, tenant: Tenant, schedule: Schedule) -> list[Schedule]:
    return list(
        Schedule.objects.filter(
            tenant=tenant, deleted_at__isnull=True, depends_on=schedule
        ).order_by("name")
    )


PICK_LIMIT = 20


def schedule_search(
    *, tenant: Tenant, q: str, limit: int = PICK_LIMIT, exclude: uuid.UUID | None = None
) -> tuple[list[Schedule], bool]:
    """Live schedules whose name contains `q` (or whose id is `q`), names starting
    with it first; at most `limit`, and whether there are more. The console's
    pickers search with this instead of listing every schedule of the tenant."""
    qs = Schedule.objects.filter(tenant=tenant, deleted_at__isnull=True)
    if exclude is not None:
        qs = qs.exclude(pk=exclude)
    q = q.strip()
    if q:
        pk = as_uuid(q)
        qs = qs.filter(Q(name__icontains=q) | Q(pk=pk)) if pk else qs.filter(name__icontains=q)
        qs = qs.annotate(
            prefix=Case(When(name__istartswith=q, then=Value(0)), default=Value(1))
        ).order_by("prefix", "name", "id")
    else:
        qs = qs.order_by("name", "id")
    rows = list(qs[: limit + 1])
    return rows[:limit], len(rows) > limit


def schedule_resolve(*, tenant: Tenant, ref: str, include_deleted: bool = False) -> Schedule | None:
    """The tenant's schedule a user typed: its id, its exact name, or a name that
    matches one live schedule ignoring case. None when nothing (or several) match."""
    ref = ref.strip()
    if not ref:
        return None
    pk = as_uuid(ref)
    if pk is not None:
        by_id = Schedule.objects.filter(tenant=tenant, pk=pk)
        if not include_deleted:
            by_id = by_id.filter(deleted_at__isnull=True)
        found = by_id.first()
        if found is not None:
            return found
    live = Schedule.objects.filter(tenant=tenant, deleted_at__isnull=True)
    exact = live.filter(name=ref).first()
    if exact is not None:
        return exact
    loose = list(live.filter(name__iexact=ref)[:2])
    return loose[0] if len(loose) == 1 else None
