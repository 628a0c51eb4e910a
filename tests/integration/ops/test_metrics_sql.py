"""/metrics figures from dispatch/sql/ops.sql: lag buckets are cumulative and inclusive
(lag <= bound), the window and the excluded triggers (catch-up, manual) are honoured."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from dispatch import selectors, services
from dispatch.models import Execution, Schedule
from dispatch.ops.metrics import DatabaseCollector
from dispatch.services import db_now
from dispatch.sql import sql
from tenants.roles import Principal

pytestmark = pytest.mark.django_db
TARGET = {"type": "http", "url": "https://billing.internal/hook"}


def published(s: Schedule, *, lag_s: float, ago_s: float = 0.0, trigger: str = "cron") -> None:
    enqueued = db_now() - timedelta(seconds=ago_s)
    due = enqueued - timedelta(seconds=lag_s)
    Execution.objects.create(
        schedule=s,
        tenant=s.tenant,
        partition=s.partition,
        scheduled_for=due,
        due_at=due,
        trigger=trigger,
        state="queued",
        enqueued_at=enqueued,
    )


def test_fire_lag_histogram_counts_inclusive_buckets_in_the_window(
    admin_principal: Principal,
) -> None:
    s = services.schedule_create(
        actor=admin_principal, data={"name": "lagged", "cron": "0 2 * * *", "target": TARGET}
    )
    published(s, lag_s=0.1)  # exactly on a bound: counted in it
    published(s, lag_s=0.3)
    published(s, lag_s=400)  # beyond every bound: only in +Inf
    published(s, lag_s=0.01, trigger="catch_up")  # late on purpose: not timed
    published(s, lag_s=0.02, trigger="manual")
    published(s, lag_s=0.01, ago_s=20 * 60)  # published before the 15-minute window
    started = db_now()
    due = started - timedelta(seconds=2)
    Execution.objects.create(
        schedule=s,
        tenant=s.tenant,
        partition=s.partition,
        scheduled_for=due,
        due_at=due,
        state="running",
        started_at=started,
    )
    families = {m.name: m for m in DatabaseCollector().collect()}
    samples = {
        (x.name, x.labels.get("le")): x.value
        for x in families["scheduler_fire_lag_seconds"].samples
    }
    bucket = "scheduler_fire_lag_seconds_bucket"
    assert samples[(bucket, "0.05")] == 0
    assert samples[(bucket, "0.1")] == 1
    assert samples[(bucket, "0.25")] == 1
    assert samples[(bucket, "0.5")] == 2
    assert samples[(bucket, "300.0")] == 2
    assert samples[(bucket, "+Inf")] == 3
    assert samples[("scheduler_fire_lag_seconds_count", None)] == 3
    assert samples[("scheduler_fire_lag_seconds_sum", None)] == pytest.approx(400.4)
    start = {
        (x.name, x.labels.get("le")): x.value
        for x in families["scheduler_start_lag_seconds"].samples
    }
    assert start[("scheduler_start_lag_seconds_bucket", "1.0")] == 0
    assert start[("scheduler_start_lag_seconds_bucket", "2.0")] == 1
    assert start[("scheduler_start_lag_seconds_count", None)] == 1
    states = {
        (x.labels["tenant"], x.labels["state"]): x.value
        for x in families["scheduler_executions"].samples
    }
    assert states[(admin_principal.tenant.slug, "queued")] == 6
    assert states[(admin_principal.tenant.slug, "running")] == 1
    lag = selectors.ops_fire_lag(since=db_now() - timedelta(minutes=15))
    assert lag["count"] == 3 and lag["excluded"] == 2 and lag["max"] == pytest.approx(400)


def test_no_statement_is_jit_compiled_however_costly_its_plan() -> None:
    """A plan over every day partition of history passes jit_above_cost by its size
    alone, and PostgreSQL compiles such a plan at every execution: /metrics' in-flight
    count took 1.5 s a scrape at 253 partitions, all of it compiling. The platform's
    connections turn JIT off (config/settings.py)."""
    with connection.cursor() as cur:
        cur.execute("SHOW jit")
        assert cur.fetchone()[0] == "off"
        cur.execute("SET jit_above_cost = 0")  # every plan passes the threshold
        try:
            cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql["metrics_tenant_inflight"])
            plan = cur.fetchone()[0][0]
        finally:
            cur.execute("RESET jit_above_cost")
    assert plan["Plan"]["Node Type"] and "JIT" not in plan
