"""The chaos run (RELIABILITY.md "Figures to report for a chaos run").

Two beats and two workers run a workload of one-off jobs while nemeses kill,
pause and crash them; afterwards the checker reads PostgreSQL and the ledger.
Short profile (default, ~2 min): each nemesis once. DURATION=<s> for a soak:
more jobs, and the nemesis cycle repeats while the workload lasts.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from tenants.models import Tenant
from tenants.roles import Principal
from tests.chaos import harness
from tests.integration.worker_support import purge
from tests.procs import Ledger, processes, wait_for

DURATION = float(os.environ.get("DURATION", "60"))

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def ledger() -> Iterator[Ledger]:
    def respond(req: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        time.sleep(harness.LEDGER_DELAY)
        return 200, {}, b"ok"

    ledger = Ledger(respond)
    # A killed worker leaves its call's socket closed under the reply: expected, not news.
    ledger.server.handle_error = lambda request, client_address: None  # type: ignore[method-assign]
    yield ledger
    ledger.close()


@pytest.mark.timeout(int(DURATION * 3 + 240))
def test_chaos_run(
    tmp_path: Path, ledger: Ledger, admin_principal: Principal, tenant: Tenant
) -> None:
    purge(settings.CELERY_BROKER_URL)
    started = time.monotonic()
    with processes(tmp_path) as start:
        cluster = harness.Cluster(start, ledger)
        cluster.add_beat()
        cluster.add_beat()
        cluster.wait_even_split(settings.SCHEDULER_PARTITIONS)
        cluster.add_worker()
        cluster.add_worker()

        count = int(DURATION * harness.JOBS_PER_S)
        t0 = time.monotonic()
        job_ids, last_due = harness.create_jobs(
            admin_principal,
            tenant,
            count=count,
            spread_s=DURATION,
            lead_s=6.0,
            url=f"{ledger.url}/effect",
        )
        # Nemeses every NEMESIS_EVERY_S while jobs keep coming due; each once at least.
        plan = list(harness.Cluster.NEMESES)
        rounds = max(1, int((DURATION - 6) // (harness.NEMESIS_EVERY_S * len(plan))))
        for i, kind in enumerate(plan * rounds):
            at = t0 + 8 + i * harness.NEMESIS_EVERY_S
            time.sleep(max(0.0, at - time.monotonic()))
            cluster.inject(kind)
        try:
            wait_for(
                lambda: harness.settled(job_ids),
                timeout=max(30.0, (last_due - harness.db_now()).total_seconds() + 40),
                interval=0.5,
                what="every job to succeed",
            )
        except AssertionError as exc:
            print(f"[chaos] not settled: {exc}")
        time.sleep(2)  # late deliveries of fenced-out workers reach the ledger
        results = harness.check(
            job_ids, ledger, cluster.faults, runtime_s=time.monotonic() - started
        )
        results["logs"] = str(tmp_path)
        results["processes_alive_at_end"] = {
            n: p.alive() for n, p in {**cluster.beats, **cluster.workers}.items()
        }
    purge(settings.CELERY_BROKER_URL)
    results["profile"]["runtime_s"] = round(time.monotonic() - started, 1)
    harness.write(results)
    print("\n" + harness.table(results) + f"\n(JSON: {harness.RESULTS}; logs: {tmp_path})")

    occ, stale, fo = results["occurrences"], results["stale_writes"], results["failover"]
    assert occ["lost"] == 0, occ["lost_ids"]
    assert results["duplicate_execution_records"] == 0
    assert results["duplicate_effects"] == 0
    assert results["deliveries"]["unknown_execution"] == 0
    assert stale["accepted"] == 0, stale
    assert stale["epochs_shared_by_two_beats"] == []
    assert all(f.get("fenced_after_resume", True) for f in results["faults"]), results["faults"]
    assert all(f.get("returncode", 137) == 137 for f in results["faults"]), results["faults"]
    for w in results["worker_faults"]:
        # Every call the fault interrupted was retried (attempt 2+, same execution) and succeeded.
        assert w["in_flight"] >= 1 and w["final_states"] == {"succeeded": w["in_flight"]}, w
        assert w["max_attempt"] >= 2, w
        if w["kind"] == "worker_sigstop":
            # The woken worker's heartbeat/completion was refused, once per stolen execution.
            assert w["fencing_rejected_events"] >= w["in_flight"], w
    assert fo["max_s"] is not None
    assert fo["max_s"] <= fo["bound_s"] + fo["slack_s"], fo
