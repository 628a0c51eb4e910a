"""`bench e2e --n 2000 --workers 1 --concurrency 2`: no-op HTTP executions end to end.

N one-off HTTP jobs to a receiver on 127.0.0.1, fired by a real beat and run
by the project's real short worker pool. Reported: completed/s (first
started_at → last finished_at, from the database) and its ratio to the raw
Celery no-op consume rate of the same number of worker processes, pool and
concurrency, measured right after. Twice: the prefork pool at `concurrency`
(the top-level figures), then the threads pool (`--pool threads`) at
BENCH_E2E_THREADS (default 16; 0 skips it) — the configuration for I/O-bound
HTTP callbacks (docs/explanation/executions.md, "Worker pools: prefork or threads").

Then the worker-side overhead per execution: the runner's own
`run_execution` is called in-process on a few hundred executions, with every
lease function it calls (claim, lease check, heartbeat, fenced completion)
timed, and its database round trips counted at the protocol level (core/pgtrace.py:
every ReadyForQuery, so BEGIN and COMMIT too). A no-op call ends long
before the first heartbeat (a third of EXECUTION_LEASE_S after the claim):
two round trips, the claim and the finish (issue 19). The first WARM_RUNS runs are
not measured: in them psycopg prepares the claim and the finish on the connection
(DB_PREPARED_STATEMENTS), one more round trip each, once per connection.

Last, what a live log costs the worker per execution: a command's LIVE_LOG_BENCH_LINES
lines of 80 bytes fed through the attempt's LineWriter as the command's drain reads
them (64 KiB at a time), then sealed and kept with its execution — measured on the
overhead run's executions (a later attempt number, so they start with no log). The
worker's finish writes the kept log inside its own statement; here it is written on
its own (`keep_sealed`), an upper bound of what it adds to the finish. A no-op HTTP
call (the e2e runs) writes no live log at all: its answer is complete at once.
"""

from __future__ import annotations

import os
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

from django.conf import settings
from django.db import connection
from django.test.utils import override_settings

from bench.common import (
    SHORT_QUEUES,
    BenchError,
    bench_tenant,
    cleanup_tenant,
    execute,
    fetchall,
    insert_schedules,
    percentile,
    purge_queues,
    quiet_logs,
    ratio,
    table,
)
from bench.consume import noop_consume_rate, pool_argv
from bench.procs import (
    Children,
    beat_argv,
    forget_beats,
    wait_for_beats,
    wait_worker_ready,
    worker_argv,
)
from bench.receiver import Receiver
from core import pgtrace

KEY = "e2e"
# Runs not measured before the overhead's: a worker's connection lives on from task to
# task, and psycopg prepares the claim and the finish on it after DB_PREPARE_AFTER runs
# (DB_PREPARED_STATEMENTS), each at the cost of one more round trip, once. The figures
# are those of the runs after that, as a worker makes them all day.
WARM_RUNS = settings.DB_PREPARE_AFTER + 1
FINAL = ("succeeded", "dead", "cancelled", "skipped", "failed", "timed_out")
# The per-host token bucket (50/s by default) would otherwise be what is measured.
UNLIMITED_RATE = "1000000/s"


def _target(receiver: Receiver) -> dict[str, Any]:
    return {"type": "http", "method": "GET", "url": f"{receiver.url}/noop", "timeout_s": 10}


# The threads pool's concurrency in the second run (0: no threads run).
THREADS_ENV = "BENCH_E2E_THREADS"
DEFAULT_THREADS = 16


def run(n: int, workers: int, concurrency: int, overhead_n: int) -> dict[str, Any]:
    threads = int(os.environ.get(THREADS_ENV, DEFAULT_THREADS))
    with Receiver() as receiver:
        result = _pool_run(receiver, n, workers, concurrency, "prefork")
        if threads > 0:
            receiver.deliveries.clear()
            result["threads"] = _pool_run(receiver, n, workers, threads, "threads")
        result["overhead"] = _overhead(receiver, overhead_n)
    return result


LIVE_LOG_BENCH_LINES = 1000
LIVE_LOG_BENCH_RUNS = 50


def _live_log_cost(execution_ids: list[str]) -> dict[str, Any]:
    """Per execution: feeding LIVE_LOG_BENCH_LINES lines to the live log, and sealing
    and keeping it; Redis calls counted."""
    from dispatch import logs
    from dispatch.services import logs as attempt_logs

    chunk = 64 * 1024
    line = b"x" * 79 + b"\n"
    printed = line * LIVE_LOG_BENCH_LINES
    feed_ms: list[float] = []
    keep_ms: list[float] = []
    calls: list[int] = []
    original = logs.append
    counted = [0]

    def counting(*args: Any, **kwargs: Any) -> int:
        counted[0] += 1
        return original(*args, **kwargs)

    with mock.patch.object(logs, "append", counting):
        for eid in execution_ids[:LIVE_LOG_BENCH_RUNS]:
            counted[0] = 0
            writer = logs.LineWriter(
                eid, 2, stream="output", redact=lambda text: text, fencing_token=1
            )
            t0 = time.perf_counter()
            for at in range(0, len(printed), chunk):
                writer.feed(printed[at : at + chunk])
            writer.close()
            t1 = time.perf_counter()
            sealed = logs.seal(eid, 2)
            if sealed is None or len(sealed.rows) != LIVE_LOG_BENCH_LINES:
                raise BenchError(f"live log bench: {eid} sealed {sealed}")
            if not attempt_logs.keep_sealed(eid, 2, sealed, actor="bench"):
                raise BenchError(f"live log bench: {eid} not kept")
            t2 = time.perf_counter()
            feed_ms.append((t1 - t0) * 1000)
            keep_ms.append((t2 - t1) * 1000)
            calls.append(counted[0] + 2)  # the appends, the seal, the discard
    return {
        "lines": LIVE_LOG_BENCH_LINES,
        "runs": len(feed_ms),
        "feed_ms": statistics.fmean(feed_ms),
        "seal_keep_ms": statistics.fmean(keep_ms),
        "redis_calls": statistics.fmean(calls),
        "per_line_us": statistics.fmean(
            (f + k) * 1000 / LIVE_LOG_BENCH_LINES for f, k in zip(feed_ms, keep_ms, strict=True)
        ),
    }


def _pool_run(
    receiver: Receiver, n: int, workers: int, concurrency: int, pool: str
) -> dict[str, Any]:
    """E2E throughput of one pool, and the Celery no-op rate of the same processes."""
    result = _throughput(receiver, n, workers, concurrency, pool)
    noop = noop_consume_rate(max(n, 200), workers=workers, concurrency=concurrency, pool=pool)
    result["celery_noop_per_s"] = noop["per_s"]
    result["ratio_to_celery_noop"] = ratio(result["completed_per_s"], noop["per_s"])
    return result


def _throughput(
    receiver: Receiver, n: int, workers: int, concurrency: int, pool: str = "prefork"
) -> dict[str, Any]:
    tenant = bench_tenant(n)
    beat_name = "bench-e2e-beat"
    names = [f"bench-w{i}" for i in range(workers)]
    try:
        insert_schedules(
            tenant.pk,
            n,
            name_prefix="e",
            # Out of the due index until the workers and the beat are up.
            run_at="clock_timestamp() + interval '3650 days'",
            next_run_at="NULL",
            target=_target(receiver),
            priority="default",
            duration_class="short",
        )
        purge_queues(*SHORT_QUEUES)
        with Children("e2e") as children:
            started = [
                children.start(
                    name,
                    pool_argv(worker_argv(",".join(SHORT_QUEUES), concurrency, name), pool),
                    WORKER_ID=name,
                    TARGET_TEST_ALLOW=receiver.allow_entry,
                    TARGET_RATE_PER_HOST=UNLIMITED_RATE,
                )
                for name in names
            ]
            for worker in started:
                wait_worker_ready(worker)
            beat = children.start(beat_name, beat_argv(beat_name))
            wait_for_beats([beat], [beat_name])
            execute(
                "UPDATE dispatch_schedule SET"
                " run_at = date_trunc('second', clock_timestamp()) + interval '2 seconds',"
                " next_run_at = date_trunc('second', clock_timestamp()) + interval '2 seconds'"
                " WHERE tenant_id = %(t)s",
                {"t": tenant.pk},
            )
            deadline = time.monotonic() + 60 + n / 20
            while True:
                done = fetchall(
                    "SELECT count(*) FROM dispatch_execution WHERE tenant_id = %(t)s AND state = ANY(%(f)s)",
                    {"t": tenant.pk, "f": list(FINAL)},
                )[0][0]
                if done >= n or time.monotonic() > deadline:
                    break
                for child in [*started, beat]:
                    if not child.alive():
                        raise BenchError(f"{child.name} exited:\n{child.output()[-3000:]}")
                time.sleep(0.5)
        forget_beats([beat_name])
        row = fetchall(
            """
            SELECT count(*), count(DISTINCT schedule_id),
                   count(*) FILTER (WHERE state = ANY(%(f)s)),
                   count(*) FILTER (WHERE state = 'succeeded'),
                   count(*) FILTER (WHERE attempt > 1),
                   min(started_at), max(finished_at),
                   percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP
                       (ORDER BY extract(epoch FROM finished_at - due_at))
            FROM dispatch_execution WHERE tenant_id = %(t)s
            """,
            {"t": tenant.pk, "f": list(FINAL)},
        )[0]
    finally:
        cleanup_tenant(tenant.pk)
        purge_queues(*SHORT_QUEUES)
    executions, distinct, completed, succeeded, retried = (int(x) for x in row[:5])
    first_start, last_finish = row[5], row[6]
    span = (last_finish - first_start).total_seconds() if first_start and last_finish else 0.0
    latency = [float(x) for x in row[7]] if row[7] else [float("nan")] * 2
    return {
        "n": n,
        "workers": workers,
        "concurrency": concurrency,
        "pool": pool,
        "completed": completed,
        "succeeded": succeeded,
        "retried": retried,
        "lost": n - distinct,
        "duplicated": executions - distinct,
        "duplicate_deliveries": sum(c - 1 for c in receiver.deliveries.values() if c > 1),
        "span_s": span,
        "completed_per_s": succeeded / span if span > 0 else float("nan"),
        "due_to_finished_p50_s": latency[0],
        "due_to_finished_p99_s": latency[1],
    }


class _Probe:
    """Per-call time and statements of the lease functions the runner calls (the
    statements counted by a Django execute wrapper: every named statement goes
    through Django's cursor wrapper, core/db.py)."""

    def __init__(self) -> None:
        self.calls: dict[str, list[tuple[float, int]]] = defaultdict(list)

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            sent = [0]

            def count(execute: Callable[..., Any], *a: Any) -> Any:
                sent[0] += 1
                return execute(*a)

            with connection.execute_wrapper(count):
                t0 = time.perf_counter()
                try:
                    return fn(*args, **kwargs)
                finally:
                    self.calls[name].append(((time.perf_counter() - t0) * 1000, sent[0]))

        return timed


@contextmanager
def _instrumented(probe: _Probe) -> Iterator[None]:
    from dispatch.targets import KINDS
    from dispatch.worker import leases

    http = KINDS["http"]

    class TimedHttp:
        """The http target, its call timed."""

        clean = staticmethod(http.clean)
        rate_key = staticmethod(http.rate_key)

        @staticmethod
        def run(ctx: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return http.run(ctx)
            finally:
                probe.calls["target_call"].append(((time.perf_counter() - t0) * 1000, 0))

    with (
        mock.patch.object(leases, "execution_claim", probe.wrap("claim", leases.execution_claim)),
        mock.patch.object(leases, "lease_check", probe.wrap("lease_check", leases.lease_check)),
        mock.patch.object(
            leases, "lease_heartbeat", probe.wrap("heartbeat", leases.lease_heartbeat)
        ),
        mock.patch.object(leases, "attempt_finish", probe.wrap("complete", leases.attempt_finish)),
        mock.patch.dict(KINDS, {"http": TimedHttp}),
    ):
        yield


def _overhead(receiver: Receiver, k: int) -> dict[str, Any]:
    from dispatch.worker import runner

    tenant = bench_tenant(k + WARM_RUNS)
    try:
        insert_schedules(
            tenant.pk,
            k + WARM_RUNS,
            name_prefix="o",
            run_at="clock_timestamp() - interval '1 second'",
            next_run_at="NULL",
            target=_target(receiver),
            priority="default",
            duration_class="short",
        )
        ids = [
            str(r[0])
            for r in fetchall(
                """
                INSERT INTO dispatch_execution
                    (id, schedule_id, tenant_id, partition, scheduled_for, due_at, trigger,
                     attempt, state, queue, lease_owner, fencing_token, error, log_excerpt,
                     reason_code, reason)
                SELECT gen_random_uuid(), s.id, s.tenant_id, s.partition, s.run_at, s.run_at,
                       'api', 1, 'scheduled', '', '', 0, '', '', '', ''
                FROM dispatch_schedule s WHERE s.tenant_id = %(t)s
                RETURNING id
                """,
                {"t": tenant.pk},
            )
        ]
        warm, ids = ids[:WARM_RUNS], ids[WARM_RUNS:]
        per_exec: list[tuple[float, int, int, str]] = []
        probe = _Probe()
        with (
            quiet_logs(),
            override_settings(
                TARGET_TEST_ALLOW=[receiver.allow_entry], TARGET_RATE_PER_HOST=UNLIMITED_RATE
            ),
        ):
            for eid in warm:
                runner.run_execution(execution_id=eid, attempt=1)
            with _instrumented(probe):
                for eid in ids:
                    with pgtrace.traced() as trips:
                        t0 = time.perf_counter()
                        outcome = runner.run_execution(execution_id=eid, attempt=1)
                        elapsed = (time.perf_counter() - t0) * 1000
                    per_exec.append((elapsed, trips.round_trips, len(trips.statements), outcome))
        live_log = _live_log_cost(ids)
    finally:
        cleanup_tenant(tenant.pk)
    outcomes = {o for *_, o in per_exec}
    if outcomes != {"succeeded"}:
        raise BenchError(f"e2e overhead: in-process runs ended {sorted(outcomes)}")

    def mean_of(name: str, field: int) -> float:
        calls = probe.calls[name]
        return statistics.fmean(c[field] for c in calls) if calls else 0.0

    steps = ("claim", "lease_check", "heartbeat", "complete")
    # Per execution: the lease statements' time (claim, any heartbeat, the finish).
    heartbeat_ms = sum(c[0] for c in probe.calls["heartbeat"]) / len(per_exec)  # none when fast
    lease_ms = [
        claim[0] + done[0] + heartbeat_ms
        for claim, done in zip(probe.calls["claim"], probe.calls["complete"], strict=True)
    ]
    db_ms = sum(sum(c[0] for c in probe.calls[s]) for s in steps) / len(per_exec)
    run_ms = statistics.fmean(e for e, *_ in per_exec)
    return {
        "n": k,
        "live_log": live_log,
        "db_round_trips_per_exec": statistics.fmean(r for _, r, _, _ in per_exec),
        "db_round_trips_max": max(r for _, r, _, _ in per_exec),
        "statements_per_exec": statistics.fmean(q for _, _, q, _ in per_exec),
        "claim_heartbeat_complete_ms": statistics.fmean(lease_ms),
        "claim_heartbeat_complete_p99_ms": percentile(lease_ms, 0.99),
        "db_ms_per_exec": db_ms,
        "run_total_ms": run_ms,
        "target_call_ms": mean_of("target_call", 0),
        "other_ms": run_ms - db_ms - mean_of("target_call", 0),
        "steps": {
            s: {
                "calls_per_exec": len(probe.calls[s]) / len(per_exec),
                "ms": mean_of(s, 0),
                "statements": mean_of(s, 1),
            }
            for s in steps
        },
    }


def report(result: dict[str, Any], data: dict[str, Any]) -> str:
    keys = [
        "n",
        "workers",
        "pool",
        "concurrency",
        "completed",
        "lost",
        "duplicated",
        "duplicate_deliveries",
        "completed_per_s",
        "celery_noop_per_s",
        "ratio_to_celery_noop",
    ]
    o = result["overhead"]
    steps = [{"step": s} | v for s, v in o["steps"].items()]
    pools = [result] + ([result["threads"]] if "threads" in result else [])
    return "\n".join(
        [
            table(pools, keys),
            "",
            f"worker-side overhead per execution ({o['n']} in-process runs of runner.run_execution):",
            table(steps, ["step", "calls_per_exec", "ms", "statements"]),
            f"claim + heartbeat + complete: {o['claim_heartbeat_complete_ms']:.2f} ms"
            f" (p99 {o['claim_heartbeat_complete_p99_ms']:.2f} ms);"
            f" all DB steps {o['db_ms_per_exec']:.2f} ms; {o['db_round_trips_per_exec']:.1f}"
            f" round trips ({o['statements_per_exec']:.1f} statements,"
            f" {o['db_round_trips_per_exec'] - o['statements_per_exec']:.1f} BEGIN/COMMIT;"
            f" at most {o['db_round_trips_max']}) per execution;"
            f" no-op HTTP call {o['target_call_ms']:.2f} ms; the rest of run_execution"
            f" {o['other_ms']:.2f} ms",
            _live_log_line(o.get("live_log")),
        ]
    )


def _live_log_line(cost: dict[str, Any] | None) -> str:
    if not cost:
        return ""
    return (
        f"live log of a command printing {cost['lines']} lines (80 B), per execution"
        f" ({cost['runs']} runs): fed {cost['feed_ms']:.2f} ms, sealed and kept"
        f" {cost['seal_keep_ms']:.2f} ms, {cost['redis_calls']:.0f} Redis calls;"
        f" {cost['per_line_us']:.1f} µs a line"
    )


def summary(data: dict[str, Any]) -> list[dict[str, Any]]:
    r = data.get(KEY)
    if not r or "completed_per_s" not in r:
        return []
    o = r.get("overhead") or {}
    rows: list[dict[str, Any]] = []
    for run in [r] + ([r["threads"]] if "threads" in r else []):
        name = (
            f"e2e {run['n']} ({run['workers']}x{run['concurrency']} {run.get('pool', 'prefork')})"
        )
        rows += [
            {
                "name": name,
                "figure": "completed/s vs celery no-op/s",
                "value": run["completed_per_s"],
                "ceiling": run.get("celery_noop_per_s"),
                "ratio": run.get("ratio_to_celery_noop"),
            },
            {
                "name": name,
                "figure": "lost / duplicated",
                "value": f"{run['lost']} / {run['duplicated']}",
            },
        ]
    name = f"e2e {r['n']} (in-process runner)"
    return [
        *rows,
        {
            "name": name,
            "figure": "claim+heartbeat+complete ms/exec",
            "value": o.get("claim_heartbeat_complete_ms"),
        },
        {"name": name, "figure": "DB round trips/exec", "value": o.get("db_round_trips_per_exec")},
        {
            "name": name,
            "figure": f"live log ms/exec ({LIVE_LOG_BENCH_LINES} lines)",
            "value": (o["live_log"]["feed_ms"] + o["live_log"]["seal_keep_ms"])
            if o.get("live_log")
            else None,
        },
    ]
