"""Every bench subcommand keeps working at a tiny size (numbers are not asserted:
timing goals live in `make bench`); what is asserted is the results file's shape
and that nothing was lost or duplicated where the bench counts it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dispatch.models import BeatNode, Execution, Schedule
from tenants.models import Tenant
from tests.support.procs import ROOT, child_env

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

TINY = [
    *("--limits-n", "300", "--limits-noop-n", "200"),
    *("--burst-n", "300", "--burst-beats", "1", "--burst-lead", "2"),
    *("--steady-rates", "50,100", "--steady-seconds", "2", "--steady-beats", "1"),
    *("--e2e-n", "30", "--e2e-concurrency", "2", "--e2e-overhead-n", "10"),
    *("--scale-small", "200", "--scale-large", "2000", "--scale-due", "5", "--scale-cycles", "3"),
    *("--scale-rss-seconds", "1"),
    *("--api-schedules", "20", "--api-rows", "2000", "--api-clients", "2"),
    *("--api-requests", "5", "--api-web-workers", "1"),
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


def numbers(*values: Any) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def nothing_left_behind() -> None:
    """Every bench removes its tenants' rows; only the API bench's tenant stays (deactivated)."""
    assert not Schedule.objects.exists()
    assert not Execution.objects.exists()
    assert not BeatNode.objects.filter(name__startswith="bench-").exists()
    left = list(Tenant.objects.values_list("slug", "active"))
    assert left in ([], [("bench-api", False)]), left


def test_bench_all_smoke(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    printed = bench(out, "all", "--skip", "flatten", *TINY, timeout=240)
    data = json.loads(out.read_text())

    limits = data["limits"]
    assert numbers(
        limits["pg_claim_rows_per_s"],
        limits["broker_publish_per_s"],
        limits["celery_noop_per_s_1proc"],
    )

    burst = data["burst_300"]
    assert burst["lost"] == 0 and burst["duplicated"] == 0
    assert burst["lag_p99_s"] >= 0 and "ratio_to_ceiling" in burst

    steady = data["steady"]
    assert [r["rate"] for r in steady["rates"]] == [50, 100]
    for r in steady["rates"]:
        assert r["n"] == r["rate"] * 2 and r["lost"] == 0 and r["duplicated"] == 0
        assert numbers(r["lag_p50_s"], r["lag_p99_s"], r["lag_max_s"])
    assert steady["sustained_rate_per_s"] in (0, 50, 100) and "ratio_to_ceiling" in steady

    e2e = data["e2e"]
    assert e2e["completed"] == e2e["succeeded"] == 30
    assert e2e["lost"] == 0 and e2e["duplicated"] == 0
    assert numbers(e2e["completed_per_s"], e2e["celery_noop_per_s"], e2e["ratio_to_celery_noop"])
    overhead = e2e["overhead"]
    assert overhead["n"] == 10 and set(overhead["steps"]) == {
        "claim",
        "event",
        "heartbeat",
        "complete",
    }
    assert overhead["db_round_trips_per_exec"] >= overhead["statements_per_exec"] >= 4
    assert numbers(overhead["claim_heartbeat_complete_ms"], overhead["db_ms_per_exec"])

    scale = data["scale"]
    assert scale["small"]["idle"] == 200 and scale["large"]["idle"] == 2000
    for size in ("small", "large"):
        assert scale[size]["published_per_cycle_min"] == 5
        assert numbers(scale[size]["cycle_mean_ms"], scale[size]["cycle_p95_ms"])
        assert scale[size]["beat_rss_mb"] > 0
    assert numbers(scale["ratio_large_small"]) and isinstance(scale["within_target"], bool)

    api = data["api"]
    assert api["schedules"] == 20 and api["rows"] == 2000
    assert numbers(api["create_per_s"], api["http_noop_per_s"], api["ratio_create_to_noop"])
    assert [p["depth"] for p in api["pages"]][:2] == ["first page", "page 2"]
    for page in api["pages"]:
        assert numbers(page["p50_ms"], page["p99_ms"]) and page["uses_index"]

    summary = data["summary"]
    assert summary["failed"] == []
    names = {row["name"].split()[0] for row in summary["rows"]}
    assert names == {"limits", "burst", "steady", "e2e", "scale", "api"}
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
        assert numbers(r["lag_p99_s"], r["peak_published_per_s"], r["peak_due_per_s"])
    assert flatten["flat"]["peak_due_per_s"] == 40
    assert flatten["spread"]["due_span_s"] <= 2
    nothing_left_behind()
