"""PostgreSQL fail-over under a firing platform: a Patroni cluster of the test's own
(tests/support/hacluster.py: etcd, two PostgreSQL 15 nodes, synchronous_mode), the
platform's schema migrated onto it, a beat and a worker reaching it through the
multi-host DATABASE_URL, and a steady stream of one-off jobs due while

* the primary's machine is lost (Patroni and every postgres process SIGKILLed): the
  leader key lapses after the ttl and the sync standby is promoted;
* a planned switchover moves the primary (Patroni's REST API);
* the primary's postmaster is SIGKILLed, its Patroni alive: restarted in place.

Judged from the new primary's records and the ledger (the receiver), as the failure
contract's chaos runs are: 0 lost occurrences, 0 duplicate execution records, every
effect at least once and its duplicates (if any) named by their execution id, firing
resumed after the fault, and no write a probe saw acknowledged missing afterwards
(synchronous_mode: RPO 0). The promotion time and the firing gap are measured, printed
and written to test-artifacts/hacluster-failover.json; they are a machine's figures,
bounded only by generous sanity limits.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.conf import settings

from tests.support import hacluster
from tests.support.hacluster import HACluster
from tests.support.ledger import Ledger
from tests.support.procs import (
    ROOT,
    Proc,
    beat_cmd,
    child_env,
    processes,
    wait_for,
    worker_cmd,
)
from tests.support.worker_support import QUEUES, purge

pytestmark = [pytest.mark.system, pytest.mark.chaos, pytest.mark.slow]

DB = "sched"
JOBS = 48
SPREAD_S = 18.0  # one job due every 0.375 s
LEAD_S = 4.0  # the first falls due this long after the seed
FAULT_AFTER = 8  # deliveries seen before the fault
LEDGER_DELAY_S = 0.3  # keeps calls in flight when the primary goes
# Sanity bounds, not targets: Patroni promotes after its ttl (10 s) at the latest.
PROMOTION_BOUND_S = 60.0
GAP_BOUND_S = 90.0
ARTIFACT = ROOT / "test-artifacts" / "hacluster-failover.json"
SETUP_S: dict[str, float] = {}  # the module cluster's boot and migration, seconds


@pytest.fixture(scope="module")
def cluster() -> Iterator[HACluster]:
    """One cluster for the module (booting and migrating it is most of the cost), the
    platform's schema migrated onto it through the multi-host URL."""
    why = hacluster.missing()
    if why:
        pytest.skip(why)
    t0 = time.monotonic()
    with HACluster() as ha:
        booted = time.monotonic() - t0
        with psycopg.connect(ha.url("postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {DB}")
        with psycopg.connect(ha.url(DB), autocommit=True) as conn:
            # The probe's rows (not the platform's): acknowledged commits a promotion must keep.
            conn.execute("CREATE TABLE ha_probe (id bigserial PRIMARY KEY)")
        t1 = time.monotonic()
        manage("migrate", "--no-input", "-v", "0", url=ha.url(DB))
        SETUP_S.update(boot=round(booted, 1), migrate=round(time.monotonic() - t1, 1))
        yield ha


@pytest.fixture
def healthy(cluster: HACluster) -> HACluster:
    """The cluster whole again whatever an earlier test did: every node up, a leader
    and a sync standby (a killed node rejoins as a standby)."""
    for name in cluster.nodes:
        cluster.start_node(name)
    cluster.wait_healthy(timeout=120)
    return cluster


def manage(*args: str, url: str, code: str = "") -> str:
    """`manage.py` against the cluster (`shell -c code` when `code` is given): its stdout."""
    cmd = [sys.executable, "manage.py", *args] + (["-c", code] if code else [])
    env = child_env(DATABASE_URL=url)
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    if out.returncode:
        raise AssertionError(f"{' '.join(args)} failed:\n{out.stdout[-3000:]}{out.stderr[-3000:]}")
    return out.stdout


SEED = """
import json
from tenants import services as tenant_services
from tenants.roles import Principal, Role
from tests.chaos import harness
tenant = tenant_services.tenant_create(slug={slug!r}, name={slug!r})
principal = Principal(tenant=tenant, role=Role.ADMIN, actor_kind="system", actor_id="test",
                      label="test:admin")
ids, _ = harness.create_jobs(principal, tenant, count={count}, spread_s={spread},
                             lead_s={lead}, url={url!r})
print("IDS=" + json.dumps(ids))
"""


def seed(url: str, *, slug: str, target: str) -> list[str]:
    """JOBS one-off jobs due over SPREAD_S, created through the platform's services on
    the cluster (the oracle: each must end with one succeeded execution)."""
    code = SEED.format(slug=slug, count=JOBS, spread=SPREAD_S, lead=LEAD_S, url=target)
    out = manage("shell", url=url, code=code)
    line = next(ln for ln in out.splitlines() if ln.startswith("IDS="))
    ids: list[str] = json.loads(line.removeprefix("IDS="))
    return ids


def respond(req: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    time.sleep(LEDGER_DELAY_S)
    return 200, {}, b"ok"


class Probe:
    """Writes one row through the multi-host URL every 0.1 s, on a new connection each
    time: when the platform's next connection finds a writable primary again, and
    (the rows whose commit was acknowledged) what a promotion must not lose."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.results: list[tuple[float, bool]] = []
        self.acked: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _write(self) -> int | None:
        try:
            with psycopg.connect(self.url, autocommit=True) as conn:
                row = conn.execute("INSERT INTO ha_probe DEFAULT VALUES RETURNING id").fetchone()
        except psycopg.Error:
            return None
        return int(row[0]) if row else None

    def _run(self) -> None:
        while not self._stop.is_set():
            at = time.time()
            written = self._write()
            self.results.append((at, written is not None))
            if written is not None:
                self.acked.append(written)
            self._stop.wait(0.1)

    def __enter__(self) -> Probe:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(10)

    def outage(self, since: float) -> tuple[float, float] | None:
        """(first failed write, first acknowledged write after it), both from `since`."""
        down = next((at for at, ok in self.results if at >= since and not ok), None)
        if down is None:
            return None
        up = next((at for at, ok in self.results if at > down and ok), None)
        return (down, up) if up is not None else None

    def lost(self) -> int:
        """Acknowledged rows the primary (the new one, after a promotion) does not have."""
        with psycopg.connect(self.url) as conn:
            row = conn.execute(
                "SELECT count(*) FROM ha_probe WHERE id = ANY(%s)", [self.acked]
            ).fetchone()
        return len(self.acked) - int(row[0] if row else 0)


def verdict(url: str, ids: list[str], ledger: Ledger) -> dict[str, Any]:
    """The figures, from the new primary's records and the ledger only."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT id::text, schedule_id::text, state, attempt,"
            " extract(epoch FROM started_at - due_at) AS late"
            " FROM dispatch_execution WHERE schedule_id::text = ANY(%s)",
            [ids],
        ).fetchall()
    per_occurrence = Counter(row[1] for row in rows)
    execution_ids = {row[0] for row in rows}
    deliveries = Counter({k: v for k, v in ledger.deliveries.items() if k in execution_ids})
    arrivals = sorted(
        req["at"]
        for req in ledger.requests
        if {k.lower(): v for k, v in req["headers"].items()}.get("x-execution-id") in execution_ids
    )
    lateness = sorted(float(row[4]) for row in rows if row[4] is not None)
    return {
        "occurrences": len(ids),
        "records": len(rows),
        "lost": sum(1 for sid in ids if per_occurrence[sid] == 0),
        "duplicate_records": sum(n - 1 for n in per_occurrence.values() if n > 1),
        "not_succeeded": sorted({row[2] for row in rows if row[2] != "succeeded"}),
        "retried": sum(1 for row in rows if row[3] > 1),
        "effects": len(deliveries),
        "duplicate_deliveries": {k: v for k, v in deliveries.items() if v > 1},
        "unknown_deliveries": sum(
            n for k, n in ledger.deliveries.items() if k and k not in execution_ids
        ),
        "arrivals": arrivals,
        "lateness_p50_s": round(lateness[len(lateness) // 2], 2) if lateness else None,
        "lateness_max_s": round(lateness[-1], 2) if lateness else None,
    }


def settled(url: str, ids: list[str]) -> Callable[[], bool]:
    def check() -> bool:
        try:
            with psycopg.connect(url) as conn:
                row = conn.execute(
                    "SELECT count(*) FROM dispatch_execution"
                    " WHERE schedule_id::text = ANY(%s) AND state = 'succeeded'",
                    [ids],
                ).fetchone()
        except psycopg.Error:
            return False
        return bool(row and row[0] >= len(ids))

    return check


def run_through_fault(
    ha: HACluster, tmp_path: Path, *, slug: str, fault: Callable[[], str]
) -> dict[str, Any]:
    """Seed the stream, start a beat and a worker on the cluster, run `fault` (it
    returns the new leader) once FAULT_AFTER calls went through, wait for every job
    to end; the figures."""
    url = ha.url(DB)
    purge(settings.CELERY_BROKER_URL)
    with Ledger(respond) as ledger, processes(tmp_path) as start:
        ids = seed(url, slug=slug, target=f"{ledger.url}/effect")
        env = {
            "DATABASE_URL": url,
            "SWEEP_INTERVAL_S": "0.5",
            "TARGET_TEST_ALLOW": ledger.allow_entry,
        }
        beat: Proc = start(
            "beat",
            beat_cmd(
                "--name", f"beat-{slug}", "--lease-ttl", "5", "--cycle", "0.2", "--lookahead", "5"
            ),
            **env,
        )
        worker: Proc = start(
            "worker", worker_cmd(queues=",".join(QUEUES), concurrency=2, name=f"w-{slug}"), **env
        )
        wait_for(lambda: " ready." in worker.output() or not worker.alive(), 60, what="worker")
        wait_for(lambda: len(ledger.requests) >= FAULT_AFTER, 60, what="the stream to flow")
        before = ha.leader()
        with Probe(url) as probe:
            t_fault = time.time()
            after = fault()
            t_leader = time.time()
            wait_for(settled(url, ids), 180, interval=0.5, what="every job to end")
        t_done = time.time()
        figures = verdict(url, ids, ledger)
        alive = {"beat": beat.alive(), "worker": worker.alive()}
    purge(settings.CELERY_BROKER_URL)

    arrivals = figures.pop("arrivals")
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    outage = probe.outage(t_fault)
    figures |= {
        "leader_before": before,
        "leader_after": after,
        "new_leader_after_s": round(t_leader - t_fault, 2),
        # From the fault until a new connection through the multi-host URL wrote again.
        "promotion_s": round(outage[1] - t_fault, 2) if outage else 0.0,
        "probe_writes_acknowledged": len(probe.acked),
        "probe_writes_lost": probe.lost(),
        "unwritable_s": round(outage[1] - outage[0], 2) if outage else 0.0,
        "firing_gap_s": round(max(gaps), 2) if gaps else None,
        "calls_after_fault": sum(1 for at in arrivals if at > t_fault),
        # Calls made after a new connection could write again: firing resumed there
        # (not only calls that were in flight when the primary went).
        "calls_after_recovery": sum(1 for at in arrivals if outage and at > outage[1]),
        "settled_after_s": round(t_done - t_fault, 1),
        "processes_alive": alive,
        "logs": str(tmp_path),
    }
    return figures


def record(name: str, figures: dict[str, Any]) -> None:
    ARTIFACT.parent.mkdir(exist_ok=True)
    found = json.loads(ARTIFACT.read_text()) if ARTIFACT.exists() else {}
    found[name] = figures
    ARTIFACT.write_text(json.dumps(found, indent=2, default=str))
    print(f"\n[{name}] {json.dumps(figures, default=str)}")


def assert_contract(figures: dict[str, Any]) -> None:
    # synchronous_mode: nothing whose commit was acknowledged is lost (RPO 0).
    assert figures["probe_writes_lost"] == 0, figures
    assert figures["lost"] == 0, figures
    assert figures["duplicate_records"] == 0, figures
    assert figures["not_succeeded"] == [], figures
    # Every effect at least once; a duplicate is the same execution id (and so
    # deduplicable by the receiver), never an unknown one.
    assert figures["effects"] == figures["occurrences"], figures
    assert figures["unknown_deliveries"] == 0, figures
    assert figures["calls_after_recovery"] > 0, figures  # firing resumed on the new primary
    assert all(figures["processes_alive"].values()), figures
    assert figures["firing_gap_s"] is not None and figures["firing_gap_s"] < GAP_BOUND_S, figures


@pytest.mark.timeout(420)
def test_losing_the_primarys_machine_loses_no_occurrence(
    healthy: HACluster, tmp_path: Path
) -> None:
    def kill_primary() -> str:
        leader = healthy.leader()
        assert leader is not None
        healthy.kill_node(leader)
        return healthy.wait_leader(other_than=leader, timeout=PROMOTION_BOUND_S)

    t0 = time.monotonic()
    figures = run_through_fault(healthy, tmp_path, slug="ha-kill", fault=kill_primary)
    figures["test_s"] = round(time.monotonic() - t0, 1)
    figures["cluster_setup_s"] = dict(SETUP_S)
    record("kill_primary_node", figures)
    assert_contract(figures)
    assert figures["leader_after"] != figures["leader_before"], figures  # the standby promoted
    assert 0 < figures["promotion_s"] < PROMOTION_BOUND_S, figures


@pytest.mark.timeout(420)
def test_a_planned_switchover_loses_no_occurrence(healthy: HACluster, tmp_path: Path) -> None:
    t0 = time.monotonic()
    figures = run_through_fault(healthy, tmp_path, slug="ha-switch", fault=healthy.switchover)
    figures["test_s"] = round(time.monotonic() - t0, 1)
    record("switchover", figures)
    assert_contract(figures)
    assert figures["leader_after"] != figures["leader_before"], figures
    assert figures["promotion_s"] < PROMOTION_BOUND_S, figures


@pytest.mark.timeout(420)
def test_a_crashed_primary_postgres_is_restarted_in_place_and_loses_no_occurrence(
    healthy: HACluster, tmp_path: Path
) -> None:
    """The primary's postmaster SIGKILLed, its Patroni alive: Patroni still holds the
    leader key and restarts it where it was (crash recovery), no promotion."""

    def kill_postmaster() -> str:
        leader = healthy.leader()
        assert leader is not None
        healthy.kill_postmaster(leader)
        return healthy.wait_leader(timeout=PROMOTION_BOUND_S)

    t0 = time.monotonic()
    figures = run_through_fault(healthy, tmp_path, slug="ha-crash", fault=kill_postmaster)
    figures["test_s"] = round(time.monotonic() - t0, 1)
    record("kill_primary_postmaster", figures)
    assert_contract(figures)
    assert figures["leader_after"] == figures["leader_before"], figures
    assert 0 < figures["promotion_s"] < PROMOTION_BOUND_S, figures
