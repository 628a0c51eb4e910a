"""`bench backfill --n 10000 --max-concurrent 100`: a backfill of N occurrences.

One `* * * * *` schedule of a bench tenant, backfilled over the N minutes
before now (exactly N occurrences), in-process, no beat or worker:
* the plan: the dry run (`backfill_create(dry_run=True)`: the preview's
  occurrences, paged, and the records of the range) and the real create
  (plan + the Backfill row + audit + event);
* the create rate: `pump_once()` of dispatch/scheduler/backfills.py called
  until every occurrence is created, timing only the pump; between rounds the
  released runs are marked succeeded (what workers would do, not timed), so
  each round releases `max_concurrent` rows as the beat's pump would;
* the same range again with every occurrence recorded: the dry run's cost
  with N existing executions, and the pump walking N skip-existing entries.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from bench.common import BenchError, cleanup_tenant, db_now, execute, table
from dispatch import services
from dispatch.models import Backfill, Schedule
from dispatch.scheduler import backfills as pump
from dispatch.states import ACTIVE_STATES, ControlState, state_values
from tenants.models import Tenant, TenantQuota
from tenants.roles import Principal, Role

KEY = "backfill"
# One stable tenant: the audit rows a backfill writes are append-only, so the tenant
# stays (deactivated) after a run and is reused by the next.
SLUG = "bench-backfill"


def run(n: int, max_concurrent: int) -> dict[str, Any]:
    tenant = _tenant()
    actor = Principal(
        tenant=tenant, role=Role.ADMIN, actor_kind="system", actor_id="bench", label="bench"
    )
    try:
        schedule = services.schedule_create(
            actor=actor,
            data={
                "name": "bench-backfill",
                "cron": "* * * * *",
                "timezone": "UTC",
                "target": {"type": "http", "url": "https://bench.internal/"},
                "concurrency": "allow",
            },
        )
        # Nothing but the backfill makes its executions (no beat runs here anyway).
        Schedule.objects.filter(pk=schedule.pk).update(next_run_at=None)
        end = db_now().replace(second=0, microsecond=0)
        args: dict[str, Any] = {
            "actor": actor,
            "schedule_id": schedule.id,
            "range_from": end - timedelta(minutes=n),
            "range_to": end,
            "max_concurrent": max_concurrent,
        }
        started = time.perf_counter()
        dry = services.backfill_create(**args, dry_run=True)
        plan_s = time.perf_counter() - started
        if len(dry.plan.items) != n:
            raise BenchError(f"the plan has {len(dry.plan.items)} occurrences, not {n}")
        started = time.perf_counter()
        created = services.backfill_create(**args).backfill
        create_s = time.perf_counter() - started
        assert created is not None  # noqa: S101 - not a dry run
        first = _pump(created.pk)
        if first["created"] != n:
            raise BenchError(f"the pump created {first['created']} of {n}")
        started = time.perf_counter()
        again = services.backfill_create(**args, dry_run=True)
        plan_existing_s = time.perf_counter() - started
        if again.plan.counts["skip-existing"] != n:
            raise BenchError(f"the second plan: {again.plan.counts}")
        repeat = services.backfill_create(**args).backfill
        assert repeat is not None  # noqa: S101 - not a dry run
        second = _pump(repeat.pk)
    finally:
        _clear(tenant.pk)
    return {
        "n": n,
        "max_concurrent": max_concurrent,
        "plan_s": plan_s,
        "plan_per_s": n / plan_s if plan_s else None,
        "create_backfill_s": create_s,
        "pump_rounds": first["rounds"],
        "pump_s": first["pump_s"],
        "create_rows_per_s": n / first["pump_s"] if first["pump_s"] else None,
        "pump_round_p50_ms": first["p50_ms"],
        "pump_round_max_ms": first["max_ms"],
        "plan_existing_s": plan_existing_s,
        "skip_existing_pump_s": second["pump_s"],
        "skip_existing_per_s": n / second["pump_s"] if second["pump_s"] else None,
    }


def _tenant() -> Tenant:
    existing = Tenant.objects.filter(slug=SLUG).first()
    if existing is not None:
        # Leftovers of an interrupted run are the bench's own rows.
        _clear(existing.pk)
    tenant = Tenant.objects.filter(slug=SLUG).first()
    if tenant is None:
        tenant = Tenant.objects.create(slug=SLUG, name="bench backfill")
    Tenant.objects.filter(pk=tenant.pk).update(active=True)
    TenantQuota.objects.update_or_create(tenant=tenant, defaults={"max_schedules": 10})
    tenant.refresh_from_db()
    return tenant


def _clear(tenant_id: int) -> None:
    """cleanup_tenant, after the rows it does not know: the backfills (which hold their
    schedule) and the executions that name them, with their events."""
    params = {"t": tenant_id}
    execute("DELETE FROM dispatch_executionevent WHERE tenant_id = %(t)s", params)
    execute("DELETE FROM dispatch_execution WHERE tenant_id = %(t)s", params)
    Backfill.objects.filter(tenant_id=tenant_id).delete()
    cleanup_tenant(tenant_id)


def _pump(backfill_id: Any) -> dict[str, Any]:
    """pump_once() until the backfill is done; only the pump's own time is counted."""
    rounds: list[float] = []
    while Backfill.objects.filter(pk=backfill_id, state=ControlState.RUNNING).exists():
        started = time.perf_counter()
        pump.pump_once()
        rounds.append(time.perf_counter() - started)
        # The workers' part, not timed: the released runs end.
        execute(
            "UPDATE dispatch_execution SET state = 'succeeded' "
            "WHERE backfill_id = %(b)s AND state = ANY(%(active)s)",
            {"b": backfill_id, "active": state_values(ACTIVE_STATES)},
        )
        if len(rounds) > 1_000_000:
            raise BenchError("the backfill never finished")
    done = Backfill.objects.get(pk=backfill_id)
    ordered = sorted(rounds)
    return {
        "rounds": len(rounds),
        "pump_s": sum(rounds),
        "created": done.created,
        "p50_ms": ordered[len(ordered) // 2] * 1000 if ordered else None,
        "max_ms": ordered[-1] * 1000 if ordered else None,
    }


def report(result: dict[str, Any], data: dict[str, Any]) -> str:
    return table(
        [result],
        [
            "n",
            "max_concurrent",
            "plan_s",
            "create_backfill_s",
            "pump_rounds",
            "create_rows_per_s",
            "pump_round_p50_ms",
            "pump_round_max_ms",
            "plan_existing_s",
            "skip_existing_per_s",
        ],
    )


def summary(data: dict[str, Any]) -> list[dict[str, Any]]:
    r = data.get(KEY)
    if not r:
        return []
    name = f"backfill {r['n']} occurrences"
    return [
        {"name": name, "figure": "plan (dry run) s", "value": r["plan_s"]},
        {
            "name": name,
            "figure": "create rows/s through pump_once",
            "value": r["create_rows_per_s"],
        },
    ]
