"""Reads of the dispatch app. Every query starts from the tenant (fails closed)."""

from __future__ import annotations

import base64
import binascii
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar

from django.db.models import Case, Count, Max, Model, Q, QuerySet, Value, When

from dispatch.exceptions import InvalidSchedule, NotFound
from dispatch.models import (
    BeatNode,
    Execution,
    ExecutionEvent,
    ExecutionState,
    Kind,
    Schedule,
    SchedulerPartition,
    Trigger,
)
from dispatch.queues import ALL_QUEUES
from dispatch.sql import sql
from dispatch.states import IN_FLIGHT_STATES
from dispatch.timing import cron
from tenants.models import Tenant, TenantQuota

T = TypeVar("T")
M = TypeVar("M", bound=Model)
MAX_PAGE = 500


@dataclass
class Page(Generic[T]):
    items: list[T]
    next_cursor: str | None


def _encode_cursor(at: datetime, pk: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(f"{at.isoformat()}|{pk}".encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        at, pk = raw.split("|", 1)
        parsed = datetime.fromisoformat(at)
        if parsed.tzinfo is None:
            raise ValueError("naive")
        return parsed, uuid.UUID(pk)
    except (ValueError, UnicodeDecodeError, binascii.Error):
        raise InvalidSchedule.field("cursor", "is not a cursor this API returned") from None


def _keyset(qs: QuerySet[M], *, field: str, cursor: str | None, limit: int) -> Page[M]:
    """Keyset pagination on (field desc, id desc): each page costs the same, however deep."""
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidSchedule.field("limit", f"must be in 1..{MAX_PAGE}")
    if cursor:
        at, pk = _decode_cursor(cursor)
        # The redundant `field <= at` is the index bound: the OR alone can only be
        # a filter, so deep pages would walk every row above the cursor.
        qs = qs.filter(
            Q(**{f"{field}__lte": at}), Q(**{f"{field}__lt": at}) | Q(**{field: at, "id__lt": pk})
        )
    rows = list(qs.order_by(f"-{field}", "-id")[: limit + 1])
    items = rows[:limit]
    nxt = None
    if len(rows) > limit:
        last = items[-1]
        nxt = _encode_cursor(getattr(last, field), last.id)  # type: ignore[attr-defined]
    return Page(items=items, next_cursor=nxt)


def as_uuid(value: uuid.UUID | str) -> uuid.UUID | None:
    """A path id as a UUID, or None: a malformed id is just another id that does not exist."""
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


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
    }


def schedule_get(*, tenant: Tenant, schedule_id: uuid.UUID | str) -> Schedule:
    pk = as_uuid(schedule_id)
    schedule = (
        Schedule.objects.filter(tenant=tenant, deleted_at__isnull=True, pk=pk).first()
        if pk
        else None
    )
    if schedule is None:
        raise NotFound("schedule not found")
    return schedule


def schedule_list(
    *,
    tenant: Tenant,
    cursor: str | None = None,
    limit: int = 50,
    search: str = "",
    kind: str = "",
    paused: bool | None = None,
) -> Page[Schedule]:
    qs = Schedule.objects.filter(tenant=tenant, deleted_at__isnull=True)
    if search:
        qs = qs.filter(name__icontains=search)
    if kind:
        if kind not in Kind.values:
            raise InvalidSchedule.field("kind", f"must be one of {', '.join(Kind.values)}")
        qs = qs.filter(kind=kind)
    if paused is not None:
        qs = qs.filter(paused=paused)
    # Each row's output names its tenant and upstreams: fetched with the page, not per row.
    return _keyset(
        qs.select_related("tenant").prefetch_related("depends_on"),
        field="created_at",
        cursor=cursor,
        limit=limit,
    )


def execution_list(
    *,
    tenant: Tenant,
    cursor: str | None = None,
    limit: int = 50,
    schedule_id: str | None = None,
    status: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> Page[Execution]:
    qs = Execution.objects.filter(tenant=tenant)
    if schedule_id:
        try:
            qs = qs.filter(schedule_id=uuid.UUID(schedule_id))
        except ValueError:
            raise InvalidSchedule.field("schedule_id", "is not a schedule id") from None
    if status:
        states = status.split(",")
        bad = [s for s in states if s not in ExecutionState.values]
        if bad:
            raise InvalidSchedule.field(
                "status", f"unknown state {bad[0]!r}; one of {', '.join(ExecutionState.values)}"
            )
        qs = qs.filter(state__in=states)
    if since:
        qs = qs.filter(scheduled_for__gte=since)
    if until:
        qs = qs.filter(scheduled_for__lt=until)
    return _keyset(qs, field="scheduled_for", cursor=cursor, limit=limit)


def execution_get(*, tenant: Tenant, execution_id: uuid.UUID | str) -> Execution:
    pk = as_uuid(execution_id)
    execution = (
        Execution.objects.select_related("schedule").filter(tenant=tenant, pk=pk).first()
        if pk
        else None
    )
    if execution is None:
        raise NotFound("execution not found")
    return execution


def execution_events(*, execution: Execution) -> QuerySet[ExecutionEvent]:
    return ExecutionEvent.objects.filter(
        tenant_id=execution.tenant_id, execution=execution
    ).order_by("at", "id")


@dataclass
class TimelineItem:
    at: datetime
    kind: str
    message: str
    actor: str = ""
    data: Any = None


def execution_timeline(
    *, execution: Execution, events: list[ExecutionEvent] | None = None
) -> list[TimelineItem]:
    """The execution's steps in time order: its row's timestamps (scheduled, due,
    published, started, finished) merged with its events. The console and the API
    show the same list."""
    if events is None:
        events = list(execution_events(execution=execution))
    items: list[TimelineItem] = [
        TimelineItem(execution.created_at, "created", f"record created ({execution.trigger})"),
        TimelineItem(
            execution.scheduled_for, "scheduled", "nominal occurrence time (scheduled_for)"
        ),
    ]
    jitter = (execution.due_at - execution.scheduled_for).total_seconds()
    if jitter:
        items.append(TimelineItem(execution.due_at, "due", f"due after {jitter:g} s of jitter"))
    if execution.enqueued_at:
        items.append(
            TimelineItem(
                execution.enqueued_at,
                "published",
                f"published to queue {execution.queue or '?'}",
            )
        )
    if execution.republished_at:
        items.append(
            TimelineItem(
                execution.republished_at, "republished", "published again (the broker lost it)"
            )
        )
    if execution.started_at:
        items.append(TimelineItem(execution.started_at, "started", "last attempt started"))
    if execution.finished_at:
        items.append(
            TimelineItem(execution.finished_at, "finished", f"finished: {execution.state}")
        )
    for ev in events:
        items.append(TimelineItem(ev.at, ev.kind, ev.message, ev.actor, ev.data))
    # Stable: at equal times the row's own steps come before the events.
    items.sort(key=lambda i: i.at)
    return items


def schedule_preview(*, schedule: Schedule, after: datetime, count: int) -> list[cron.Occurrence]:
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
    )


def schedule_next_runs(*, schedule: Schedule, after: datetime, count: int) -> list[cron.Occurrence]:
    """The runs a user will see happen: a schedule paused until T runs nothing before T
    (the beat resumes it then), so the occurrences inside the pause are left out."""
    until = schedule.paused_until if schedule.paused else None
    if until is not None and until > after:
        after = until - timedelta(microseconds=1)
    return schedule_preview(schedule=schedule, after=after, count=count)


def schedule_get_including_deleted(*, tenant: Tenant, schedule_id: uuid.UUID | str) -> Schedule:
    """A schedule of the tenant even if soft-deleted (the explainer answers for those too)."""
    pk = as_uuid(schedule_id)
    schedule = Schedule.objects.filter(tenant=tenant, pk=pk).first() if pk else None
    if schedule is None:
        raise NotFound("schedule not found")
    return schedule


# --- console reads -------------------------------------------------------------------


def upcoming_fires(
    *, tenant: Tenant, now: datetime, horizon: timedelta, limit: int = 50
) -> list[tuple[Schedule, cron.Occurrence]]:
    """Occurrences due within `horizon` of live, unpaused schedules, soonest first."""
    end = now + horizon
    schedules = list(
        Schedule.objects.filter(
            tenant=tenant,
            deleted_at__isnull=True,
            paused=False,
            next_run_at__isnull=False,
            next_run_at__lte=end,
        ).order_by("next_run_at", "id")[:limit]
    )
    out: list[tuple[Schedule, cron.Occurrence]] = []
    per_schedule = min(limit, int(horizon.total_seconds() // 60) + 1, cron.PREVIEW_MAX)
    for schedule in schedules:
        next_run = schedule.next_run_at or now
        after = min(now, next_run) - timedelta(microseconds=1)
        for occ in schedule_preview(schedule=schedule, after=after, count=per_schedule):
            if occ.scheduled_for > end:
                break
            out.append((schedule, occ))
    out.sort(key=lambda pair: (pair[1].due_at, str(pair[0].id)))
    return out[:limit]


UPCOMING_COUNT_CAP = 2_000


def upcoming_count(*, tenant: Tenant, now: datetime, horizon: timedelta) -> tuple[int, bool]:
    """How many occurrences `upcoming_fires` would list without its limit, and whether
    the count stopped at UPCOMING_COUNT_CAP (a dashboard must say "50 of 426", not stop
    silently at 50, yet not expand every schedule of a huge tenant on each refresh)."""
    end = now + horizon
    due = Schedule.objects.filter(
        tenant=tenant,
        deleted_at__isnull=True,
        paused=False,
        next_run_at__isnull=False,
        next_run_at__lte=end,
    ).order_by("next_run_at", "id")
    # A cron fires at most once a minute: no schedule has more occurrences than this.
    per_schedule = min(int(horizon.total_seconds() // 60) + 1, cron.PREVIEW_MAX)
    total = 0
    for schedule in due.iterator(chunk_size=500):
        next_run = schedule.next_run_at or now
        after = min(now, next_run) - timedelta(microseconds=1)
        room = UPCOMING_COUNT_CAP - total
        for occ in schedule_preview(schedule=schedule, after=after, count=min(room, per_schedule)):
            if occ.scheduled_for > end:
                break
            total += 1
        if total >= UPCOMING_COUNT_CAP:
            return UPCOMING_COUNT_CAP, True
    return total, False


def executions_running(*, tenant: Tenant, limit: int = 20) -> list[Execution]:
    return list(
        Execution.objects.select_related("schedule")
        .filter(tenant=tenant, state=ExecutionState.RUNNING)
        .order_by("-started_at", "-id")[:limit]
    )


def executions_troubled(*, tenant: Tenant, since: datetime, limit: int = 20) -> list[Execution]:
    """Recent failures: dead, failed, timed out, or failed once and waiting to retry."""
    return list(
        Execution.objects.select_related("schedule")
        .filter(tenant=tenant, scheduled_for__gte=since)
        .filter(
            Q(state__in=[ExecutionState.DEAD, ExecutionState.FAILED, ExecutionState.TIMED_OUT])
            | (Q(state=ExecutionState.RETRY_SCHEDULED) & ~Q(error=""))
        )
        .order_by("-scheduled_for", "-id")[:limit]
    )


@dataclass
class Usage:
    inflight: int
    max_concurrent: int | None
    today: int
    max_per_day: int | None


def tenant_usage(*, tenant: Tenant, day_start: datetime) -> Usage:
    """Queued+running against the concurrency cap; today's executions against the daily quota."""
    counts = Execution.objects.filter(tenant=tenant).aggregate(
        inflight=Count("id", filter=Q(state__in=IN_FLIGHT_STATES)),
        today=Count(
            "id",
            filter=Q(scheduled_for__gte=day_start)
            & ~Q(state__in=[ExecutionState.SKIPPED, ExecutionState.CANCELLED]),
        ),
    )
    quota = TenantQuota.objects.filter(tenant=tenant).first()
    return Usage(
        inflight=int(counts["inflight"] or 0),
        max_concurrent=quota.max_concurrent if quota else None,
        today=int(counts["today"] or 0),
        max_per_day=quota.max_executions_per_day if quota else None,
    )


def last_executions(*, tenant: Tenant, schedule_ids: list[uuid.UUID]) -> dict[uuid.UUID, Execution]:
    """The latest execution of each schedule, in one query (DISTINCT ON)."""
    if not schedule_ids:
        return {}
    rows = (
        Execution.objects.filter(tenant=tenant, schedule_id__in=schedule_ids)
        .order_by("schedule_id", "-scheduled_for")
        .distinct("schedule_id")
    )
    return {e.schedule_id: e for e in rows}


def schedule_history(*, tenant: Tenant, schedule: Schedule, limit: int = 50) -> list[Execution]:
    return list(
        Execution.objects.filter(tenant=tenant, schedule=schedule).order_by(
            "-scheduled_for", "-id"
        )[:limit]
    )


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


# --- platform operators (cross-tenant, staff only) -----------------------------------------


# Fire lag measures how promptly the beat publishes what falls due. Catch-up runs
# (missed occurrences fired late on purpose, e.g. after a pause) and manual runs
# are not timed occurrences: they are counted apart, not in the percentiles.
LAG_EXCLUDED_TRIGGERS = (Trigger.CATCH_UP, Trigger.MANUAL)


def ops_fire_lag(*, since: datetime) -> dict[str, float | int | None]:
    """p50 / p99 / max of enqueued_at - due_at (seconds) for executions published since
    `since`, without catch-up and manual runs (`excluded` counts those)."""
    params = {"excluded": [str(t.value) for t in LAG_EXCLUDED_TRIGGERS], "since": since}
    row = sql.rows("ops_fire_lag", params)[0]  # aggregates: always one row
    count, p50, p99, worst, excluded = row.timed, row.p50, row.p99, row.worst, row.excluded
    return {
        "count": int(count),
        "p50": float(p50) if p50 is not None else None,
        "p99": float(p99) if p99 is not None else None,
        "max": float(worst) if worst is not None else None,
        "excluded": int(excluded),
    }


def ops_dead(*, limit: int = 50) -> list[Execution]:
    return list(
        Execution.objects.select_related("schedule", "tenant")
        .filter(state=ExecutionState.DEAD)
        .order_by("-finished_at", "-id")[:limit]
    )


def ops_tenants() -> list[Tenant]:
    return list(
        Tenant.objects.select_related("quota")
        .annotate(
            live_schedules=Count(
                "schedules", filter=Q(schedules__deleted_at__isnull=True), distinct=True
            )
        )
        .order_by("slug")
    )


def ops_beats() -> list[BeatNode]:
    return list(BeatNode.objects.order_by("stopped_at", "name")[:200])


def ops_partitions() -> list[SchedulerPartition]:
    return list(SchedulerPartition.objects.order_by("number"))


@dataclass
class WorkerSeen:
    name: str
    last_claim_at: datetime
    claims: int
    running: int


def ops_workers(*, since: datetime) -> list[WorkerSeen]:
    """Workers as the database saw them: who claimed work since `since`, and who holds a lease now.

    Every claim records its worker in lease_owner, so this needs no extra
    heartbeat channel; an idle worker shows up again with its next claim.
    """
    rows = (
        Execution.objects.filter(started_at__gte=since)
        .exclude(lease_owner="")
        .values("lease_owner")
        .annotate(
            last=Max("started_at"),
            claims=Count("id"),
            running=Count("id", filter=Q(state=ExecutionState.RUNNING)),
        )
        .order_by("-last")
    )
    return [WorkerSeen(r["lease_owner"], r["last"], r["claims"], r["running"]) for r in rows[:100]]


# --- what a schedule means and would do (the console's pages and the API) -----------


@dataclass(frozen=True)
class CronText:
    description: str  # in words, e.g. "at 02:17 every day"
    resolved: str  # the expression with its H values filled in for this schedule


def cron_text(expr: str, *, seed: uuid.UUID | str) -> CronText:
    """A cron expression's description and resolved form for one schedule (its id
    seeds the H values). The API's preview and the console build both from this."""
    return CronText(
        description=cron.describe(expr, seed=str(seed)), resolved=cron.resolve(expr, seed=str(seed))
    )


PREVIEW_COUNT = 10


@dataclass
class PreviewRow:
    scheduled_for: datetime
    due_at: datetime
    note: str | None
    change: str = ""  # "", "added", "removed"


def definition_preview(
    values: dict[str, Any], *, seed: uuid.UUID, schedule: Schedule | None, now: datetime
) -> dict[str, Any]:
    """The next runs of a definition as typed (cleaned `values`, not saved), and for an
    edit of `schedule`, which runs the change adds or removes."""
    tz = values["timezone"]
    out: dict[str, Any] = {"zone": tz}
    if values["kind"] == Kind.CRON:
        expr = values["cron"]
        text = cron_text(expr, seed=seed)
        out["description"] = text.description
        out["resolved"] = text.resolved if text.resolved != expr else ""
        out["hashed"] = "h" in expr.lower().replace("@hourly", "")
        occurrences = cron.preview(
            expr, tz, seed=str(seed), after=now, count=PREVIEW_COUNT, jitter_s=values["jitter_s"]
        )
    else:
        run_at: datetime = values["run_at"]
        out["description"] = "once"
        out["resolved"] = ""
        out["hashed"] = False
        occurrences = (
            [cron.Occurrence(run_at, run_at.astimezone(cron.get_zone(tz)), run_at, None)]
            if run_at > now
            else []
        )
        if run_at <= now:
            out["past_once"] = run_at
    rows = [PreviewRow(o.scheduled_for, o.due_at, o.note) for o in occurrences]
    if schedule is not None:
        before = {
            o.scheduled_for
            for o in schedule_preview(schedule=schedule, after=now, count=PREVIEW_COUNT)
        }
        after = {r.scheduled_for for r in rows}
        if before != after:
            horizon = max(after) if after else None
            for r in rows:
                if r.scheduled_for not in before:
                    r.change = "added"
            for instant in sorted(before - after):
                if horizon is None or instant <= horizon:
                    rows.append(PreviewRow(instant, instant, None, "removed"))
            rows.sort(key=lambda r: r.scheduled_for)
            out["changed"] = True
    out["rows"] = rows
    return out


def resume_plan(schedule: Schedule, now: datetime) -> str:
    """What resuming now would do, by the schedule's misfire policy."""
    if schedule.next_run_at is None:
        return "Resuming now runs nothing by itself: the schedule has no next run."
    if schedule.next_run_at > now:
        return (
            "Nothing was missed while paused: resuming now keeps the next run "
            f"at {schedule.next_run_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC."
        )
    if schedule.kind == Kind.ONCE:
        # The beat's rule (fire_due_one_offs): due at run_at, or at creation if that was later.
        fell_due = max(schedule.next_run_at, schedule.created_at or schedule.next_run_at)
        late = (now - fell_due).total_seconds()
        if late > schedule.misfire_grace_s and schedule.misfire == "skip":
            return (
                "The one-off time has passed while paused, beyond its "
                f"{schedule.misfire_grace_s} s grace: resuming now records it as skipped "
                "(misfire policy: skip)."
            )
        return "The one-off time has passed while paused: resuming now runs it once, now."
    plan = cron.plan_misfire(
        schedule.cron,
        schedule.timezone,
        seed=str(schedule.id),
        next_run_at=schedule.next_run_at,
        now=now,
        until=now,
        grace_s=schedule.misfire_grace_s,
        policy=schedule.misfire,
        catch_up_limit=schedule.catch_up_limit,
    )
    run = len(plan.fire)
    return (
        f"Resuming now will run {run} occurrence{'s' if run != 1 else ''} and skip "
        f"{plan.skipped_total} (misfire policy: {schedule.misfire}, grace "
        f"{schedule.misfire_grace_s} s)."
    )


HISTORY_LIMIT = 50


@dataclass
class HistoryRow:
    execution: Execution | None
    scheduled_for: datetime


def schedule_history_rows(*, tenant: Tenant, schedule: Schedule, now: datetime) -> list[HistoryRow]:
    """The latest executions merged with the occurrences that have no record (gaps to explain)."""
    executions = schedule_history(tenant=tenant, schedule=schedule, limit=HISTORY_LIMIT)
    rows = [HistoryRow(e, e.scheduled_for) for e in executions]
    if schedule.kind != Kind.CRON or schedule.depends_on.exists():
        return rows
    start = executions[-1].scheduled_for if len(executions) >= HISTORY_LIMIT else None
    start = start or max(schedule.created_at, now - timedelta(days=7))
    try:
        expected = cron.occurrences_between(
            schedule.cron,
            schedule.timezone,
            start=start,
            end=now,
            seed=str(schedule.id),
            limit=HISTORY_LIMIT * 4,
        )
    except cron.CronError:
        return rows
    recorded = {e.scheduled_for for e in executions}
    gaps = [HistoryRow(None, o) for o in expected if o not in recorded][-HISTORY_LIMIT:]
    merged = sorted(rows + gaps, key=lambda r: r.scheduled_for, reverse=True)
    return merged[:HISTORY_LIMIT]


def queue_depths(broker: str) -> list[tuple[str, str]]:
    """Messages waiting per Celery queue (Redis brokers; "n/a" for others)."""
    if not broker.startswith(("redis://", "rediss://", "redis+socket://", "unix://")):
        return [(name, "n/a") for name in ALL_QUEUES]
    try:
        from kombu import Connection

        with Connection(broker, connect_timeout=2) as conn:
            client: Any = conn.default_channel.client  # type: ignore[attr-defined]
            return [(name, str(client.llen(name))) for name in ALL_QUEUES]
    except Exception:  # the page must render even when the broker is down
        return [(name, "unavailable") for name in ALL_QUEUES]
