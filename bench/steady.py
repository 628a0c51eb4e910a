"""`bench steady --rates 1000,2000,5000 --seconds 60`: fire lag under a steady due rate.

For each rate R, R * seconds one-off schedules are created ahead with due
times spread evenly at R per second, and two real beats fire them. Per rate:
p50/p99/max fire lag (due → published), lost, duplicated; overall, the
highest rate sustained with p99 < 1 s and nothing lost or duplicated.

Nothing consumes the messages; instead the bench ends queued rows every half
second (as consuming workers would) and purges the queue, so the tenant's
in-flight count and the broker's memory stay what they would be in service.
"""

from __future__ import annotations

import time
from typing import Any

from bench.common import (
    BENCH_QUEUE,
    INSERT_S_PER_ROW,
    BenchError,
    bench_tenant,
    cleanup_tenant,
    db_now,
    dispatch_ceiling,
    execute,
    fire_stats,
    insert_schedules,
    purge_queues,
    ratio,
    table,
)
from bench.procs import (
    Child,
    Children,
    beat_argv,
    forget_beats,
    wait_for_beats,
    wait_published,
)

KEY = "steady"
P99_TARGET_S = 1.0


def run(
    rates: list[int], seconds: float, beats: int = 2, lead: float | None = None
) -> dict[str, Any]:
    names = [f"bench-beat-{i}" for i in range(beats)]
    per_rate: list[dict[str, Any]] = []
    try:
        with Children("steady") as children:
            procs = [children.start(name, beat_argv(name, "--batch", "5000")) for name in names]
            wait_for_beats(procs, names)
            for rate in rates:
                per_rate.append(_one_rate(rate, seconds, lead, procs))
        forget_beats(names)
    finally:
        purge_queues(BENCH_QUEUE)
    sustained = [r["rate"] for r in per_rate if r["sustained"]]
    return {
        "seconds": seconds,
        "beats": beats,
        "rates": per_rate,
        "sustained_rate_per_s": max(sustained, default=0),
        "p99_target_s": P99_TARGET_S,
    }


def _one_rate(rate: int, seconds: float, lead: float | None, procs: list[Child]) -> dict[str, Any]:
    n = max(1, int(rate * seconds))
    tenant = bench_tenant(n)
    try:
        ahead = lead if lead is not None else 3.0 + n * INSERT_S_PER_ROW
        t0 = db_now().timestamp() + ahead
        insert_schedules(
            tenant.pk,
            n,
            name_prefix="s",
            next_run_at="to_timestamp(%(t0)s + g.i / %(rate)s::float8)",
            run_at="to_timestamp(%(t0)s + g.i / %(rate)s::float8)",
            params={"t0": t0, "rate": float(rate)},
        )
        # The planner's statistics for the new rows, as autovacuum would have them for
        # schedules created a while before they fall due (this server may run without it).
        execute("ANALYZE dispatch_schedule")
        committed = db_now().timestamp()
        if committed > t0 - 0.5:
            raise BenchError(
                f"steady {rate}/s: inserting {n} schedules took past their first due time; "
                f"pass a larger --lead than {ahead:.1f} s"
            )
        deadline = time.monotonic() + (t0 - committed) + seconds + max(30.0, n / 2000)
        wait_published(tenant.pk, n, procs, deadline)
        stats = fire_stats(tenant.pk, n)
    finally:
        cleanup_tenant(tenant.pk)
        purge_queues(BENCH_QUEUE)
    sustained = (
        stats["lag_p99_s"] < P99_TARGET_S and stats["lost"] == 0 and stats["duplicated"] == 0
    )
    return {
        "rate": rate,
        "n": n,
        "lag_p50_s": stats["lag_p50_s"],
        "lag_p99_s": stats["lag_p99_s"],
        "lag_max_s": stats["lag_max_s"],
        "published_per_s": stats["published"] / max(1e-9, stats["due_span_s"]),
        "lost": stats["lost"],
        "duplicated": stats["duplicated"],
        "sustained": sustained,
    }


def report(result: dict[str, Any], data: dict[str, Any]) -> str:
    ceiling = dispatch_ceiling(data)
    rows = [r | {"ratio_to_ceiling": ratio(r["rate"], ceiling)} for r in result["rates"]]
    keys = [
        "rate",
        "n",
        "lag_p50_s",
        "lag_p99_s",
        "lag_max_s",
        "lost",
        "duplicated",
        "sustained",
        "ratio_to_ceiling",
    ]
    return (
        table(rows, keys)
        + f"\nhighest rate sustained (p99 < {P99_TARGET_S:g} s, 0 lost, 0 duplicated): "
        + f"{result['sustained_rate_per_s']}/s"
        + (
            f" = {ratio(result['sustained_rate_per_s'], ceiling):.3f} of the ceiling {ceiling:.0f}/s"
            if ceiling
            else ""
        )
    )


def summary(data: dict[str, Any]) -> list[dict[str, Any]]:
    r = data.get(KEY)
    if not r or "rates" not in r:
        return []
    ceiling = dispatch_ceiling(data)
    rows: list[dict[str, Any]] = [
        {
            "name": f"steady ({r['beats']} beats)",
            "figure": f"highest rate/s with p99 < {P99_TARGET_S:g} s",
            "value": r["sustained_rate_per_s"],
            "ceiling": ceiling,
            "ratio": ratio(r["sustained_rate_per_s"], ceiling),
        }
    ]
    for rate in r["rates"]:
        rows.append(
            {
                "name": f"steady {rate['rate']}/s",
                "figure": "fire lag p99 s (lost / dup)",
                "value": f"{rate['lag_p99_s']:.3f} ({rate['lost']} / {rate['duplicated']})",
            }
        )
    return rows
