"""Every bench subcommand keeps working at a tiny size (timing goals are not asserted:
they live in `make bench`); what is asserted is what the inputs fix exactly (counts,
sizes, nothing lost or duplicated where the bench counts it), that every figure is a
real measurement (finite, positive; percentiles in order), and that each derived
figure (ratios, verdicts, the sustained rate) is the one its inputs give."""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from dispatch.models import BeatNode, Execution, Schedule
from tenants.models import Tenant
from tests.support.history import restore_days
from tests.support.procs import ROOT, child_env

pytestmark = [pytest.mark.system, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def days_back() -> Iterator[None]:
    """The benches build history in the past in its day partitions (as a deployment
    keeping that long has them): put back the layout a fresh test database has."""
    yield
    restore_days()


TINY = [
    *("--limits-n", "300", "--limits-noop-n", "200"),
    *("--burst-n", "300", "--burst-beats", "1", "--burst-lead", "2"),
    *("--steady-rates", "50,100", "--steady-seconds", "2", "--steady-beats", "1"),
    *("--e2e-n", "30", "--e2e-concurrency", "2", "--e2e-overhead-n", "10"),
    *("--scale-small", "200", "--scale-large", "2000", "--scale-due", "5", "--scale-cycles", "3"),
    *("--scale-rss-seconds", "1"),
    *("--api-schedules", "20", "--api-rows", "2000", "--api-clients", "2"),
    *("--api-requests", "5", "--api-web-workers", "1"),
    # The cron burst at one beat count; lead = stage-ahead + 30 s, then up to a minute.
    *("--scaling-n", "200", "--scaling-beats", "1", "--scaling-stage-ahead", "5"),
]


def bench(out: Path, *args: str, timeout: float) -> str:
    res = subprocess.run(
        [sys.executable, "manage.py", "bench", *args, "--json", str(out)],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    return res.stdout


def measured(*values: Any) -> bool:
    """Real measurements: finite numbers above zero (not NaN, not a bool, not missing)."""
    return all(
        isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0
        for v in values
    )


def ordered(*values: float) -> bool:
    """Percentiles of one sample: each at most the next (p50 <= p99 <= max)."""
    return all(a <= b for a, b in itertools.pairwise(values))


def ratio_of(value: float, ceiling: float) -> Any:
    return pytest.approx(value / ceiling, rel=1e-9)


def nothing_left_behind() -> None:
    """Every bench removes its tenants' rows; only the API bench's tenant stays (deactivated)."""
    assert not Schedule.objects.exists()
    assert not Execution.objects.exists()
    assert not BeatNode.objects.filter(name__startswith="bench-").exists()
    # The API and backfill benches' tenants hold audit rows (append-only): they stay, deactivated.
    left = set(Tenant.objects.values_list("slug", "active"))
    assert left <= {("bench-api", False), ("bench-backfill", False)}, left


def test_bench_all_smoke(tmp_path: Path) -> None:
    fresh_indexes()
    out = tmp_path / "bench.json"
    # flatten, runs, backfill and retention have tests of their own below; scaling runs
    # the cron burst.
    skip = "flatten,runs,backfill,retention,cronburst"
    printed = bench(out, "all", "--skip", skip, *TINY, timeout=360)
    data = json.loads(out.read_text())

    broker = settings.CELERY_BROKER_URL.split(":")[0]
    # Where and when, stored with the figures (the docs' benchmarks page states them).
    machine = data["machine"]
    assert machine["cpus"] == os.cpu_count() and machine["memory_gib"] > 0
    assert machine["recorded_at"].endswith("+00:00") and machine["postgresql"]
    limits = data["limits"]
    assert limits["n"] == 300 and limits["celery_noop_n"] == 200 and limits["broker"] == broker
    assert measured(
        limits["pg_raw_claim_rows_per_s"],
        limits["raw_publish_redis_per_s"],
        limits["beat_claim_rows_per_s"],
        limits["beat_publish_per_s"],
        limits["celery_noop_per_s_1proc"],
    )
    assert limits["raw_publish_window"] == 1000
    # Measured on RabbitMQ only where there is one (RABBITMQ_URL or the broker itself).
    assert limits["raw_publish_amqp_per_s"] is None or measured(limits["raw_publish_amqp_per_s"])
    # Dispatch is bounded by the lower of raw claim and the broker's raw publish.
    raw_publish = limits[f"raw_publish_{'amqp' if broker.startswith('amqp') else 'redis'}_per_s"]
    ceiling = min(limits["pg_raw_claim_rows_per_s"], raw_publish)
    bound = "raw claim (PostgreSQL)" if ceiling < raw_publish else "raw publish"

    burst = data["burst_300"]
    assert burst["n"] == 300 and burst["beats"] == 1 and burst["broker"] == broker
    assert burst["lost"] == 0 and burst["duplicated"] == 0
    assert ordered(burst["lag_p50_s"], burst["lag_p95_s"], burst["lag_p99_s"], burst["lag_max_s"])
    assert burst["lag_mean_s"] <= burst["lag_max_s"]
    assert measured(burst["dispatch_per_s"], burst["create_s"])
    assert burst["ratio_to_ceiling"] == ratio_of(burst["dispatch_per_s"], ceiling)
    assert burst["ceiling_per_s"] == ceiling and burst["bound"].startswith(bound)
    # One due instant for every row (one timestamp parameter), a whole second.
    assert "." not in burst["due_at"]

    steady = data["steady"]
    assert steady["seconds"] == 2 and steady["beats"] == 1 and steady["p99_target_s"] == 1.0
    assert [r["rate"] for r in steady["rates"]] == [50, 100]
    for r in steady["rates"]:
        assert r["n"] == r["rate"] * 2 and r["lost"] == 0 and r["duplicated"] == 0
        assert ordered(r["lag_p50_s"], r["lag_p99_s"], r["lag_max_s"])
        assert measured(r["published_per_s"])
        # Nothing lost or duplicated: the rate is sustained exactly when p99 met the target.
        assert r["sustained"] is (r["lag_p99_s"] < steady["p99_target_s"]), r
    sustained = max((r["rate"] for r in steady["rates"] if r["sustained"]), default=0)
    assert steady["sustained_rate_per_s"] == sustained
    assert steady["ratio_to_ceiling"] == ratio_of(sustained, ceiling)
    assert 0 <= steady["ratio_to_ceiling"] < 1  # 100/s at most, against thousands per second

    e2e = data["e2e"]
    assert (e2e["n"], e2e["workers"], e2e["concurrency"]) == (30, 1, 2)
    assert e2e["completed"] == e2e["succeeded"] == 30 and e2e["retried"] == 0
    assert e2e["lost"] == 0 and e2e["duplicated"] == 0
    assert e2e["duplicate_deliveries"] == 0  # counted by the receiver, per X-Execution-Id
    assert measured(e2e["span_s"], e2e["completed_per_s"], e2e["celery_noop_per_s"])
    assert e2e["completed_per_s"] == ratio_of(e2e["succeeded"], e2e["span_s"])
    assert e2e["ratio_to_celery_noop"] == ratio_of(e2e["completed_per_s"], e2e["celery_noop_per_s"])
    assert ordered(e2e["due_to_finished_p50_s"], e2e["due_to_finished_p99_s"])
    threads = e2e["threads"]  # the same run on the threads pool (bench/e2e.py)
    assert threads["pool"] == "threads" and threads["n"] == 30
    assert threads["completed"] == threads["succeeded"] == 30 and threads["lost"] == 0
    assert threads["duplicated"] == 0 and threads["duplicate_deliveries"] == 0
    assert measured(threads["completed_per_s"], threads["celery_noop_per_s"])
    assert threads["ratio_to_celery_noop"] == ratio_of(
        threads["completed_per_s"], threads["celery_noop_per_s"]
    )
    overhead = e2e["overhead"]
    steps = overhead["steps"]
    assert overhead["n"] == 10 and set(steps) == {"claim", "lease_check", "heartbeat", "complete"}
    # A no-op call costs the claim and the fenced finish, nothing else (issue 19).
    assert overhead["db_round_trips_per_exec"] == overhead["db_round_trips_max"] == 2
    assert overhead["statements_per_exec"] == 2
    for name in ("claim", "complete"):
        step = steps[name]
        assert step["calls_per_exec"] == 1 and step["statements"] == 1
        assert measured(step["ms"]), step
    # The claim's reply came in time: it was the lease check; no heartbeat was due.
    assert steps["lease_check"]["calls_per_exec"] == 1 and steps["lease_check"]["statements"] == 0
    assert steps["heartbeat"]["calls_per_exec"] == 0
    assert measured(overhead["claim_heartbeat_complete_ms"], overhead["db_ms_per_exec"])
    # A command's 1,000 printed lines: fed in two 64 KiB reads (two appends), sealed,
    # kept and discarded, on each of the overhead run's executions.
    live_log = overhead["live_log"]
    assert (live_log["lines"], live_log["runs"], live_log["redis_calls"]) == (1000, 10, 4)
    assert measured(live_log["feed_ms"], live_log["seal_keep_ms"], live_log["per_line_us"])

    scale = data["scale"]
    assert scale["small"]["idle"] == 200 and scale["large"]["idle"] == 2000
    assert scale["due_per_cycle"] == 5 and scale["cycles"] == 3 and scale["target_ratio"] == 1.5
    for size in ("small", "large"):
        assert scale[size]["published_per_cycle_min"] == 5
        assert measured(scale[size]["cycle_mean_ms"], scale[size]["cycle_p95_ms"])
        assert scale[size]["cycle_mean_ms"] <= scale[size]["cycle_max_ms"]
        assert ordered(scale[size]["cycle_p95_ms"], scale[size]["cycle_max_ms"])
        assert scale[size]["beat_rss_mb"] > 0
    cycle_ratio = scale["large"]["cycle_mean_ms"] / scale["small"]["cycle_mean_ms"]
    assert scale["ratio_large_small"] == pytest.approx(cycle_ratio, rel=1e-9)
    assert scale["within_target"] is (cycle_ratio <= scale["target_ratio"])

    api = data["api"]
    assert api["schedules"] == 20 and api["rows"] == 2000
    assert api["clients"] == 2 and api["web_workers"] == 1
    assert measured(api["create_per_s"], api["http_noop_per_s"])
    assert api["ratio_create_to_noop"] == ratio_of(api["create_per_s"], api["http_noop_per_s"])
    assert [p["depth"] for p in api["pages"]][:2] == ["first page", "page 2"]
    for page in api["pages"]:
        assert measured(page["p50_ms"], page["p99_ms"]) and ordered(page["p50_ms"], page["p99_ms"])
        assert page["uses_index"] and not page["seq_scan"], page

    r = data["scaling"]
    assert r["n"] == 200 and r["beat_counts"] == [1] and r["stage_ahead_s"] == 5
    (cron,) = r["runs"]
    assert cron["beats"] == 1 and cron["broker"] == "redis"
    # Exactly one published execution per schedule for the boundary, nothing else fired.
    assert cron["executions"] == cron["published"] == 200
    assert cron["lost"] == 0 and cron["duplicated"] == 0 and cron["other_occurrences"] == 0
    assert cron["lead_s"] >= 30 and cron["boundary"].endswith(":00+00:00")
    assert ordered(cron["lag_p50_s"], cron["lag_p95_s"], cron["lag_p99_s"], cron["lag_max_s"])
    assert ordered(cron["published_lag_p50_s"], cron["published_lag_p99_s"])
    assert measured(cron["dispatch_per_s"], cron["create_s"], cron["beat_peak_rss_mb"])
    # Published no earlier than due, from rows made before it.
    assert cron["first_publish_s"] >= 0 and cron["staged_ahead_p1_s"] > 0
    assert r["ceiling_per_s"] == cron["ceiling_per_s"] == ceiling
    assert cron["ratio_to_ceiling"] == ratio_of(cron["dispatch_per_s"], ceiling)

    summary = data["summary"]
    assert summary["failed"] == []
    names = {row["name"].split()[0] for row in summary["rows"]}
    assert names == {"limits", "burst", "scaling", "steady", "e2e", "scale", "api"}
    # Each summary ratio is its figure over the ceiling shown next to it.
    with_ceiling = [row for row in summary["rows"] if row.get("ceiling")]
    assert {row["name"].split()[0] for row in with_ceiling} >= {
        "burst",
        "scaling",
        "steady",
        "e2e",
        "api",
    }
    for row in with_ceiling:
        assert row["ratio"] == ratio_of(row["value"], row["ceiling"]), row
    assert "== summary" in printed
    nothing_left_behind()


def test_bench_flatten_smoke(tmp_path: Path) -> None:
    """Cron occurrences are whole minutes: this one waits for two of them (60-125 s)."""
    out = tmp_path / "bench.json"
    bench(out, "flatten", "--n", "40", "--jitter", "2", "--beats", "1", timeout=240)
    flatten = json.loads(out.read_text())["flatten"]
    assert flatten["n"] == 40 and flatten["jitter_s"] == 2
    for variant, jitter in (("flat", 0), ("spread", 2)):
        r = flatten[variant]
        assert r["jitter_s"] == jitter and r["lost"] == 0 and r["duplicated"] == 0
        assert ordered(r["lag_p50_s"], r["lag_p99_s"], r["lag_max_s"])
        assert 0 < r["peak_due_per_s"] <= 40 and 0 < r["peak_published_per_s"] <= 40, r
    assert flatten["flat"]["peak_due_per_s"] == 40 and flatten["flat"]["due_span_s"] == 0
    assert 0 < flatten["spread"]["due_span_s"] <= 2
    # Spread over 2 s, the 40 are not all due in one second any more.
    assert flatten["spread"]["peak_due_per_s"] < 40
    assert flatten["p99_spread_over_flat"] == ratio_of(
        flatten["spread"]["lag_p99_s"], flatten["flat"]["lag_p99_s"]
    )
    assert flatten["peak_spread_over_flat"] == ratio_of(
        flatten["spread"]["peak_published_per_s"], flatten["flat"]["peak_published_per_s"]
    )
    nothing_left_behind()


def fresh_indexes() -> None:
    """The smokes check plan choices (an index, never a seq scan), which the indexes'
    size moves: the suite's reset between tests (tests/support/dbreset.py) DELETEs rows
    and leaves the indexes as large as earlier tests made them, where TRUNCATE gave new
    ones. Rebuilt (the tables are empty here, so it is instant), they are as on a fresh
    database, the one `make bench` measures."""
    with connection.cursor() as cur:
        cur.execute("REINDEX TABLE dispatch_execution")
        cur.execute("REINDEX TABLE dispatch_schedule")


def test_bench_runs_smoke(tmp_path: Path) -> None:
    fresh_indexes()
    out = tmp_path / "bench.json"
    printed = bench(
        out, "runs", "--rows", "20000", "--schedules", "50", "--requests", "3", timeout=240
    )
    runs = json.loads(out.read_text())["runs"]
    assert runs["rows"] == 20000 and runs["tenant_rows"] == 14000 and runs["schedules"] == 50
    # The measured tenant holds 70 % of the rows: 14,000 > the cap of 10,000.
    counts = {c["case"]: c for c in runs["count"]}
    assert counts["no filter"]["total"] == 10_000 and counts["no filter"]["capped"] is True
    assert 0 < counts["state=dead"]["total"] < 14000 and counts["state=dead"]["capped"] is False
    cases = {c["case"]: c for c in runs["cases"]}
    assert cases["no filter"]["rows"] == 50 and cases["page 2 (cursor)"]["rows"] == 50
    assert cases["state=dead"]["rows"] == 50 and cases["rerun=true"]["rows"] > 0
    for case in runs["cases"]:
        assert measured(case["p50_ms"], case["p95_ms"]) and ordered(case["p50_ms"], case["p95_ms"])
        assert case["uses_index"] and not case["seq_scan"], case
    assert runs["missing_index"] == []
    assert "capped total" in printed
    # The other pages over the same history, timed from a fresh connection on.
    reads = {r["case"]: r for r in runs["reads"]}
    assert set(reads) == {
        "dashboard (usage, running, failures)",
        "/metrics (every collector)",
        "ops: dead executions",
    }
    for read in runs["reads"]:
        assert measured(read["first_ms"], read["p50_ms"]), read
        assert ordered(read["p50_ms"], read["p95_ms"]), read
    assert "other reads of the same history" in printed
    nothing_left_behind()


def test_bench_backfill_smoke(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    printed = bench(out, "backfill", "--n", "200", "--max-concurrent", "50", timeout=240)
    r = json.loads(out.read_text())["backfill"]
    assert r["n"] == 200 and r["max_concurrent"] == 50
    # 50 released per round, then one round that finds nothing active and ends it.
    assert r["pump_rounds"] == 200 // 50 + 1
    assert measured(r["plan_s"], r["create_backfill_s"], r["pump_s"], r["plan_existing_s"])
    assert r["create_rows_per_s"] == ratio_of(200, r["pump_s"])
    assert r["plan_per_s"] == ratio_of(200, r["plan_s"])
    assert r["skip_existing_per_s"] == ratio_of(200, r["skip_existing_pump_s"])
    assert ordered(r["pump_round_p50_ms"], r["pump_round_max_ms"])
    assert "create_rows_per_s" in printed
    nothing_left_behind()


def test_bench_retention_smoke(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    printed = bench(out, "retention", "--n", "3000", "--baseline-s", "1", timeout=300)
    r = json.loads(out.read_text())["retention"]
    assert r["n"] == 3000 and r["events"] == 6000
    # The whole day archived (one file per table: one tenant) and dropped...
    assert r["archive"]["dropped"] is True and r["archive"]["waiting"] == ""
    assert r["archive"]["files"] == 2 and r["archive"]["bytes"] > 0
    # ...and the same rows again, deleted row by row.
    assert (r["delete"]["executions"], r["delete"]["events"]) == (3000, 6000)
    for phase in ("baseline", "archive", "delete"):
        p = r[phase]
        assert p["cycles"] > 0 and measured(p["p50_ms"], p["p99_ms"], p["max_ms"])
        assert ordered(p["p50_ms"], p["p99_ms"], p["max_ms"])
    for phase in ("archive", "delete"):
        assert measured(r[phase]["seconds"])
        assert r[phase]["p99_ratio"] == ratio_of(r[phase]["p99_ms"], r["baseline"]["p99_ms"])
    assert "archive + detach + drop" in printed
    nothing_left_behind()
