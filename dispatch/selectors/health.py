"""Schedule health: last run, success rate and durations per window, failure streaks,
the status grid's cells, and the tenant dashboard's triage lists.

What counts (one definition, shared by the API, the console and the tests):
- An occurrence counts once it is final with an outcome: `succeeded` (a success) or
  `dead` (a failure: its retries are spent, a timed-out last attempt ends `dead` too).
  `failed` and `timed_out` are attempts on the way to a retry or to `dead`, so they
  are not counted yet (counting them would count one occurrence twice).
- `skipped` and `cancelled` are neither: a paused, held or cancelled run says nothing
  about whether the job works, and must not trip a failure streak.
- Windows (24 h, 7 d, 30 d) are by occurrence time (`scheduled_for`), from
  `now - window` inclusive to `now` inclusive. Success rate = succeeded / (succeeded +
  dead), None with no counted run. Durations are `finished_at - started_at` of the
  counted runs, nearest-rank p50/p95 (`percentile_disc`: an observed duration).
- Each schedule reads at most HEALTH_SCAN counted rows of its 30 days (`sampled` says
  the cap cut the window: a minute cron has 43,200 in 30 days), so one page of 50
  schedules reads a bounded number of index rows.
- Consecutive failures: `dead` occurrences newer than the latest success (skipped and
  cancelled ones in between are ignored), at most HEALTH_SCAN (`streak_capped`).
- Current alert state (the alert decision's fields, dispatch/sql/alerts.sql): failing
  (a failure alert went out and no success followed), snoozed until (a future
  `alert_snoozed_until` only), auto-paused (paused by the circuit breaker,
  AUTO_PAUSE_ACTOR, with its machine note), and the newest alert sent (kind, time).
  An auto-paused schedule ranks as failing until a person resumes it.

Every read is one statement for a whole list of schedules (no per-schedule loop).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Q

from core.db import generic_plans
from core.replicas import reads
from dispatch.alerting.lateness import late_now
from dispatch.models import Schedule
from dispatch.selectors.calendars import schedule_filters
from dispatch.selectors.schedules import schedule_next_runs
from dispatch.sql import sql
from dispatch.states import (
    AUTO_PAUSE_ACTOR,
    NOT_STARTED_STATES,
    AlertState,
    ExecutionState,
    state_values,
)
from tenants.models import Tenant

HEALTH_SCAN = 1000
# (label, length): the API's and the console's windows, in this order.
WINDOWS: tuple[tuple[str, timedelta], ...] = (
    ("24h", timedelta(hours=1 * 24)),
    ("7d", timedelta(days=7)),
    ("30d", timedelta(days=30)),
)
SUCCESS = ExecutionState.SUCCEEDED
FINAL_FAILURE = ExecutionState.DEAD
# Not run yet: not a "last run" (the same rule as the schedules list's, last_executions).
WAITING_STATES = state_values(NOT_STARTED_STATES)
# The dashboard's grid: this many schedules, the newest executions read to find them.
DASHBOARD_ROWS = 50
ACTIVE_SCAN = 5000
TRIAGE_LIMIT = 50


@dataclass(frozen=True)
class WindowStats:
    runs: int  # counted (succeeded + dead)
    succeeded: int
    p50_s: float | None
    p95_s: float | None

    @property
    def failed(self) -> int:
        return self.runs - self.succeeded

    @property
    def success_rate(self) -> float | None:
        return None if self.runs == 0 else self.succeeded / self.runs


@dataclass(frozen=True)
class ScheduleHealth:
    schedule_id: uuid.UUID
    last_state: str | None
    last_at: datetime | None
    last_finished_at: datetime | None
    next_run_at: datetime | None
    windows: dict[str, WindowStats]
    sampled: bool
    consecutive_failures: int
    streak_capped: bool
    last_success_at: datetime | None
    alert: AlertStatus


@dataclass(frozen=True)
class AlertStatus:
    failing: bool
    snoozed_until: datetime | None
    auto_paused: bool
    auto_pause_note: str | None  # the breaker's reason ("auto-paused after 5 ...")
    last_alert_kind: str | None  # an AlertKind, of the newest alert sent
    last_alert_at: datetime | None


def is_auto_paused(schedule: Schedule) -> bool:
    return schedule.paused and schedule.paused_by == AUTO_PAUSE_ACTOR


def _alert_status(s: Schedule, row: Any, now: datetime) -> AlertStatus:
    auto = is_auto_paused(s)
    snoozed = s.alert_snoozed_until
    return AlertStatus(
        failing=s.alert_failing,
        snoozed_until=snoozed if snoozed is not None and snoozed > now else None,
        auto_paused=auto,
        auto_pause_note=(s.paused_reason or None) if auto else None,
        last_alert_kind=row.last_alert_kind,
        last_alert_at=row.last_alert_at,
    )


def _params(tenant: Tenant, now: datetime, **extra: Any) -> dict[str, Any]:
    return {
        "tenant_id": tenant.pk,
        "now": now,
        "ok": SUCCESS.value,
        "bad": FINAL_FAILURE.value,
        "scan": HEALTH_SCAN,
        "sent": AlertState.SENT.value,
        "auto_actor": AUTO_PAUSE_ACTOR,
        **{f"since_{label}": now - length for label, length in WINDOWS},
        **extra,
    }


def schedule_health_many(
    *, tenant: Tenant, schedules: list[Schedule], now: datetime
) -> dict[uuid.UUID, ScheduleHealth]:
    """The health of each of `schedules` (of `tenant`), in one statement."""
    if not schedules:
        return {}
    # Its last run, last success and failure streak read every day (a schedule may run
    # once a year); its 30 days are pruned by value: kept generic, the plan is made once
    # per connection (170 ms a page at 253 days otherwise, 15-20 ms with it).
    source = reads()
    with generic_plans(source):
        rows = sql.rows(
            "schedule_health",
            _params(tenant, now, ids=[s.id for s in schedules], waiting=WAITING_STATES),
            using=source,
        )
    by_id = {s.id: s for s in schedules}
    found: dict[uuid.UUID, ScheduleHealth] = {}
    for r in rows:
        found[r.schedule_id] = ScheduleHealth(
            schedule_id=r.schedule_id,
            last_state=r.last_state,
            last_at=r.last_at,
            last_finished_at=r.last_finished_at,
            next_run_at=by_id[r.schedule_id].next_run_at,
            windows={
                label: WindowStats(
                    runs=getattr(r, f"runs_{label}"),
                    succeeded=getattr(r, f"ok_{label}"),
                    p50_s=getattr(r, f"p50_{label}"),
                    p95_s=getattr(r, f"p95_{label}"),
                )
                for label, _ in WINDOWS
            },
            sampled=r.sampled,
            consecutive_failures=r.consecutive_failures,
            streak_capped=r.streak_capped,
            last_success_at=r.last_success_at,
            alert=_alert_status(by_id[r.schedule_id], r, now),
        )
    return found


def schedule_health(*, tenant: Tenant, schedule: Schedule, now: datetime) -> ScheduleHealth:
    return schedule_health_many(tenant=tenant, schedules=[schedule], now=now)[schedule.id]


@dataclass(frozen=True)
class HealthRank:
    schedule: Schedule
    consecutive_failures: int
    failures_24h: int


def schedules_by_health(
    *, tenant: Tenant, now: datetime, limit: int, failing_only: bool = False, full: bool = True
) -> list[HealthRank]:
    """The tenant's live schedules least healthy first (see schedule_health_rank; an
    auto-paused schedule counts as failing, `failing_only` included): the
    `limit` first only. Ranking needs every schedule's streak, so it cannot be a keyset
    page of an index; it is a bounded triage list instead. `full` loads what the API's
    output of a schedule needs (its tenant and upstreams)."""
    rows = sql.rows(
        "schedule_health_rank",
        _params(tenant, now, limit=limit, failing_only=failing_only),
        using=reads(),
    )
    by_id = (
        Schedule.objects.select_related("tenant")
        .prefetch_related("depends_on", "calendar_links__calendar")
        .in_bulk([r.schedule_id for r in rows])
    )
    return [
        HealthRank(
            schedule=by_id[r.schedule_id],
            consecutive_failures=r.consecutive_failures,
            failures_24h=r.failures_24h,
        )
        for r in rows
        if r.schedule_id in by_id
    ]


# --- The status grid ---


@dataclass(frozen=True)
class GridCell:
    """One occurrence: a past execution (`execution_id` set) or an upcoming fire."""

    scheduled_for: datetime
    outcome: str  # a key of OUTCOMES
    state: str | None
    execution_id: uuid.UUID | None
    detail: str  # the reason of a skip/cancel, the HTTP status or exit code of a run


@dataclass
class GridRow:
    schedule: Schedule
    cells: list[GridCell] = field(default_factory=list)
    health: ScheduleHealth | None = None


# Outcome → (label, symbol): the symbol tells the cells apart without colour.
OUTCOMES: dict[str, tuple[str, str]] = {
    "succeeded": ("succeeded", "✓"),
    "failed": ("failed", "✗"),
    "retrying": ("failed, retrying", "!"),
    "skipped": ("skipped", "↷"),
    "cancelled": ("cancelled", "⊘"),
    "running": ("running", "▶"),
    "pending": ("waiting to run", "…"),
    "upcoming": ("upcoming", "○"),
}
_OUTCOME_OF_STATE = {
    ExecutionState.SUCCEEDED: "succeeded",
    ExecutionState.DEAD: "failed",
    ExecutionState.FAILED: "retrying",
    ExecutionState.TIMED_OUT: "retrying",
    ExecutionState.RETRY_SCHEDULED: "retrying",
    ExecutionState.SKIPPED: "skipped",
    ExecutionState.CANCELLED: "cancelled",
    ExecutionState.RUNNING: "running",
    ExecutionState.SCHEDULED: "pending",
    ExecutionState.QUEUED: "pending",
}


def _detail(row: Any) -> str:
    if row.reason:
        return str(row.reason)
    if row.status_code is not None:
        return f"HTTP {row.status_code}"
    if row.exit_code is not None:
        return f"exit {row.exit_code}"
    return ""


def status_grid(
    *, tenant: Tenant, schedules: list[Schedule], now: datetime, past: int, future: int
) -> list[GridRow]:
    """A row per schedule: its newest `past` executions (one query for every row) and
    its next `future` occurrences (computed from the definition; one query for every
    row's calendars)."""
    grid = {s.id: GridRow(schedule=s) for s in schedules}
    if schedules:
        rows = sql.rows(
            "status_grid_cells",
            {
                "tenant_id": tenant.pk,
                "ids": list(grid),
                "until": now,
                "per_schedule": past,
            },
            using=reads(),
        )
        for r in rows:
            grid[r.schedule_id].cells.append(
                GridCell(
                    scheduled_for=r.scheduled_for,
                    outcome=_OUTCOME_OF_STATE.get(ExecutionState(r.state), "pending"),
                    state=r.state,
                    execution_id=r.id,
                    detail=_detail(r),
                )
            )
    # Every row's calendars in one query (the occurrences themselves need none).
    filters = schedule_filters(s.id for s in schedules) if future else {}
    for s in schedules:
        # Paused with no end: nothing is upcoming (paused until T: from T on).
        if future and not (s.paused and s.paused_until is None):
            for o in schedule_next_runs(schedule=s, after=now, count=future, filters=filters):
                grid[s.id].cells.append(
                    GridCell(
                        scheduled_for=o.scheduled_for,
                        outcome="upcoming",
                        state=None,
                        execution_id=None,
                        detail=o.note or "",
                    )
                )
    return list(grid.values())


def recently_active_schedules(*, tenant: Tenant, now: datetime, limit: int) -> list[Schedule]:
    """The `limit` schedules with the newest executions (the dashboard's grid rows)."""
    rows = sql.rows(
        "recently_active_schedules",
        {"tenant_id": tenant.pk, "now": now, "scan": ACTIVE_SCAN, "limit": limit},
        using=reads(),
    )
    by_id = Schedule.objects.in_bulk([r.schedule_id for r in rows])
    return [by_id[r.schedule_id] for r in rows if r.schedule_id in by_id]


@dataclass(frozen=True)
class HealthDashboard:
    failing: list[HealthRank]
    failing_capped: bool
    # Late occurrences (dispatch/alerting/lateness.py's rule), the longest-late first.
    late: list[Any]
    late_capped: bool
    paused: list[Schedule]
    paused_total: int
    auto_paused: list[Schedule]  # by the circuit breaker: paused_reason is its note
    auto_paused_total: int
    snoozed: list[Schedule]  # alerts snoozed until a future time, soonest end first
    snoozed_total: int
    schedules_total: int
    grid: list[GridRow]


def health_dashboard(*, tenant: Tenant, now: datetime, grid_past: int) -> HealthDashboard:
    """The tenant dashboard's health: failing now, late now, paused (with reasons), auto-paused,
    snoozed, counts, and a status grid of the most recently active schedules. A fixed
    number of queries, each list bounded by TRIAGE_LIMIT."""
    failing = schedules_by_health(tenant=tenant, now=now, limit=TRIAGE_LIMIT + 1, failing_only=True)
    late = late_now(tenant=tenant, limit=TRIAGE_LIMIT + 1)
    live = Schedule.objects.filter(tenant=tenant, deleted_at__isnull=True)
    paused_qs = live.filter(paused=True)
    auto = Q(paused=True, paused_by=AUTO_PAUSE_ACTOR)
    snoozed = Q(alert_snoozed_until__gt=now)
    # Aliases unlike the fields: an alias named "paused" would shadow the field the
    # other filters read.
    counts = live.aggregate(
        n_total=Count("id"),
        n_paused=Count("id", filter=Q(paused=True)),
        n_auto_paused=Count("id", filter=auto),
        n_snoozed=Count("id", filter=snoozed),
    )
    active = recently_active_schedules(tenant=tenant, now=now, limit=DASHBOARD_ROWS)
    grid = status_grid(tenant=tenant, schedules=active, now=now, past=grid_past, future=3)
    health = schedule_health_many(tenant=tenant, schedules=active, now=now)
    for row in grid:
        row.health = health.get(row.schedule.id)
    return HealthDashboard(
        failing=failing[:TRIAGE_LIMIT],
        failing_capped=len(failing) > TRIAGE_LIMIT,
        late=late[:TRIAGE_LIMIT],
        late_capped=len(late) > TRIAGE_LIMIT,
        paused=list(paused_qs.order_by("-paused_at", "-id")[:TRIAGE_LIMIT]),
        paused_total=counts["n_paused"],
        auto_paused=list(live.filter(auto).order_by("-paused_at", "-id")[:TRIAGE_LIMIT]),
        auto_paused_total=counts["n_auto_paused"],
        snoozed=list(live.filter(snoozed).order_by("alert_snoozed_until", "id")[:TRIAGE_LIMIT]),
        snoozed_total=counts["n_snoozed"],
        schedules_total=counts["n_total"],
        grid=grid,
    )


# The activity chart: hours shown, and the executions read at most to draw them.
ACTIVITY_HOURS = 24
ACTIVITY_SCAN = 20_000
ACTIVITY_FAILURES = [
    ExecutionState.FAILED.value,
    ExecutionState.TIMED_OUT.value,
    ExecutionState.DEAD.value,
]


@dataclass(frozen=True)
class HourActivity:
    hour: datetime
    ok: int
    bad: int
    other: int
    p95_s: float | None
    lag_p95_s: float | None

    @property
    def runs(self) -> int:
        return self.ok + self.bad + self.other


@dataclass(frozen=True)
class Activity:
    """Every hour of the window (empty hours included, oldest first); `sampled` when
    the scan cap cut the window short, so the oldest hours may be undercounted."""

    hours: list[HourActivity]
    sampled: bool


def activity_by_hour(
    *, tenant: Tenant, now: datetime, schedule: Schedule | None = None
) -> Activity:
    """Runs per hour of the last ACTIVITY_HOURS by outcome (succeeded; failed, timed out
    or dead; anything else), with p95 duration and fire lag: the dashboard's and a
    schedule page's chart."""
    end = now.replace(minute=0, second=0, microsecond=0)
    first = end - timedelta(hours=ACTIVITY_HOURS - 1)
    rows = sql.rows(
        "activity_by_hour",
        {
            "tenant_id": tenant.pk,
            "schedule_id": schedule.pk if schedule else None,
            "since": first,
            "now": now,
            "scan": ACTIVITY_SCAN,
            "ok": SUCCESS.value,
            "bad": ACTIVITY_FAILURES,
        },
        using=reads(),
    )
    found = {r.hour: r for r in rows}
    hours = []
    for i in range(ACTIVITY_HOURS):
        hour = first + timedelta(hours=i)
        r = found.get(hour)
        hours.append(
            HourActivity(
                hour=hour,
                ok=r.ok if r else 0,
                bad=r.bad if r else 0,
                other=r.other if r else 0,
                p95_s=float(r.p95_s) if r and r.p95_s is not None else None,
                lag_p95_s=float(r.lag_p95_s) if r and r.lag_p95_s is not None else None,
            )
        )
    return Activity(hours=hours, sampled=bool(rows) and rows[0].read >= ACTIVITY_SCAN)
