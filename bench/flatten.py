"""`bench flatten --n 10000 --jitter 30`: does spreading flatten a top-of-the-minute burst?

The same N cron schedules, all due at one instant, twice: with jitter_s = 0
(every execution due at the occurrence) and with jitter_s = J (each due at
the occurrence + cron.jitter_seconds(), a hash of the schedule and the instant
in [0, J]). Two real beats fire them. Reported for each: p99 fire lag (due →
published) and the peak number published in one second.

Cron occurrences are whole minutes of the database clock, so each variant
waits for its own minute: the run takes one to two minutes whatever N is.
`H` in a cron field spreads the same way across minutes or hours; jitter is
the knob that can be measured within a minute.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.common import (
    BENCH_QUEUE,
    INSERT_S_PER_ROW,
    BenchError,
    bench_tenant,
    cleanup_tenant,
    db_now,
    fire_stats,
    insert_schedules,
    publish_ceiling,
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

KEY = "flatten"
# Seconds between committing the schedules and their minute: the beats claim and pre-load them ahead.
SETUP_S = 4.0


def run(n: int, jitter: int, beats: int = 2) -> dict[str, Any]:
    names = [f"bench-beat-{i}" for i in range(beats)]
    try:
        with Children("flatten") as children:
            procs = [children.start(name, beat_argv(name, "--batch", "5000")) for name in names]
            wait_for_beats(procs, names)
            flat = _variant(n, 0, procs)
            spread = _variant(n, jitter, procs)
        forget_beats(names)
    finally:
        purge_queues(BENCH_QUEUE)
    return {
        "n": n,
        "jitter_s": jitter,
        "beats": beats,
        "flat": flat,
        "spread": spread,
        "p99_spread_over_flat": ratio(spread["lag_p99_s"], flat["lag_p99_s"]),
        "peak_spread_over_flat": ratio(
            spread["peak_published_per_s"], flat["peak_published_per_s"]
        ),
    }


def _next_minute(after: datetime) -> datetime:
    return (after + timedelta(minutes=1)).replace(second=0, microsecond=0)


def _variant(n: int, jitter: int, procs: list[Child]) -> dict[str, Any]:
    tenant = bench_tenant(n)
    try:
        at = _next_minute(
            db_now().astimezone(UTC) + timedelta(seconds=SETUP_S + n * INSERT_S_PER_ROW)
        )
        # Only this minute of the year matches: each schedule fires once in the run.
        expr = f"{at.minute} {at.hour} {at.day} {at.month} *"
        insert_schedules(
            tenant.pk,
            n,
            name_prefix="f",
            kind="cron",
            cron_expr=expr,
            jitter_s=jitter,
            next_run_at="%(at)s::timestamptz",
            params={"at": at},
        )
        if db_now() > at - timedelta(seconds=1):
            raise BenchError(f"flatten: inserting {n} schedules ran into their minute {at:%H:%M}")
        deadline = time.monotonic() + (at - db_now()).total_seconds() + jitter + max(30.0, n / 1000)
        wait_published(tenant.pk, n, procs, deadline)
        stats = fire_stats(tenant.pk, n)
    finally:
        cleanup_tenant(tenant.pk)
        purge_queues(BENCH_QUEUE)
    return {
        "jitter_s": jitter,
        "minute": at.isoformat(),
        "lag_p50_s": stats["lag_p50_s"],
        "lag_p99_s": stats["lag_p99_s"],
        "lag_max_s": stats["lag_max_s"],
        "peak_due_per_s": stats["peak_due_per_s"],
        "peak_published_per_s": stats["peak_published_per_s"],
        "due_span_s": stats["due_span_s"],
        "lost": stats["lost"],
        "duplicated": stats["duplicated"],
    }


def report(result: dict[str, Any], data: dict[str, Any]) -> str:
    ceiling = publish_ceiling(data)
    rows = [
        result[v]
        | {"variant": v, "peak_ratio_to_ceiling": ratio(result[v]["peak_published_per_s"], ceiling)}
        for v in ("flat", "spread")
    ]
    keys = [
        "variant",
        "jitter_s",
        "peak_due_per_s",
        "peak_published_per_s",
        "lag_p50_s",
        "lag_p99_s",
        "lag_max_s",
        "lost",
        "duplicated",
        "peak_ratio_to_ceiling",
    ]
    return table(rows, keys)


def summary(data: dict[str, Any]) -> list[dict[str, Any]]:
    r = data.get(KEY)
    if not r or "flat" not in r:
        return []
    ceiling = publish_ceiling(data)
    rows = []
    for v in ("flat", "spread"):
        x = r[v]
        name = f"flatten {r['n']} jitter {x['jitter_s']} s"
        rows.append(
            {
                "name": name,
                "figure": "peak published/s vs broker publish/s",
                "value": x["peak_published_per_s"],
                "ceiling": ceiling,
                "ratio": ratio(x["peak_published_per_s"], ceiling),
            }
        )
        rows.append(
            {
                "name": name,
                "figure": "fire lag p99 s (lost / dup)",
                "value": f"{x['lag_p99_s']:.3f} ({x['lost']} / {x['duplicated']})",
            }
        )
    return rows
