"""PostgreSQL fail-over under a firing platform: a Patroni cluster of the test's own
(tests/support/hacluster.py: etcd, two PostgreSQL 15 nodes, synchronous_mode), the
platform's schema migrated onto it, a beat and a worker reaching it through the
multi-host DATABASE_URL, and a steady stream of one-off jobs due while

* the primary's machine is lost (Patroni and every postgres process SIGKILLed): the
  leader key lapses after the ttl and the sync standby is promoted;
* a planned switchover moves the primary (Patroni's REST API);
* the primary's postmaster is SIGKILLed, its Patroni alive: restarted in place;
* the primary is cut off from the cluster (its links to etcd and to the standby
  black-holed) while the platform can still reach it: Patroni demotes it, the standby
  is promoted, and the old primary must acknowledge none of the writes sent to it.

Meanwhile two API clients (the Python client, its default retries) create, read and
list jobs through a web process on the same URL: every request must succeed after
retries, and the only error status the web may answer is 503.

Judged from the new primary's records and the ledger (the receiver), as the failure
contract's chaos runs are: 0 lost occurrences, 0 duplicate execution records, every
effect at least once and its duplicates (if any) named by their execution id, firing
resumed after the fault, and no write a probe saw acknowledged missing afterwards
(synchronous_mode: RPO 0). The promotion time and the firing gap are measured, printed
and written to test-artifacts/hacluster-failover.json; they are a machine's figures,
bounded only by generous sanity limits. Stale writes accepted (an epoch shared by two
beats, an attempt finished twice) and effect calls under a revoked fencing token are
counted as the chaos suite counts them, and must be 0.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.conf import settings

from tests.support import hacluster
from tests.support.beat_support import SHARED_EPOCHS
from tests.support.client_support import Load, drive
from tests.support.hacluster import HACluster
from tests.support.ledger import Ledger, calls_under_revoked_token, ok
from tests.support.procs import (
    ROOT,
    Proc,
    WebServer,
    beat_cmd,
    manage,
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
# The burst nemesis's size: HA_BURST_JOBS=10000 is the figure (minutes on two
# cores); CI runs a smaller one through the same path.
BURST_JOBS = int(os.environ.get("HA_BURST_JOBS", "2000"))
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
        cluster.heal(name)
        cluster.start_node(name)
    cluster.wait_healthy(timeout=120)
    return cluster


SEED = """
import json
from tenants import services as tenant_services
from tenants.roles import Principal, Role
from tests.chaos import harness
tenant = tenant_services.tenant_create(slug={slug!r}, name={slug!r})
principal = Principal(tenant=tenant, role=Role.ADMIN, actor_kind="system", actor_id="test",
                      label="test:admin")
if {burst}:
    ids = harness.create_held_jobs(principal, tenant, count={burst}, url={url!r})
else:
    ids, _ = harness.create_jobs(principal, tenant, count={count}, spread_s={spread},
                                 lead_s={lead}, url={url!r})
tenant.quota.max_schedules = 100000  # room for the API load's jobs too
tenant.quota.save()
_, token = tenant_services.token_issue(tenant=tenant, name="api-load", role=Role.ADMIN)
print("SEEDED=" + json.dumps({{"ids": ids, "token": token}}))
"""


def seed(url: str, *, slug: str, target: str, burst: int = 0) -> tuple[list[str], str]:
    """JOBS one-off jobs due over SPREAD_S (or `burst` jobs held back, for `release`),
    created through the platform's services on the cluster (the oracle: each must end
    with one succeeded execution), and a token of the tenant's for the API load."""
    code = SEED.format(slug=slug, count=JOBS, spread=SPREAD_S, lead=LEAD_S, url=target, burst=burst)
    out = manage("shell", url=url, code=code)
    line = next(ln for ln in out.splitlines() if ln.startswith("SEEDED="))
    seeded = json.loads(line.removeprefix("SEEDED="))
    return list(seeded["ids"]), str(seeded["token"])


def release(url: str, ids: list[str], lead_s: float) -> None:
    """Make every held job due at one instant, `lead_s` from now by the database's clock."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "UPDATE dispatch_schedule SET run_at = t.at, next_run_at = t.at"
            " FROM (SELECT now() + make_interval(secs => %s) AS at) t WHERE id::text = ANY(%s)",
            [lead_s, ids],
        )


def later_job(target: str) -> Callable[[str], dict[str, Any]]:
    """The API load's jobs: due tomorrow (they never compete with the stream), aimed at
    the ledger (a target the web accepts here)."""

    def body(key: str) -> dict[str, Any]:
        run_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 86400))
        return {
            "idempotency_key": key,
            "run_at": run_at,
            "target": {"type": "http", "url": target, "method": "POST"},
        }

    return body


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
        self.acked_at: list[float] = []  # when each acknowledgement came back
        self.failed_at: list[float] = []  # when each failed write's error came back
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
                self.acked_at.append(time.time())
            else:
                self.failed_at.append(time.time())
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

    def lost(self, on: str | None = None) -> int:
        """Acknowledged rows the primary (the new one, after a promotion; `on`, a URL,
        if not the probe's own) does not have."""
        with psycopg.connect(on or self.url) as conn:
            row = conn.execute(
                "SELECT count(*) FROM ha_probe WHERE id = ANY(%s)", [self.acked]
            ).fetchone()
        return len(self.acked) - int(row[0] if row else 0)


def verdict(url: str, ids: list[str], ledger: Ledger) -> dict[str, Any]:
    """The figures, from the new primary's records and the ledger only."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT id::text, schedule_id::text, state, attempt,"
            " extract(epoch FROM started_at - due_at) AS late,"
            " round(extract(epoch FROM scheduled_for) * 1000)"
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
    # A call under an execution id the new primary never heard of (its creation lost with
    # an asynchronous standby) must still name one of the occurrences it knows.
    instants = {int(row[5]) for row in rows}
    strays = [
        headers.get("x-scheduled-for", "")
        for headers in (
            {k.lower(): v for k, v in req["headers"].items()} for req in ledger.requests
        )
        if headers.get("x-execution-id") and headers["x-execution-id"] not in execution_ids
    ]
    strays_of_no_occurrence = [
        at
        for at in strays
        if not at
        or round(datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp() * 1000)
        not in instants
    ]
    with psycopg.connect(url) as conn:
        # Fencing, as the chaos suite judges it: an epoch two beats fired under, an
        # attempt recorded as succeeded twice, a call under a superseded token.
        shared_epochs = conn.execute(SHARED_EPOCHS, {"ids": ids}).fetchall()
        double_success = conn.execute(
            "SELECT execution_id FROM dispatch_executionevent"
            " WHERE kind = 'attempt_succeeded' AND schedule_id::text = ANY(%s)"
            " GROUP BY 1 HAVING count(*) > 1",
            [ids],
        ).fetchall()
        bumps: dict[str, list[tuple[float, int]]] = {}
        for eid, at, token in conn.execute(
            "SELECT execution_id::text, extract(epoch FROM at), data->>'fencing_token'"
            " FROM dispatch_executionevent WHERE kind IN ('claimed', 'timed_out')"
            " AND schedule_id::text = ANY(%s) AND data ? 'fencing_token'",
            [ids],
        ):
            bumps.setdefault(eid, []).append((float(at), int(token)))
    return {
        "occurrences": len(ids),
        "records": len(rows),
        "lost": sum(1 for sid in ids if per_occurrence[sid] == 0),
        "duplicate_records": sum(n - 1 for n in per_occurrence.values() if n > 1),
        "not_succeeded": sorted({row[2] for row in rows if row[2] != "succeeded"}),
        "retried": sum(1 for row in rows if row[3] > 1),
        "effects": len(deliveries),
        "duplicate_deliveries": {k: v for k, v in deliveries.items() if v > 1},
        "unknown_deliveries": len(strays),
        "unknown_deliveries_of_no_occurrence": strays_of_no_occurrence,
        "arrivals": arrivals,
        "lateness_p50_s": round(lateness[len(lateness) // 2], 2) if lateness else None,
        "lateness_max_s": round(lateness[-1], 2) if lateness else None,
        "stale_writes_accepted": len(shared_epochs) + len(double_success),
        "calls_under_revoked_token": calls_under_revoked_token(ledger.requests, bumps),
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


API_CLIENTS = 2


def run_through_fault(
    ha: HACluster,
    tmp_path: Path,
    *,
    slug: str,
    fault: Callable[[], str],
    heal: Callable[[], None] | None = None,
    burst: int = 0,
) -> dict[str, Any]:
    """Seed the stream, start a beat, a worker and a web on the cluster with API_CLIENTS
    clients calling the web, run `fault` (it returns the new leader) once FAULT_AFTER
    calls went through, wait for every job to end, `heal` (a cut-off node back) and
    wait for the cluster to be whole; the figures. With `burst`, that many jobs fall due
    at one instant instead of the stream, and the fault strikes once a fifth ran."""
    url = ha.url(DB)
    purge(settings.CELERY_BROKER_URL)
    loads = [Load() for _ in range(API_CLIENTS)]
    stop = threading.Event()
    # A burst's calls are answered at once: its length is the platform's, not the ledger's.
    with Ledger(ok if burst else respond) as ledger, processes(tmp_path) as start:
        ids, token = seed(url, slug=slug, target=f"{ledger.url}/effect", burst=burst)
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
            "worker",
            worker_cmd(queues=",".join(QUEUES), concurrency=4 if burst else 2, name=f"w-{slug}"),
            **env,
        )
        web = WebServer(
            start, WEB_WORKERS="1", WEB_THREADS="4", API_RATE_LIMIT="1000000/min", **env
        )
        clients = [
            threading.Thread(
                target=drive,
                args=(web.url, token, f"{slug}-{n}", load, stop, later_job(f"{ledger.url}/later")),
            )
            for n, load in enumerate(loads)
        ]
        for client in clients:
            client.start()
        wait_for(lambda: " ready." in worker.output() or not worker.alive(), 60, what="worker")
        if burst:
            release(url, ids, lead_s=3.0)
        strike_at = burst // 5 if burst else FAULT_AFTER
        wait_for(lambda: len(ledger.requests) >= strike_at, 60 + burst / 20, what="the calls")
        before = ha.leader()
        with Probe(url) as probe:
            t_fault = time.time()
            after = fault()
            t_leader = time.time()
            wait_for(settled(url, ids), 180 + burst / 5, interval=0.5, what="every job to end")
        t_done = time.time()
        stop.set()
        for client in clients:
            client.join(120)
        if heal is not None:
            heal()
            ha.wait_healthy(timeout=120)
        rejoined_s = time.time() - t_done
        figures = verdict(url, ids, ledger)
        # After the heal: every process still up, and the web still answers.
        status, _, _ = web.request("GET", "/readyz")
        alive = {
            "beat": beat.alive(),
            "worker": worker.alive(),
            "web": web.proc.alive() and status == 200,
        }
    purge(settings.CELERY_BROKER_URL)

    arrivals = figures.pop("arrivals")
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    outage = probe.outage(t_fault)
    statuses = Counter(st for load in loads for st in load.recorder.statuses())
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
        "api_statuses": {str(k): v for k, v in sorted(statuses.items(), key=str)},
        "api_errors": [e.error for load in loads for e in load.recorder.exchanges if e.error],
        "api_failed_after_retries": [repr(f) for load in loads for f in load.failures],
        "api_jobs_made": sum(len(load.keys) for load in loads),
        "api_slowest_call_s": round(max(load.slowest_s for load in loads), 1),
        "processes_alive": alive,
        "logs": str(tmp_path),
    }
    if heal is not None:
        figures["healed_and_whole_after_s"] = round(rejoined_s, 1)
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
    assert figures["stale_writes_accepted"] == 0, figures
    assert figures["calls_under_revoked_token"] == [], figures
    # The API through the window: every call made it within the client's retries, and
    # the web answered nothing but successes and 503s (no 500, no dropped connection).
    assert figures["api_failed_after_retries"] == [], figures
    assert set(figures["api_statuses"]) <= {"200", "201", "503"}, figures
    assert figures["api_errors"] == [], figures
    assert figures["api_jobs_made"] > 0, figures


def crash_primary(ha: HACluster) -> Callable[[], str]:
    """The fault: SIGKILL the primary's postmaster (its Patroni lives on); the leader after."""

    def kill_postmaster() -> str:
        leader = ha.leader()
        assert leader is not None
        ha.kill_postmaster(leader)
        return ha.wait_leader(timeout=PROMOTION_BOUND_S)

    return kill_postmaster


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

    t0 = time.monotonic()
    figures = run_through_fault(healthy, tmp_path, slug="ha-crash", fault=crash_primary(healthy))
    figures["test_s"] = round(time.monotonic() - t0, 1)
    record("kill_primary_postmaster", figures)
    assert_contract(figures)
    assert figures["leader_after"] == figures["leader_before"], figures
    assert 0 < figures["promotion_s"] < PROMOTION_BOUND_S, figures


@pytest.mark.timeout(1800)
def test_a_primary_crashed_mid_burst_loses_and_repeats_no_occurrence(
    healthy: HACluster, tmp_path: Path
) -> None:
    """BURST_JOBS one-off jobs due at one instant (the top of a minute), the primary's
    postmaster SIGKILLed once a fifth of them have run: every occurrence runs once."""

    t0 = time.monotonic()
    figures = run_through_fault(
        healthy, tmp_path, slug="ha-burst", fault=crash_primary(healthy), burst=BURST_JOBS
    )
    figures["test_s"] = round(time.monotonic() - t0, 1)
    record("kill_primary_postmaster_mid_burst", figures)
    assert figures["occurrences"] == BURST_JOBS
    assert_contract(figures)
    assert figures["calls_after_fault"] > 0, figures  # the fault struck mid-burst


LAG_S = 3.0  # how long the asynchronous standby falls behind before the primary is lost


@pytest.mark.timeout(480)
def test_losing_an_asynchronous_primary_repeats_calls_but_loses_no_occurrence(
    healthy: HACluster, tmp_path: Path
) -> None:
    """Asynchronous replication, the documented alternative: the standby's link black-
    holed for LAG_S while the primary goes on acknowledging, then the primary's machine
    lost. The promoted standby lacks those seconds of acknowledged writes (the probe's
    prove it), and the platform's state steps back: a firing, claim or finish made in
    them happens again. The contract: a repeated call (under the same execution id, or
    one the new primary never knew naming a known occurrence), never a lost occurrence."""

    def lag_then_lose_the_primary() -> str:
        leader = healthy.leader()
        assert leader is not None
        # The standby replicates through the address the leader advertises: cut it.
        link = healthy.nodes[leader].links["postgresql"]
        link.blackhole()
        time.sleep(LAG_S)
        healthy.kill_node(leader)
        # What the link held back dies with the machine (the proxy would deliver it late).
        link.reset()
        link.pass_()
        return healthy.wait_leader(other_than=leader, timeout=PROMOTION_BOUND_S)

    # Patroni would not promote a standby further behind than maximum_lag_on_failover:
    # room for LAG_S of this load's WAL.
    healthy.configure(synchronous_mode=False, maximum_lag_on_failover=256 * 1024 * 1024)
    wait_for(lambda: healthy.sync_standby() is None, 30, what="asynchronous replication")
    t0 = time.monotonic()
    try:
        figures = run_through_fault(
            healthy, tmp_path, slug="ha-async", fault=lag_then_lose_the_primary
        )
    finally:
        for name in healthy.nodes:
            healthy.start_node(name)
        healthy.wait_leader(timeout=120)
        healthy.configure(synchronous_mode=True, maximum_lag_on_failover=1024 * 1024)
    figures["test_s"] = round(time.monotonic() - t0, 1)
    record("kill_asynchronous_primary_node", figures)
    # The fault did cost acknowledged writes: this is the asynchronous case.
    assert figures["probe_writes_lost"] > 0, figures
    # ... and no occurrence: each has one record on the new primary and succeeded there.
    assert figures["lost"] == 0, figures
    assert figures["duplicate_records"] == 0, figures
    assert figures["not_succeeded"] == [], figures
    assert figures["effects"] == figures["occurrences"], figures
    # A call under an execution id the new primary lacks still names a known occurrence
    # (X-Scheduled-For): a target deduplicating on the occurrence sees it once.
    assert figures["unknown_deliveries_of_no_occurrence"] == [], figures
    assert figures["stale_writes_accepted"] == 0, figures
    assert figures["calls_after_recovery"] > 0, figures
    assert all(figures["processes_alive"].values()), figures
    # The API: no 500 (a job acknowledged in the lost seconds may be gone: not asserted).
    assert not any(int(st) >= 500 and st != "503" for st in figures["api_statuses"]), figures


PLATFORM_TABLES = ("dispatch_execution", "dispatch_executionevent", "dispatch_schedule")


def commits_since(url: str, since: float) -> dict[str, int] | None:
    """Rows of the platform's tables that node `url` committed after `since` (epoch
    seconds, by its own clock: track_commit_timestamp), or None if it runs no
    PostgreSQL that answers (stopped by Patroni: it accepts nothing either)."""
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            return {
                table: int(
                    conn.execute(
                        f"SELECT count(*) FROM {table}"  # noqa: S608 - the module's constants
                        " WHERE pg_xact_commit_timestamp(xmin) > to_timestamp(%s)",
                        [since],
                    ).fetchone()[0]  # type: ignore[index]
                )
                for table in PLATFORM_TABLES
            }
    except psycopg.OperationalError:
        return None


@pytest.mark.timeout(480)
def test_a_primary_cut_off_from_its_cluster_accepts_no_write_after_the_promotion(
    healthy: HACluster, tmp_path: Path
) -> None:
    """A network partition: the primary loses etcd and its standby but the platform can
    still reach it. It must acknowledge nothing once cut off (its sync standby cannot
    confirm) and commit nothing after the standby's promotion (Patroni demotes it when
    it cannot renew the leader key, before the key lapses); the platform moves to the
    new primary; the old one rejoins as a standby when the partition heals."""
    seen: dict[str, Any] = {}

    def cut_off() -> str:
        leader = healthy.leader()
        assert leader is not None
        # A client that stays on the old primary whatever it becomes.
        seen["old"], seen["probe"] = leader, Probe(healthy.node_url(leader, DB)).__enter__()
        time.sleep(1.0)  # its writes acknowledged before the cut, as a baseline
        seen["t_cut"] = time.time()
        healthy.cut_off(leader)
        new = healthy.wait_leader(other_than=leader, timeout=PROMOTION_BOUND_S)
        seen["t_promoted"] = healthy.promoted_at(new, after=seen["t_cut"])
        return new

    def heal() -> None:
        # What the old primary committed after the cut and after the promotion, read
        # on it before the heal rewinds it onto the new primary's timeline.
        old = healthy.node_url(seen["old"], DB)
        seen["committed_after_cut"] = commits_since(old, seen["t_cut"])
        seen["committed_after_promotion"] = commits_since(old, seen["t_promoted"])
        healthy.heal(seen["old"])

    t0 = time.monotonic()
    try:
        figures = run_through_fault(healthy, tmp_path, slug="ha-cut", fault=cut_off, heal=heal)
    finally:
        if "probe" in seen:
            seen["probe"].__exit__(None, None, None)
    old_probe: Probe = seen["probe"]
    acks = old_probe.acked_at
    refused = next((at for at in old_probe.failed_at if at >= seen["t_cut"]), None)
    figures |= {
        # When a write to the old primary first failed (a commit waiting on the cut-off
        # standby fails when Patroni demotes it): its last moment as a primary.
        "old_primary_demoted_after_cut_s": round(refused - seen["t_cut"], 2) if refused else None,
        "old_primary_acks_before_cut": sum(1 for at in acks if at < seen["t_cut"]),
        "old_primary_acks_after_cut": sum(1 for at in acks if at >= seen["t_cut"]),
        "old_primary_acks_after_promotion": sum(1 for at in acks if at >= seen["t_promoted"]),
        "old_primary_acked_rows_lost": old_probe.lost(on=healthy.url(DB)),
        "old_primary_committed_after_cut": seen["committed_after_cut"],
        "old_primary_committed_after_promotion": seen["committed_after_promotion"],
        "promoted_after_cut_s": round(seen["t_promoted"] - seen["t_cut"], 2),
        "test_s": round(time.monotonic() - t0, 1),
    }
    record("cut_off_primary", figures)
    assert_contract(figures)
    assert figures["leader_after"] != figures["leader_before"], figures
    assert 0 < figures["promotion_s"] < PROMOTION_BOUND_S, figures
    assert figures["old_primary_acks_before_cut"] > 0, figures  # the probe did reach it
    # Nothing acknowledged by the old primary after the promotion; what it acknowledged
    # before the cut is on the new primary (synchronous_mode).
    assert figures["old_primary_acks_after_promotion"] == 0, figures
    # ... and it stopped being a primary before the standby became one (Patroni demotes
    # after retry_timeout without etcd; the leader key lapses only after the ttl).
    demoted = figures["old_primary_demoted_after_cut_s"]
    assert demoted is not None and demoted < figures["promoted_after_cut_s"], figures
    assert figures["old_primary_acked_rows_lost"] == 0, figures
    # No platform row committed on it after the promotion (None: Patroni keeps its
    # PostgreSQL stopped while it cannot reach etcd, so it commits nothing at all).
    committed = figures["old_primary_committed_after_promotion"]
    assert committed is None or sum(committed.values()) == 0, figures
