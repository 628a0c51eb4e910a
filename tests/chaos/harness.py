"""The chaos harness: a small cluster (beats, workers, an idempotent receiver),
a workload of one-off jobs that is its own oracle, nemeses, and a checker.

Everything is measured from PostgreSQL (the truth, C7) and from the Ledger (what
the target actually saw); nothing is taken from the processes' own claims.
"""

from __future__ import annotations

import itertools
import json
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.db import connection, transaction

from dispatch import services
from dispatch.models import BeatNode, Execution, ExecutionEvent, Schedule, SchedulerPartition
from tenants.models import Tenant
from tenants.roles import Principal
from tests.procs import ROOT, Ledger, Proc, beat_cmd, wait_for, worker_cmd

# Short leases so that every failover fits in a CI run.
TTL = 3.0
CYCLE = 0.2
LOOKAHEAD = 2.0
SWEEP = 0.5
REPUBLISH = 3.0
EXEC_LEASE = 3.0
LEDGER_DELAY = 1.0  # keeps calls in flight when a worker is killed or paused
WORKER_CONCURRENCY = 4
RETRY = {"max_attempts": 5, "backoff": "fixed", "initial_s": 1, "max_s": 1}
# A beat's partitions are taken over after its lease expires (TTL), on the
# survivor's next cycle, and rows it left unpublished go out on that cycle or
# the next sweep.
FAILOVER_BOUND_S = TTL + CYCLE + SWEEP
FAILOVER_SLACK_S = 1.5
JOBS_PER_S = 2.5
NEMESIS_EVERY_S = 11.0
RESULTS = ROOT / "chaos-results.json"


def db_now() -> datetime:
    with connection.cursor() as cur:
        cur.execute("SELECT clock_timestamp()")
        value: datetime = cur.fetchone()[0]
    return value


def owned_by(name: str) -> list[int]:
    return sorted(SchedulerPartition.objects.filter(owner=name).values_list("number", flat=True))


def running_on(worker: str) -> list[str]:
    return [
        str(e)
        for e in Execution.objects.filter(
            state="running", lease_owner__startswith=f"{worker}:"
        ).values_list("id", flat=True)
    ]


@dataclass
class Fault:
    kind: str
    victim: str
    at: datetime  # database clock; start of the window the failover is measured in
    partitions: list[int] = field(default_factory=list)
    executions: list[str] = field(default_factory=list)
    replacement: str = ""
    notes: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "victim": self.victim,
            "at": self.at.isoformat(),
            "partitions": self.partitions,
            "executions_in_flight": self.executions,
            "replacement": self.replacement,
            **self.notes,
        }


class Cluster:
    """Beats and workers as real subprocesses; nemeses that hurt them and restore capacity."""

    def __init__(self, start: Callable[..., Proc], ledger: Ledger) -> None:
        self.start = start
        self.ledger = ledger
        self.beats: dict[str, Proc] = {}
        self.workers: dict[str, Proc] = {}
        self.faults: list[Fault] = []
        self._seq = itertools.count(1)

    # --- processes -------------------------------------------------------------------

    def add_beat(self, prefix: str = "beat", **env: str) -> str:
        name = f"{prefix}-{next(self._seq)}"
        cmd = beat_cmd(
            "--name",
            name,
            "--lease-ttl",
            str(TTL),
            "--cycle",
            str(CYCLE),
            "--lookahead",
            str(LOOKAHEAD),
        )
        self.beats[name] = self.start(
            name, cmd, SWEEP_INTERVAL_S=str(SWEEP), QUEUED_REPUBLISH_S=str(REPUBLISH), **env
        )
        return name

    def add_worker(self) -> str:
        name = f"w{next(self._seq)}"
        proc = self.start(
            name,
            worker_cmd(concurrency=WORKER_CONCURRENCY, name=name),
            EXECUTION_LEASE_S=str(int(EXEC_LEASE)),
            WORKER_ID=name,
            TARGET_TEST_ALLOW=self.ledger.allow_entry,
        )
        deadline = time.monotonic() + 30
        while " ready." not in proc.output():
            if not proc.alive() or time.monotonic() > deadline:
                raise AssertionError(f"worker {name} did not start:\n{proc.output()[-3000:]}")
            time.sleep(0.1)
        self.workers[name] = proc
        return name

    def wait_even_split(self, partitions: int) -> None:
        def even() -> bool:
            counts = Counter(
                SchedulerPartition.objects.exclude(owner="").values_list("owner", flat=True)
            )
            return sum(counts.values()) == partitions and set(counts) == set(self.beats)

        wait_for(even, timeout=30, what="the beats to share every partition")

    def _busiest_beat(self, exclude: set[str] = frozenset()) -> str:  # type: ignore[assignment]
        live = [n for n, p in self.beats.items() if p.alive() and n not in exclude]
        return max(live, key=lambda n: len(owned_by(n)))

    def _busy_worker(self, timeout: float = 15) -> tuple[str, list[str]]:
        def find() -> tuple[str, list[str]] | None:
            for name in self.workers:
                ids = running_on(name)
                if ids:
                    return name, ids
            return None

        found: tuple[str, list[str]] = wait_for(find, timeout=timeout, what="a worker mid-call")
        return found

    # --- nemeses ---------------------------------------------------------------------

    def beat_kill(self) -> Fault:
        """kill -9 the beat owning the most partitions; a fresh beat replaces it."""
        victim = self._busiest_beat()
        parts = owned_by(victim)
        proc = self.beats.pop(victim)
        proc.kill()
        fault = Fault("beat_kill_9", victim, db_now(), parts)
        t0 = time.monotonic()
        wait_for(
            lambda: not set(parts) & set(owned_by(victim)) and not owned_by(victim),
            timeout=TTL * 5,
            what=f"{victim}'s partitions taken over",
        )
        fault.notes["takeover_observed_s"] = round(time.monotonic() - t0, 2)
        fault.replacement = self.add_beat()
        return fault

    def beat_pause(self) -> Fault:
        """SIGSTOP a beat past its lease, then SIGCONT: its next write must be fenced."""
        victim = self._busiest_beat()
        parts = owned_by(victim)
        node = BeatNode.objects.get(name=victim)
        before = node.stale_writes_rejected
        proc = self.beats[victim]
        proc.pause()
        fault = Fault("beat_sigstop", victim, db_now(), parts)
        time.sleep(TTL + 2)
        proc.resume()
        try:
            wait_for(
                lambda: BeatNode.objects.get(name=victim).stale_writes_rejected > before,
                timeout=10,
                what=f"{victim}'s stale write rejected",
            )
            fault.notes["fenced_after_resume"] = True
        except AssertionError:
            fault.notes["fenced_after_resume"] = False
        fault.notes["paused_s"] = TTL + 2
        return fault

    def beat_crash(self) -> Fault:
        """A beat that dies right after committing a firing (before publishing), replaced."""
        started = db_now()
        victim = self.add_beat("crash", SCHED_FAULT_POINT="after_fire_commit")
        proc = self.beats.pop(victim)
        wait_for(lambda: not proc.alive(), timeout=30, what="the fault point to kill the beat")
        # Its leases outlive it: the partitions still name it until they expire.
        fault = Fault("beat_crash_after_fire_commit", victim, started, owned_by(victim))
        fault.notes["returncode"] = proc.proc.returncode
        fault.executions = [
            str(e) for e in Execution.objects.filter(fired_by=victim).values_list("id", flat=True)
        ]
        fault.replacement = self.add_beat()
        return fault

    def worker_kill(self) -> Fault:
        """kill -9 a worker (and its pool) while it waits on the target; a fresh one replaces it."""
        victim, _ = self._busy_worker()
        proc = self.workers.pop(victim)
        proc.kill()
        # Read after the signal: exactly the calls the dead worker left running.
        fault = Fault("worker_kill_9", victim, db_now(), executions=running_on(victim))
        fault.replacement = self.add_worker()
        return fault

    def worker_pause(self) -> Fault:
        """SIGSTOP a worker mid-call past its execution lease, then SIGCONT."""
        victim, _ = self._busy_worker()
        proc = self.workers[victim]
        proc.pause()
        # Read after the signal: the stopped worker can no longer finish any of these.
        fault = Fault("worker_sigstop", victim, db_now(), executions=running_on(victim))
        time.sleep(EXEC_LEASE + 3)
        proc.resume()
        fault.notes["paused_s"] = EXEC_LEASE + 3
        return fault

    NEMESES = ("beat_kill", "beat_pause", "worker_kill", "worker_pause", "beat_crash")

    def inject(self, kind: str) -> Fault:
        fault: Fault = getattr(self, kind)()
        self.faults.append(fault)
        print(f"[chaos] {fault.kind} victim={fault.victim} replacement={fault.replacement or '-'}")
        return fault


# --- workload ----------------------------------------------------------------------------


def create_jobs(
    principal: Principal, tenant: Tenant, *, count: int, spread_s: float, lead_s: float, url: str
) -> tuple[list[str], datetime]:
    """One-off jobs due over the run: the oracle (each must end with one succeeded execution).

    A loopback receiver cannot pass the save-time SSRF check (by design), so each
    job is saved with a placeholder target and pointed at the ledger in the same
    transaction — no beat ever sees the placeholder.
    """
    tenant.quota.max_schedules = count + 100
    tenant.quota.max_concurrent = count + 100
    tenant.quota.save()
    base = db_now() + timedelta(seconds=lead_s)
    ids: list[str] = []
    target = {"type": "http", "url": url, "method": "POST", "timeout_s": 10}
    for i in range(count):
        run_at = base + timedelta(seconds=spread_s * i / max(1, count))
        with transaction.atomic():
            job, _ = services.job_create(
                actor=principal,
                data={
                    "name": f"chaos-{i}",
                    "run_at": run_at,
                    "target": {"type": "http", "url": "https://billing.internal/hook"},
                    "retry": RETRY,
                },
            )
            Schedule.objects.filter(pk=job.pk).update(target=target, timeout_s=10)
        ids.append(str(job.id))
    return ids, base + timedelta(seconds=spread_s)


def settled(job_ids: list[str]) -> bool:
    return Execution.objects.filter(schedule_id__in=job_ids, state="succeeded").count() >= len(
        job_ids
    )


# --- checker -----------------------------------------------------------------------------


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def check(
    job_ids: list[str], ledger: Ledger, faults: list[Fault], *, runtime_s: float
) -> dict[str, Any]:
    rows = list(
        Execution.objects.filter(schedule_id__in=job_ids).values(
            "id",
            "schedule_id",
            "state",
            "attempt",
            "partition",
            "due_at",
            "enqueued_at",
            "fired_by",
            "fired_epoch",
            "fencing_token",
        )
    )
    per_schedule = Counter(str(r["schedule_id"]) for r in rows)
    states = Counter(r["state"] for r in rows)
    succeeded = {str(r["schedule_id"]) for r in rows if r["state"] == "succeeded"}
    lost = sorted(set(job_ids) - succeeded)
    schedule_of = {str(r["id"]): str(r["schedule_id"]) for r in rows}

    # The target's view: deliveries and effects per execution and per occurrence.
    deliveries: Counter[str] = Counter()
    attempts_seen: dict[str, set[str]] = defaultdict(set)
    for req in ledger.requests:
        headers = {k.lower(): v for k, v in req["headers"].items()}
        eid = headers.get("x-execution-id", "")
        deliveries[eid] += 1
        attempts_seen[eid].add(headers.get("x-attempt", "?"))
    executions_per_occurrence: Counter[str] = Counter(
        schedule_of.get(eid, f"unknown:{eid}") for eid in deliveries
    )
    duplicate_effects = sum(n - 1 for n in ledger.effects.values() if n > 1) + sum(
        n - 1 for n in executions_per_occurrence.values() if n > 1
    )
    unknown_deliveries = sorted(eid for eid in deliveries if eid not in schedule_of)

    # Fencing: stale writes rejected (beats count theirs; workers leave events) and
    # stale writes that got through (must be none).
    beat_rejected = sum(BeatNode.objects.values_list("stale_writes_rejected", flat=True))
    worker_rejected = ExecutionEvent.objects.filter(
        kind="fencing_rejected", schedule_id__in=job_ids
    ).count()
    with connection.cursor() as cur:
        cur.execute(
            "SELECT partition, fired_epoch FROM dispatch_execution WHERE fired_epoch IS NOT NULL "
            "GROUP BY 1, 2 HAVING count(DISTINCT fired_by) > 1"
        )
        shared_epochs = [list(r) for r in cur.fetchall()]
    success_events = Counter(
        str(e)
        for e in ExecutionEvent.objects.filter(
            kind="attempt_succeeded", schedule_id__in=job_ids
        ).values_list("execution_id", flat=True)
    )
    double_success = sorted(eid for eid, n in success_events.items() if n > 1)
    stale_accepted = len(shared_epochs) + len(double_success)

    # Fire lateness: first publish minus due time.
    lateness = {
        str(r["id"]): (r["enqueued_at"] - r["due_at"]).total_seconds()
        for r in rows
        if r["enqueued_at"] is not None
    }
    late = list(lateness.values())

    # Failover: the worst lateness among executions of the victim's partitions due
    # in the window after a beat fault.
    failovers = []
    for f in faults:
        if not f.kind.startswith("beat_"):
            continue
        window_end = f.at + timedelta(seconds=TTL * 2 + LOOKAHEAD + 2)
        hit = [
            lateness[str(r["id"])]
            for r in rows
            if r["partition"] in f.partitions
            and f.at <= r["due_at"] <= window_end
            and str(r["id"]) in lateness
        ]
        failovers.append(
            {
                "kind": f.kind,
                "victim": f.victim,
                "executions_in_window": len(hit),
                "max_lateness_s": round(max(hit), 3) if hit else None,
            }
        )
    failover_values = [x["max_lateness_s"] for x in failovers if x["max_lateness_s"] is not None]

    # Worker faults: the in-flight executions must have been retried and fenced, not lost.
    worker_faults = []
    for f in faults:
        if not f.kind.startswith("worker_"):
            continue
        ex = {str(r["id"]): r for r in rows if str(r["id"]) in set(f.executions)}
        worker_faults.append(
            {
                "kind": f.kind,
                "victim": f.victim,
                "in_flight": len(f.executions),
                "final_states": dict(Counter(r["state"] for r in ex.values())),
                "max_attempt": max((r["attempt"] for r in ex.values()), default=0),
                "fencing_rejected_events": ExecutionEvent.objects.filter(
                    kind="fencing_rejected", execution_id__in=f.executions
                ).count(),
            }
        )

    return {
        "profile": {
            "jobs": len(job_ids),
            "runtime_s": round(runtime_s, 1),
            "lease_ttl_s": TTL,
            "cycle_s": CYCLE,
            "sweep_s": SWEEP,
            "execution_lease_s": EXEC_LEASE,
            "ledger_delay_s": LEDGER_DELAY,
        },
        "faults_by_kind": dict(Counter(f.kind for f in faults)),
        "faults": [f.as_dict() for f in faults],
        "occurrences": {
            "expected": len(job_ids),
            "executed": len(succeeded),
            "skipped": states.get("skipped", 0),
            "lost": len(lost),
            "lost_ids": lost,
            "states": dict(states),
            "retried": sum(1 for r in rows if r["attempt"] > 1),
        },
        "duplicate_execution_records": sum(n - 1 for n in per_schedule.values() if n > 1),
        "deliveries": {
            "total": sum(deliveries.values()),
            "duplicate": sum(n - 1 for n in deliveries.values() if n > 1),
            "unknown_execution": len(unknown_deliveries),
        },
        "duplicate_effects": duplicate_effects,
        "stale_writes": {
            "rejected_by_beats": beat_rejected,
            "rejected_by_workers": worker_rejected,
            "accepted": stale_accepted,
            "attempted": beat_rejected + worker_rejected + stale_accepted,
            "epochs_shared_by_two_beats": shared_epochs,
            "executions_succeeded_twice": double_success,
        },
        "failover": {
            "bound_s": FAILOVER_BOUND_S,
            "slack_s": FAILOVER_SLACK_S,
            "max_s": max(failover_values) if failover_values else None,
            "per_fault": failovers,
        },
        "worker_faults": worker_faults,
        "lateness_s": {
            "n": len(late),
            "without_enqueued_at": len(rows) - len(late),
            "p50": round(_pct(late, 0.50), 3),
            "p99": round(_pct(late, 0.99), 3),
            "max": round(max(late), 3) if late else 0.0,
            "mean": round(statistics.fmean(late), 3) if late else 0.0,
        },
    }


def table(r: dict[str, Any]) -> str:
    occ, st, lat, fo = r["occurrences"], r["stale_writes"], r["lateness_s"], r["failover"]
    lines = [
        ("faults injected", ", ".join(f"{k}={v}" for k, v in r["faults_by_kind"].items())),
        ("occurrences expected", occ["expected"]),
        ("executed (succeeded)", occ["executed"]),
        ("skipped", occ["skipped"]),
        ("LOST", occ["lost"]),
        ("retried (attempt > 1)", occ["retried"]),
        ("DUPLICATE execution records", r["duplicate_execution_records"]),
        (
            "deliveries total / duplicate",
            f"{r['deliveries']['total']} / {r['deliveries']['duplicate']}",
        ),
        ("DUPLICATE effects", r["duplicate_effects"]),
        (
            "stale writes attempted = rejected",
            f"{st['attempted']} = {st['rejected_by_beats']} (beats) + "
            f"{st['rejected_by_workers']} (workers); accepted {st['accepted']}",
        ),
        (
            "failover max vs bound",
            f"{fo['max_s']} s vs {fo['bound_s']} s (+{fo['slack_s']} slack)",
        ),
        (
            "fire lateness p50/p99/max",
            f"{lat['p50']} / {lat['p99']} / {lat['max']} s (n={lat['n']})",
        ),
        ("runtime", f"{r['profile']['runtime_s']} s"),
    ]
    width = max(len(k) for k, _ in lines)
    out = [f"{'figure'.ljust(width)} | value", f"{'-' * width}-+-{'-' * 40}"]
    out += [f"{k.ljust(width)} | {v}" for k, v in lines]
    for f in fo["per_fault"]:
        out.append(
            f"{('  failover ' + f['kind']).ljust(width)} | {f['max_lateness_s']} s "
            f"({f['executions_in_window']} executions in window, victim {f['victim']})"
        )
    for w in r["worker_faults"]:
        out.append(
            f"{('  ' + w['kind']).ljust(width)} | in flight {w['in_flight']}, final "
            f"{w['final_states']}, max attempt {w['max_attempt']}, "
            f"fencing_rejected {w['fencing_rejected_events']}"
        )
    return "\n".join(out)


def write(results: dict[str, Any], path: Path = RESULTS) -> None:
    path.write_text(json.dumps(results, indent=2, default=str))
