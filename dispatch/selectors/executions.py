"""Reads of executions: one, a page, its timeline, the dashboard's running and
troubled lists and the tenant's usage. Every query starts from the tenant."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Count, Q, QuerySet

from dispatch.exceptions import InvalidSchedule, NotFound
from dispatch.models import Execution, ExecutionEvent, ExecutionState
from dispatch.selectors.paging import Page, _keyset, as_uuid
from dispatch.states import IN_FLIGHT_STATES
from tenants.models import Tenant, TenantQuota


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
