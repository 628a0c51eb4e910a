"""Reads of the dispatch app. Every query starts from the tenant (fails closed)."""

from __future__ import annotations

import base64
import binascii
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, TypeVar

from django.db.models import Model, Q, QuerySet

from dispatch import cron
from dispatch.exceptions import InvalidSchedule, NotFound
from dispatch.models import Execution, ExecutionEvent, ExecutionState, Kind, Schedule
from tenants.models import Tenant

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
        qs = qs.filter(Q(**{f"{field}__lt": at}) | Q(**{field: at, "id__lt": pk}))
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
    return _keyset(
        qs.prefetch_related("depends_on"), field="created_at", cursor=cursor, limit=limit
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
