"""`bench scale --small 10000 --large 1000000`: beat cycle cost against the size of the table.

The schedule table holds `small`, then `large`, idle schedules (next_run_at
weeks to a year ahead: in the due index, outside the due window) plus a fixed
set of `due` schedules made due again before every cycle. A beat's cycle
should touch only due rows, so its cost should not grow with the table:
target large/small ≤ 1.5.

Cycles are run in-process with the beat's own `cycle()`, each phase timed,
a sweep in every cycle (a beat sweeps every SWEEP_INTERVAL_S, so this is its
costliest cycle) and retention left out (it runs hourly). Then a real beat
subprocess runs against each table for a few seconds and its VmRSS/VmHWM is read.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from django.test.utils import override_settings

from bench.common import (
    BENCH_QUEUE,
    BenchError,
    bench_tenant,
    cleanup_tenant,
    execute,
    fetchall,
    insert_schedules,
    percentile,
    purge_queues,
    quiet_logs,
    table,
    timed,
    vacuum_analyze,
)
from bench.procs import (
    Children,
    beat_argv,
    end_beat_session,
    forget_beats,
    lease_all_partitions,
    rss_mb,
    wait_for_beats,
)

KEY = "scale"
TARGET_RATIO = 1.5
PHASES = ("maintain_leases", "fire_due", "load_pending", "publish_due", "sweep")
WARMUP_CYCLES = 3
# Idle: due between a day and a year from now, spread by the row number.
IDLE_NEXT_RUN = (
    "clock_timestamp() + interval '1 day' + mod(g.i + %(offset)s, 31536000) * interval '1 second'"
)


def run(small: int, large: int, due: int, cycles: int, rss_seconds: float = 5.0) -> dict[str, Any]:
    if large < small:
        raise BenchError("--large must be at least --small")
    tenant = bench_tenant(large + due)
    sizes: list[dict[str, Any]] = []
    try:
        insert_schedules(
            tenant.pk, due, name_prefix="due-", run_at="clock_timestamp()", next_run_at="NULL"
        )
        due_ids = [
            r[0]
            for r in fetchall(
                "SELECT id FROM dispatch_schedule WHERE tenant_id = %(t)s", {"t": tenant.pk}
            )
        ]
        inserted = 0
        for size in (small, large):
            with timed() as insert_s:
                _idle(tenant.pk, size - inserted, offset=inserted)
                vacuum_analyze("dispatch_schedule")
            inserted = size
            result = _cycles(tenant.pk, due_ids, cycles) | {
                "idle": size,
                "insert_and_vacuum_s": insert_s[0],
            }
            result |= _beat_rss(rss_seconds)
            sizes.append(result)
    finally:
        cleanup_tenant(tenant.pk)
        purge_queues(BENCH_QUEUE)
    small_r, large_r = sizes
    cycle_ratio = large_r["cycle_mean_ms"] / max(1e-9, small_r["cycle_mean_ms"])
    return {
        "small": small_r,
        "large": large_r,
        "due_per_cycle": due,
        "cycles": cycles,
        "ratio_large_small": cycle_ratio,
        "p95_ratio_large_small": large_r["cycle_p95_ms"] / max(1e-9, small_r["cycle_p95_ms"]),
        "target_ratio": TARGET_RATIO,
        "within_target": cycle_ratio <= TARGET_RATIO,
    }


def _idle(tenant_id: int, n: int, *, offset: int) -> None:
    if n > 0:
        insert_schedules(
            tenant_id,
            n,
            # Names are unique per tenant: each insert gets its own prefix.
            name_prefix=f"idle-{offset}-",
            run_at=IDLE_NEXT_RUN,
            next_run_at=IDLE_NEXT_RUN,
            params={"offset": offset},
        )


def _cycles(tenant_id: int, due_ids: list[Any], cycles: int) -> dict[str, Any]:
    from dispatch.scheduler.loop import Beat, BeatConfig

    name = "bench-scale"
    beat = Beat(BeatConfig.from_settings(name=name, sweep_interval_s=0.0))
    current: dict[str, float] = defaultdict(float)

    def phase(label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed_phase(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                current[label] += time.perf_counter() - t0

        return timed_phase

    totals: list[float] = []
    phases: dict[str, list[float]] = defaultdict(list)
    published: list[int] = []
    with quiet_logs(), override_settings(RETENTION_INTERVAL_S=10**9):
        beat.start()
        try:
            lease_all_partitions(beat)
            for label in PHASES:
                # An instance attribute shadows the method, so cycle() calls the timed one.
                setattr(beat, label, phase(label, getattr(beat, label)))
            for i in range(WARMUP_CYCLES + cycles):
                _rearm(tenant_id, due_ids)
                current.clear()
                t0 = time.perf_counter()
                beat.cycle()
                elapsed = time.perf_counter() - t0
                queued = fetchall(
                    "SELECT count(*) FROM dispatch_execution WHERE tenant_id = %(t)s AND state = 'queued'",
                    {"t": tenant_id},
                )[0][0]
                if i >= WARMUP_CYCLES:
                    totals.append(elapsed * 1000)
                    published.append(int(queued))
                    for label in PHASES:
                        phases[label].append(current[label] * 1000)
        finally:
            beat.shutdown()
            end_beat_session()
            forget_beats([name])
    purge_queues(BENCH_QUEUE)
    return {
        "cycle_mean_ms": statistics.fmean(totals),
        "cycle_p95_ms": percentile(totals, 0.95),
        "cycle_max_ms": max(totals),
        "published_per_cycle_min": min(published),
        "phases_mean_ms": {label: statistics.fmean(v) for label, v in phases.items()},
    }


def _rearm(tenant_id: int, due_ids: list[Any]) -> None:
    """The due set due again (a new occurrence each time), last cycle's executions gone."""
    execute("DELETE FROM dispatch_executionevent WHERE tenant_id = %(t)s", {"t": tenant_id})
    execute("DELETE FROM dispatch_execution WHERE tenant_id = %(t)s", {"t": tenant_id})
    execute(
        "UPDATE dispatch_schedule SET run_at = clock_timestamp() - interval '10 milliseconds',"
        " next_run_at = clock_timestamp() - interval '10 milliseconds'"
        " WHERE id = ANY(%(ids)s::uuid[])",
        {"ids": due_ids},
    )


def _beat_rss(seconds: float) -> dict[str, float]:
    name = "bench-scale-rss"
    with Children("scale") as children:
        beat = children.start(name, beat_argv(name))
        wait_for_beats([beat], [name])
        time.sleep(seconds)
        if not beat.alive():
            raise BenchError(f"beat exited:\n{beat.output()[-3000:]}")
        mem = rss_mb(beat.pid)
    forget_beats([name])
    return {
        "beat_rss_mb": mem.get("VmRSS", float("nan")),
        "beat_hwm_mb": mem.get("VmHWM", float("nan")),
    }


def report(result: dict[str, Any], data: dict[str, Any]) -> str:
    rows = []
    for label in ("small", "large"):
        r = result[label]
        rows.append(
            {
                "idle": r["idle"],
                "cycle_mean_ms": r["cycle_mean_ms"],
                "cycle_p95_ms": r["cycle_p95_ms"],
                **{f"{p}_ms": r["phases_mean_ms"].get(p) for p in PHASES},
                "beat_rss_mb": r["beat_rss_mb"],
            }
        )
    keys = ["idle", "cycle_mean_ms", "cycle_p95_ms", *(f"{p}_ms" for p in PHASES), "beat_rss_mb"]
    verdict = "within" if result["within_target"] else "OVER"
    return (
        table(rows, keys)
        + f"\n{result['due_per_cycle']} due per cycle; cycle mean large/small = "
        + f"{result['ratio_large_small']:.2f} (p95 {result['p95_ratio_large_small']:.2f}),"
        + f" {verdict} the target ≤ {TARGET_RATIO}"
    )


def summary(data: dict[str, Any]) -> list[dict[str, Any]]:
    r = data.get(KEY)
    if not r or "large" not in r:
        return []
    name = f"scale {r['small']['idle']} → {r['large']['idle']} idle"
    return [
        {
            "name": name,
            "figure": f"beat cycle mean ms, large vs small (target ratio ≤ {TARGET_RATIO})",
            "value": r["large"]["cycle_mean_ms"],
            "ceiling": r["small"]["cycle_mean_ms"],
            "ratio": r["ratio_large_small"],
        },
        {"name": name, "figure": "beat RSS MiB (large table)", "value": r["large"]["beat_rss_mb"]},
    ]
