"""`bench cronburst --n 100000 --beats 2 [--broker redis|amqp]`: the top of the hour.

N cron schedules, all due at one minute boundary, created minutes before it with
one bulk INSERT (as a real fleet's schedules exist long before their hour), fired
by real beat processes on the chosen broker (RabbitMQ with the beat's publisher
confirms). The expression is `M H * * *` for the boundary's own minute and hour:
a `0 * * * *`-style daily cron whose next occurrence lies a day away, so each
schedule has exactly one occurrence in the run and nothing else competes with
the burst. The schedules target an idle URL (no worker consumes the messages).

The boundary is at least `stage_ahead + 30 s` after the schedules are committed,
and the beats get the stage-ahead in their environment (BEAT_STAGE_AHEAD_S), so
a beat that pre-stages occurrences minutes ahead can do all of its work before
the boundary; a beat that only looks BEAT_LOOKAHEAD_S ahead does it late, which
is what the figure shows. Before the boundary the run checks that its beats
hold every partition between them.

Reported (database clock): fire lag = enqueued_at - scheduled_for (first
publish) and published_at - scheduled_for, p50/p95/p99/max; dispatch/s =
published / (last publish - boundary); how far ahead rows were created; lost
(schedules with no published execution for the boundary when the run stops
waiting, max(60 s, n / 500 s) after it: later than that counts as lost) and
duplicated (execution rows beyond one per schedule for it); the beats' peak RSS.

`bench scaling --n 100000 --beats 1,2,4` runs the same burst once per beat count.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings

from bench.common import (
    BENCH_QUEUE,
    INSERT_S_PER_ROW,
    BenchError,
    bench_tenant,
    broker_kind,
    ceiling_bound,
    cleanup_tenant,
    db_now,
    drain_queued,
    execute,
    fetchall,
    insert_schedules,
    ratio,
    table,
)
from bench.procs import Children, beat_argv, forget_beats, rss_mb, wait_for_beats
from core.redis_urls import kombu_url

# The beats' stage-ahead when none is given (the pre-staging beat's default).
STAGE_AHEAD_S = 90.0
# Between the schedules' commit and the staging window opening: the beats' settle time.
MARGIN_S = 30.0


def key(n: int, beats: int, broker: str) -> str:
    return f"cronburst_{broker}_{n}_{beats}"


def broker_url(broker: str) -> str:
    """The URL the beats publish to: the bench's broker for its kind, else RABBITMQ_URL."""
    from bench.limits import amqp_url

    if broker == broker_kind():
        return str(settings.CELERY_BROKER_URL)
    if broker == "amqp":
        url = amqp_url()
        if url:
            return url
        raise BenchError("cronburst --broker amqp: set RABBITMQ_URL (amqp://…)")
    if broker == "redis":
        return kombu_url(str(settings.REDIS_URL))
    raise BenchError(f"unknown broker {broker!r} (redis or amqp)")


def purge_bench_queue(url: str) -> None:
    """The burst's messages (nobody consumes them), on whichever broker they went to."""
    from kombu import Connection

    from config.celery_app import amqp_queue

    queue = amqp_queue(BENCH_QUEUE)[0] if broker_kind(url) == "amqp" else None
    name = queue.name if queue is not None else BENCH_QUEUE
    with Connection(url, connect_timeout=10) as conn:
        channel: Any = conn.default_channel
        with contextlib.suppress(Exception):
            channel.queue_purge(name)


def _boundary(lead_s: float, n: int) -> datetime:
    """The first whole minute at least `lead_s` after the insert of n rows will have committed."""
    earliest = db_now().astimezone(UTC) + timedelta(seconds=lead_s + 2 + n * INSERT_S_PER_ROW)
    if earliest.second == 0 and earliest.microsecond == 0:
        return earliest
    return (earliest + timedelta(minutes=1)).replace(second=0, microsecond=0)


def run(
    n: int, beats: int, broker: str = "redis", stage_ahead: float = STAGE_AHEAD_S
) -> dict[str, Any]:
    url = broker_url(broker)
    lead_s = stage_ahead + MARGIN_S
    names = [f"bench-cron-{i}" for i in range(beats)]
    tenant = bench_tenant(n)
    rss: dict[str, float] = {}
    restarts: list[str] = []
    try:
        with Children("cronburst") as children:
            env = {"CELERY_BROKER_URL": url, "BEAT_STAGE_AHEAD_S": str(stage_ahead)}
            # The beat's own batch (BEAT_BATCH): cron rows cost the beat Python time
            # per row inside the claim transaction, and 5,000 of them outlast the
            # beat's idle-in-transaction timeout on a loaded machine (measured here).
            procs = [children.start(name, beat_argv(name), **env) for name in names]
            wait_for_beats(procs, names, timeout=90)
            at = _boundary(lead_s, n)
            updates_before = _execution_updates()
            t0 = time.perf_counter()
            insert_schedules(
                tenant.pk,
                n,
                name_prefix="c",
                kind="cron",
                cron_expr=f"{at.minute} {at.hour} * * *",
                next_run_at="%(at)s::timestamptz",
                params={"at": at},
            )
            create_s = time.perf_counter() - t0
            # The planner's statistics for the new rows, as autovacuum would have them
            # for schedules that existed long before their hour.
            execute("ANALYZE dispatch_schedule")
            committed = db_now()
            lead_actual = (at - committed).total_seconds()
            if lead_actual < 1:
                raise BenchError(f"cronburst: inserting {n} schedules ran into {at:%H:%M}")
            # Settled: the run's beats (and only they) hold every partition before the boundary.
            wait_for_beats(procs, names, timeout=max(5.0, lead_actual - 1))
            waited_s = max(60.0, n / 500)
            deadline = time.monotonic() + lead_actual + waited_s
            while time.monotonic() < deadline:
                for i, child in enumerate(procs):
                    if not child.alive():
                        # As its supervisor would: the beat's watchdog exits a beat whose
                        # cycle stalls; it is restarted under its name, and counted.
                        restarts.append(f"{names[i]}: {child.output().strip().splitlines()[-1:]}")
                        name = names[i]
                        procs[i] = children.start(f"{name}.{len(restarts)}", beat_argv(name), **env)
                if _published(tenant.pk, at) >= n:
                    break
                time.sleep(1.0)
            for child in procs:
                with contextlib.suppress(OSError):
                    rss[child.name] = rss_mb(child.pid).get("VmHWM", 0.0)
        forget_beats(names)
        # Read after the beats exited: a backend's table counters reach the statistics
        # when it ends (or idles), not with each statement.
        updates = [a - b for a, b in zip(_execution_updates(), updates_before, strict=True)]
        stats = burst_stats(tenant.pk, n, at)
        drain_queued(tenant.pk)
    finally:
        cleanup_tenant(tenant.pk)
        with contextlib.suppress(Exception):
            purge_bench_queue(url)
    return {
        "name": f"cronburst {n} {broker} {beats} beats",
        "n": n,
        "beats": beats,
        "broker": broker,
        "broker_kind": broker,
        "stage_ahead_s": stage_ahead,
        "boundary": at.isoformat(),
        "lead_s": lead_actual,
        "wait_after_boundary_s": waited_s,
        "beat_restarts": len(restarts),
        "beat_exits": restarts,
        "create_s": create_s,
        "beat_peak_rss_mb": max(rss.values(), default=float("nan")),
        # Row updates of executions during the run and the share that were HOT (no index
        # touched): admission changes `state`, which the partial indexes name, so on
        # PostgreSQL 15 none can be.
        "execution_updates": updates[0],
        "hot_update_ratio": ratio(updates[1], updates[0]),
    } | stats


def _execution_updates() -> tuple[int, int]:
    """Row updates and HOT updates so far over every day partition of the executions."""
    row = fetchall(
        """
        SELECT COALESCE(sum(n_tup_upd), 0), COALESCE(sum(n_tup_hot_upd), 0)
        FROM pg_stat_user_tables
        WHERE relid IN (SELECT inhrelid FROM pg_inherits
                        WHERE inhparent = 'dispatch_execution'::regclass)
        """
    )[0]
    return int(row[0]), int(row[1])


def _published(tenant_pk: int, at: datetime) -> int:
    return int(
        fetchall(
            "SELECT count(*) FROM dispatch_execution WHERE tenant_id = %(t)s"
            " AND scheduled_for = %(at)s AND enqueued_at IS NOT NULL",
            {"t": tenant_pk, "at": at},
        )[0][0]
    )


def burst_stats(tenant_pk: int, n: int, at: datetime) -> dict[str, Any]:
    """The boundary's executions, in SQL on the database clock."""
    row = fetchall(
        """
        WITH e AS (
            SELECT schedule_id, scheduled_for = %(at)s AS here, created_at,
                   extract(epoch FROM enqueued_at - scheduled_for) AS lag,
                   extract(epoch FROM published_at - scheduled_for) AS pub_lag,
                   extract(epoch FROM scheduled_for - created_at) AS ahead, enqueued_at
            FROM dispatch_execution WHERE tenant_id = %(t)s)
        SELECT count(*) FILTER (WHERE here),
               count(DISTINCT schedule_id) FILTER (WHERE here),
               count(DISTINCT schedule_id) FILTER (WHERE here AND enqueued_at IS NOT NULL),
               count(*) FILTER (WHERE NOT here),
               percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY lag)
                   FILTER (WHERE here),
               max(lag) FILTER (WHERE here),
               percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY pub_lag)
                   FILTER (WHERE here),
               max(pub_lag) FILTER (WHERE here),
               percentile_cont(ARRAY[0.5, 0.01]) WITHIN GROUP (ORDER BY ahead)
                   FILTER (WHERE here),
               min(enqueued_at) FILTER (WHERE here), max(enqueued_at) FILTER (WHERE here)
        FROM e
        """,
        {"t": tenant_pk, "at": at},
    )[0]
    executions, distinct, published, other = (int(x) for x in row[:4])
    nan3 = [float("nan")] * 3

    def floats(values: Any) -> list[float]:
        return [float(v) if v is not None else float("nan") for v in values] if values else nan3

    lag, pub = floats(row[4]), floats(row[6])
    ahead = floats(row[8])
    first, last = row[9], row[10]
    span = (last - at).total_seconds() if last else 0.0
    return {
        "executions": executions,
        "published": published,
        "lag_p50_s": lag[0],
        "lag_p95_s": lag[1],
        "lag_p99_s": lag[2],
        "lag_max_s": float(row[5]) if row[5] is not None else float("nan"),
        "published_lag_p50_s": pub[0],
        "published_lag_p99_s": pub[2],
        "published_lag_max_s": float(row[7]) if row[7] is not None else float("nan"),
        "staged_ahead_p50_s": ahead[0],
        "staged_ahead_p1_s": ahead[1],
        "first_publish_s": (first - at).total_seconds() if first else float("nan"),
        "dispatch_per_s": published / span if span > 0 else float("nan"),
        "lost": n - published,
        "duplicated": executions - distinct,
        "other_occurrences": other,
    }


def add_ratio(result: dict[str, Any], data: dict[str, Any]) -> None:
    ceiling, bound = ceiling_bound(data, result["broker_kind"])
    result["ceiling_per_s"] = ceiling
    result["bound"] = bound
    result["ratio_to_ceiling"] = ratio(result["dispatch_per_s"], ceiling)


KEYS = [
    "beats",
    "broker",
    "lag_p50_s",
    "lag_p95_s",
    "lag_p99_s",
    "lag_max_s",
    "published_lag_p99_s",
    "first_publish_s",
    "staged_ahead_p1_s",
    "dispatch_per_s",
    "lost",
    "duplicated",
    "beat_peak_rss_mb",
    "beat_restarts",
    "ratio_to_ceiling",
    "bound",
]


def report(result: dict[str, Any], data: dict[str, Any]) -> str:
    return table(
        [result], ["n", "create_s", "lead_s", *KEYS, "execution_updates", "hot_update_ratio"]
    )


def summary_rows(r: dict[str, Any]) -> list[dict[str, Any]]:
    name = r.get("name", "cronburst")
    return [
        {
            "name": name,
            "figure": f"dispatch/s vs min(raw publish, raw claim) = {r.get('bound')}",
            "value": r.get("dispatch_per_s"),
            "ceiling": r.get("ceiling_per_s"),
            "ratio": r.get("ratio_to_ceiling"),
        },
        {
            "name": name,
            "figure": "fire lag p50 / p99 / max s",
            "value": f"{r['lag_p50_s']:.3f} / {r['lag_p99_s']:.3f} / {r['lag_max_s']:.3f}",
        },
        {
            "name": name,
            "figure": "lost / duplicated",
            "value": f"{r['lost']} / {r['duplicated']}",
        },
    ]


def summary(data: dict[str, Any], only: str) -> list[dict[str, Any]]:
    r = data.get(only)
    if not r or "dispatch_per_s" not in r:
        return []
    return summary_rows(r)


# --- scaling: the same burst for 1, 2, 4 beats ------------------------------------------

SCALING_KEY = "scaling"


def run_scaling(
    n: int, beat_counts: list[int], broker: str = "redis", stage_ahead: float = STAGE_AHEAD_S
) -> dict[str, Any]:
    runs = [run(n, beats, broker, stage_ahead) for beats in beat_counts]
    result: dict[str, Any] = {
        "n": n,
        "broker": broker,
        "broker_kind": broker,
        "beat_counts": beat_counts,
        "stage_ahead_s": stage_ahead,
        "runs": runs,
    }
    for a, b in itertools.pairwise(runs):
        result[f"ratio_{b['beats']}_{a['beats']}"] = ratio(b["dispatch_per_s"], a["dispatch_per_s"])
    return result


def add_scaling_ratios(result: dict[str, Any], data: dict[str, Any]) -> None:
    for r in result["runs"]:
        add_ratio(r, data)
    ceiling, bound = ceiling_bound(data, result["broker_kind"])
    result["ceiling_per_s"] = ceiling
    result["bound"] = bound


def scaling_report(result: dict[str, Any], data: dict[str, Any]) -> str:
    lines = [table(result["runs"], KEYS)]
    for a, b in itertools.pairwise(result["beat_counts"]):
        value = result.get(f"ratio_{b}_{a}")
        shown = f"{value:.2f}" if isinstance(value, float) else "—"
        lines.append(f"dispatch {b} beats / {a} beats = {shown}")
    if result.get("ceiling_per_s") is not None:
        lines.append(
            f"ceiling min(raw publish, raw claim) = {result['ceiling_per_s']:.0f}/s,"
            f" bound by {result['bound']}"
        )
    return "\n".join(lines)


def scaling_summary(data: dict[str, Any]) -> list[dict[str, Any]]:
    r = data.get(SCALING_KEY)
    if not r or "runs" not in r:
        return []
    rows: list[dict[str, Any]] = []
    for run_ in r["runs"]:
        rows.extend(summary_rows(run_ | {"name": f"scaling {r['n']} {run_['beats']} beats"}))
    counts = r["beat_counts"]
    for a, b in itertools.pairwise(counts):
        rows.append(
            {
                "name": f"scaling {r['n']}",
                "figure": f"dispatch/s {b} beats / {a} beats (bound: {r.get('bound')})",
                "value": r.get(f"ratio_{b}_{a}"),
            }
        )
    return rows
