"""Platform operators' reads (cross-tenant, staff only): fire lag, dead
executions, tenants, beats, partitions, workers and queue depths."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Count, Max, Q

from core import redis_urls
from core.replicas import reads
from dispatch.models import (
    BeatNode,
    Execution,
    ExecutionState,
    ManagedCommand,
    Schedule,
    SchedulerPartition,
    Trigger,
)
from dispatch.queues import ALL_QUEUES
from dispatch.sql import sql
from tenants.models import Tenant

# Fire lag measures how promptly the beat publishes what falls due. Catch-up runs
# (missed occurrences fired late on purpose, e.g. after a pause), manual runs and
# backfill runs (released on demand, paced by the backfill's own cap) are not timed
# occurrences: they are counted apart, not in the percentiles. /ops and /metrics
# share this list.
LAG_EXCLUDED_TRIGGERS = (Trigger.CATCH_UP, Trigger.MANUAL, Trigger.BACKFILL)


def ops_fire_lag(*, since: datetime) -> dict[str, float | int | None]:
    """p50 / p99 / max of enqueued_at - due_at (seconds) for executions published since
    `since`, without catch-up, manual and backfill runs (`excluded` counts those)."""
    params = {"excluded": [str(t.value) for t in LAG_EXCLUDED_TRIGGERS], "since": since}
    row = sql.rows("ops_fire_lag", params, using=reads())[0]  # aggregates: always one row
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


def queue_depths(broker: str) -> list[tuple[str, str]]:
    """Messages waiting per Celery queue (Redis brokers; "n/a" for others)."""
    if not redis_urls.is_redis(broker):
        return [(name, "n/a") for name in ALL_QUEUES]
    try:
        from kombu import Connection

        with Connection(broker, connect_timeout=2) as conn:
            client: Any = conn.default_channel.client  # type: ignore[attr-defined]
            return [(name, str(client.llen(name))) for name in ALL_QUEUES]
    except Exception:  # the page must render even when the broker is down
        return [(name, "unavailable") for name in ALL_QUEUES]


def ops_commands() -> list[ManagedCommand]:
    """Every managed command's registration, with the tenants it is limited to."""
    return list(ManagedCommand.objects.prefetch_related("tenants").order_by("name"))


def ops_command(*, command_id: int) -> ManagedCommand | None:
    return ManagedCommand.objects.prefetch_related("tenants").filter(pk=command_id).first()


def ops_command_users(*, name: str) -> int:
    """How many live schedules (any tenant) run the command of that name."""
    return Schedule.objects.filter(
        deleted_at__isnull=True, target__type="command", target__command=name
    ).count()
