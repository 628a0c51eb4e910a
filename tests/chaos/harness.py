"""The chaos harness: a small cluster (beats, workers, an idempotent receiver),
a workload of one-off jobs that is its own oracle, nemeses, and a checker.

Everything is measured from PostgreSQL (the truth, C7) and from the Ledger (what
the target actually saw); nothing is taken from the processes' own claims.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import signal
import statistics
import subprocess
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from django.db import connection, transaction
from django.db.models import F

from dispatch import services
from dispatch.models import BeatNode, Execution, ExecutionEvent, Schedule, SchedulerPartition
from dispatch.services.jobs import BATCH_MAX, job_create_batch
from tenants.models import Tenant
from tenants.roles import Principal
from tests.chaos.servers import OwnRabbit, OwnRedis, Postgres
from tests.support.beat_support import SHARED_EPOCHS, covered_by
from tests.support.faultproxy import FaultProxy, database_target
from tests.support.ledger import Ledger, calls_under_revoked_token
from tests.support.procs import ROOT, Proc, beat_cmd, wait_for, worker_cmd
from tests.support.worker_support import db_now

# Short leases so that every failover fits in a CI run.
TTL = 3.0
CYCLE = 0.2
# Pre-staged firing (issue 19): beats stage half the run's spread ahead, so beats die,
# pause and lose the database holding staged heaps.
LOOKAHEAD = 30.0
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
# Rows due this soon after a beat fault show its failover. Not widened by LOOKAHEAD:
# rows the victim had staged further ahead are reloaded by the new owner before they
# fall due, and a 38 s window took in the lateness of the next nemeses (a worker cut
# off from PostgreSQL, 10 s) and called it failover.
FAILOVER_WINDOW_S = TTL * 2 + 4.0
JOBS_PER_S = 2.5
NEMESIS_EVERY_S = 8.0  # the short profile: each nemesis once, this far apart
REDIS_BACKLOG_S = 1.5  # workers held this long (< EXEC_LEASE) so the broker has a backlog to lose
# RabbitMQ pushes messages to held workers up to their prefetch: a burst this big, due
# at once while they are held, leaves some waiting in the node's queues at the kill.
BROKER_BURST = 12
PG_OUTAGE_S = TTL + 1.5  # longer than a beat lease: every beat must re-earn its partitions
SKEW_S = 300  # host clock skewed ±5 min (failure contract C5: docs/explanation/failure-contract.md)
PG_BLACKHOLE_S = EXEC_LEASE + 3  # the victim's leases lapse: its executions run elsewhere
PG_LATENCY_MS = 300  # added to every PostgreSQL round trip (150 ms each way)
PG_LATENCY_S = 10.0
HEAL_S = 20.0  # a healed process must get through what it held within this
BROKER_BLACKHOLE_S = 4.0
# A beat's broker link black-holed mid-publish for longer than a lease: it must keep
# renewing (or release its partitions), never freeze until a takeover fences it.
# CHAOS_BROKER_BLACKHOLE_S lengthens it: 35 s is the issue-32 figure's outage, where
# only handing the partitions over (BEAT_PUBLISH_STALL_S) keeps them on time.
BEAT_BROKER_BLACKHOLE_S = float(os.environ.get("CHAOS_BROKER_BLACKHOLE_S", "") or TTL + 2)
RENEWAL_GAP_BOUND_S = TTL * 2 / 3  # a third of the lease still left at every renewal
# What came due in a broker-black-holed beat's partitions must reach the target within
# this (issue 32: p99 <= 10 s with a 35 s black-hole and another beat healthy).
HANDOVER_LATENESS_TARGET_S = 10.0
PUBLISH_PATTERN = b"dispatch.run_execution"  # in every message the beat publishes
PARTITIONED_EXIT_S = 5.0  # SIGTERM to a partitioned beat at the end: exited or hung
NETWORK_WIDE = ("pg_latency", "pg_reset")  # faults on every process's database link
# Beat faults in which the victim keeps (or hands back) its partitions: no failover.
NOT_FAILOVER = ("beat_broker_blackhole",)
RESULTS = ROOT / "chaos-results.json"


def owned_by(name: str) -> list[int]:
    return sorted(SchedulerPartition.objects.filter(owner=name).values_list("number", flat=True))


def running_on(worker: str, *, oracle_only: bool = False) -> list[str]:
    running = Execution.objects.filter(state="running", lease_owner__startswith=f"{worker}:")
    if oracle_only:
        running = running.exclude(schedule__name__startswith="hostile-")
    return [str(e) for e in running.values_list("id", flat=True)]


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

    def __init__(
        self,
        start: Callable[..., Proc],
        ledger: Ledger,
        *,
        log_dir: Path,
        redis: OwnRedis,
        broker_url: str,
        pg: Postgres,
        api_token: str,
        rabbit: OwnRabbit | None = None,
        pg_proxy: FaultProxy | None = None,
    ) -> None:
        self.start = start
        self.rabbit = rabbit  # the run's own RabbitMQ node, when it is the broker
        # Set by the run: creates n oracle jobs due now (their ids land in extra_jobs).
        self.burst: Callable[[int], list[str]] | None = None
        self.extra_jobs: list[str] = []
        self.broker_url = broker_url
        self.ledger = ledger
        self.log_dir = log_dir
        self.redis = redis
        self.pg = pg
        self.api_token = api_token
        # Every process talks to the run's own Redis (and broker): restarting it hurts nobody else.
        self.env = {"CELERY_BROKER_URL": broker_url, "REDIS_URL": redis.url(1)}
        # Every beat and worker reaches PostgreSQL through the run's fault proxy, so a
        # network nemesis can hurt all their connections at once.
        self.pg_proxy = pg_proxy
        if pg_proxy is not None:
            self.env["DATABASE_URL"] = pg_proxy.database_url(connection.settings_dict)
        self.beats: dict[str, Proc] = {}
        self.workers: dict[str, Proc] = {}
        self.faults: list[Fault] = []
        self.skipped: dict[str, str] = {}
        # Beats cut off for the rest of the run (beat_partitioned): not in `beats`, so no
        # nemesis or liveness check picks them; finish() judges and kills them.
        self.isolated: dict[str, tuple[Proc, list[FaultProxy], Fault]] = {}
        self._skews = 0
        self._seq = itertools.count(1)

    # --- processes -------------------------------------------------------------------

    def add_beat(self, prefix: str = "beat", *, skew: str = "", **env: str) -> str:
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
            name,
            _skewed(cmd, skew),
            SWEEP_INTERVAL_S=str(SWEEP),
            QUEUED_REPUBLISH_S=str(REPUBLISH),
            **(self.env | _skew_env(skew) | env),  # a nemesis' own env wins
        )
        return name

    def add_worker(self, prefix: str = "w", *, skew: str = "", **env: str) -> str:
        name = f"{prefix}{next(self._seq)}"
        proc = self.start(
            name,
            _skewed(worker_cmd(concurrency=WORKER_CONCURRENCY, name=name), skew),
            EXECUTION_LEASE_S=str(int(EXEC_LEASE)),
            WORKER_ID=name,
            TARGET_TEST_ALLOW=self.ledger.allow_entry,
            **(self.env | _skew_env(skew) | env),  # a nemesis' own env wins
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
            # Busy with an oracle call: a worker holding only a hostile job (a tarpit,
            # checked on its own) would leave the fault nothing of the oracle's to rescue.
            for name in self.workers:
                if running_on(name, oracle_only=True):
                    return name, running_on(name)
            return None

        found: tuple[str, list[str]] = wait_for(find, timeout=timeout, what="a worker mid-call")
        return found

    # --- nemeses: processes ----------------------------------------------------------

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

    def _beat_crash(self, point: str) -> Fault:
        """A fresh beat that dies at a crash boundary of the firing path, then is replaced.

        before_fire_commit: claimed and inserted, transaction not committed (rolled back);
        after_fire_commit: committed, nothing published; after_admit: admitted (queued,
        holding their slots), nothing published — the next owner's sweep re-publishes
        them; after_publish: admitted and published, nothing owed.
        """
        started = db_now()
        victim = self.add_beat("crash", SCHED_FAULT_POINT=point)
        proc = self.beats.pop(victim)
        wait_for(lambda: not proc.alive(), timeout=30, what=f"the beat to die at {point}")
        # Its leases outlive it: the partitions still name it until they expire.
        fault = Fault(f"beat_crash_{point}", victim, started, owned_by(victim))
        fault.notes["returncode"] = proc.proc.returncode
        fault.executions = [
            str(e) for e in Execution.objects.filter(fired_by=victim).values_list("id", flat=True)
        ]
        fault.replacement = self.add_beat()
        return fault

    def beat_crash_before_commit(self) -> Fault:
        return self._beat_crash("before_fire_commit")

    def beat_crash_after_commit(self) -> Fault:
        return self._beat_crash("after_fire_commit")

    def beat_crash_after_admit(self) -> Fault:
        return self._beat_crash("after_admit")

    def beat_crash_after_publish(self) -> Fault:
        return self._beat_crash("after_publish")

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

    def _worker_crash(self, point: str) -> Fault:
        """A worker whose pool process dies at a boundary of one execution, once.

        worker_after_claim: claimed, target not called; worker_before_complete: the
        target was called, the result not recorded (the effect happened: the retry
        must reach the target again with the same execution id).
        """
        marker = self.log_dir / f"fault-{point}-{next(self._seq)}"
        victim = self.add_worker("wcrash", SCHED_FAULT_POINT=point, SCHED_FAULT_ONCE=str(marker))
        wait_for(lambda: marker.exists() and marker.read_text(), timeout=30, what=f"{point} hit")
        kind = f"worker_crash_{point.removeprefix('worker_')}"
        fault = Fault(kind, victim, db_now(), executions=[marker.read_text()])
        # The pool replaced its dead process; retire the worker gracefully (it finishes its calls).
        self.workers.pop(victim).stop()
        return fault

    def worker_crash_after_claim(self) -> Fault:
        return self._worker_crash("worker_after_claim")

    def worker_crash_before_complete(self) -> Fault:
        return self._worker_crash("worker_before_complete")

    # --- nemeses: servers and clocks -------------------------------------------------

    def redis_restart(self) -> Fault:
        """Redis dies (SIGKILL, no persistence) and comes back empty: queued messages are lost.

        The workers are held (SIGSTOP, well inside their lease) for a moment first so
        that messages pile up in the broker — a restart of an empty queue proves nothing.
        """
        for proc in self.workers.values():
            proc.pause()
        time.sleep(REDIS_BACKLOG_S)
        fault = Fault("redis_restart", "redis", db_now())
        fault.executions = [
            str(e) for e in Execution.objects.filter(state="queued").values_list("id", flat=True)
        ]
        fault.notes["role"] = "cache" if self.rabbit else "broker+cache"
        fault.notes["broker_backlog"] = None if self.rabbit else broker_depth(self.broker_url)
        self.redis.kill()
        for proc in self.workers.values():
            proc.resume()
        time.sleep(1.0)
        self.redis.start()
        fault.notes["outage_s"] = 1.0
        return fault

    def rabbitmq_restart(self) -> Fault:
        """The run's own RabbitMQ node is SIGKILLed with a backlog, then booted again.

        As for Redis, the workers are held (SIGSTOP, inside their lease) first and
        BROKER_BURST jobs fall due meanwhile (more than the held workers prefetch),
        so published messages wait in the node's queues — those, and the ones the
        held workers had prefetched but not acked, are persistent on durable
        queues: they come back with the node (or the sweeper re-publishes them)
        and must all run. The outage is the node's boot time plus the kill.
        """
        if self.rabbit is None:
            self.skipped["rabbitmq_restart"] = "the broker is not the run's own RabbitMQ node"
            raise _Skip
        for proc in self.workers.values():
            proc.pause()
        t0 = time.monotonic()
        if self.burst is not None:
            ids = self.burst(BROKER_BURST)
            self.extra_jobs += ids
            # Best effort within the hold: a row admitted but not yet published when the
            # node dies is re-published by the sweeper, which is a figure too.
            with contextlib.suppress(AssertionError):
                wait_for(
                    lambda: (
                        not Execution.objects.filter(schedule_id__in=ids)
                        .exclude(state="queued")
                        .exists()
                        and Execution.objects.filter(schedule_id__in=ids).count() == len(ids)
                    ),
                    timeout=REDIS_BACKLOG_S,
                    interval=0.05,
                    what="the burst published while the workers are held",
                )
        time.sleep(max(0.0, REDIS_BACKLOG_S - (time.monotonic() - t0)))
        fault = Fault("rabbitmq_restart", self.rabbit.node, db_now())
        fault.executions = [
            str(e) for e in Execution.objects.filter(state="queued").values_list("id", flat=True)
        ]
        fault.notes["role"] = "broker"
        fault.notes["broker_backlog"] = broker_depth(self.broker_url)
        t0 = time.monotonic()
        self.rabbit.kill()
        for proc in self.workers.values():
            proc.resume()
        time.sleep(1.0)
        fault.notes["boot_s"] = self.rabbit.start()
        fault.notes["outage_s"] = round(time.monotonic() - t0, 2)
        return fault

    def postgres_restart(self) -> Fault:
        """PostgreSQL stopped for longer than a beat lease, then started: the API says 503 +
        Retry-After meanwhile, every process reconnects on its own."""
        if not self.pg.mode:
            self.skipped["postgres_restart"] = self.pg.why_not
            raise _Skip
        fault = Fault("postgres_restart", "postgresql", db_now())
        t0 = time.monotonic()
        self.pg.stop()
        time.sleep(0.5)
        fault.notes["api_during_outage"] = _probe_api(self.api_token)
        time.sleep(max(0.0, PG_OUTAGE_S - (time.monotonic() - t0)))
        self.pg.start()
        fault.notes["outage_s"] = round(time.monotonic() - t0, 2)
        fault.notes["api_after_outage"] = _probe_api(self.api_token)
        return fault

    def clock_skew(self) -> Fault:
        """A beat and a worker whose wall clocks are off by ±5 minutes replace a normal pair.

        Due-ness, leases and retries are judged on the database clock, so nothing may
        fire or start early, and no lease may expire under a healthy skewed worker.
        """
        self._skews += 1
        skew = f"{'+' if self._skews % 2 else '-'}{SKEW_S}s"
        if not shutil.which("faketime"):
            self.skipped["clock_skew"] = "faketime is not installed (Debian package faketime)"
            raise _Skip
        old_beat = min(self.beats)
        old_worker = min(self.workers)
        fault = Fault("clock_skew", f"{old_beat}+{old_worker}", db_now())
        beat = self.add_beat("skewed", skew=skew)
        worker = self.add_worker("wskew", skew=skew)
        self.beats.pop(old_beat).stop()
        self.workers.pop(old_worker).stop()
        fault.replacement = f"{beat}+{worker}"
        fault.notes["skew"] = skew
        fault.notes["skewed_worker"] = worker
        return fault

    # --- nemeses: network (tests/support/faultproxy.py) --------------------------------

    def beat_pg_blackhole(self) -> Fault:
        """A beat's PostgreSQL link black-holed past its lease, then healed.

        The rest of the fleet takes its partitions over (failover, as for a kill);
        once healed the beat must carry on — heartbeat again, its stale writes
        fenced — within HEAL_S, else it is stuck. It is then retired.
        """
        proxy = FaultProxy(database_target(connection.settings_dict))
        victim = self.add_beat("bnet", DATABASE_URL=proxy.database_url(connection.settings_dict))
        try:
            wait_for(lambda: owned_by(victim), timeout=30, what=f"{victim} to own partitions")
            node = BeatNode.objects.get(name=victim)
            before = node.stale_writes_rejected
            parts = owned_by(victim)
            proxy.blackhole()
            fault = Fault("beat_pg_blackhole", victim, db_now(), parts)
            time.sleep(TTL + 2)
            proxy.pass_()
            fault.notes["outage_s"] = TTL + 2
            healed = db_now()
            try:
                wait_for(
                    lambda: BeatNode.objects.filter(name=victim, heartbeat_at__gt=healed).exists(),
                    timeout=HEAL_S,
                    what=f"{victim} to heartbeat after the heal",
                )
                fault.notes["stuck_after_heal"] = 0
            except AssertionError:
                fault.notes["stuck_after_heal"] = 1
            fault.notes["stale_writes_rejected_after_heal"] = (
                BeatNode.objects.get(name=victim).stale_writes_rejected - before
            )
        finally:
            self.beats.pop(victim).stop()
            proxy.close()
        return fault

    def worker_pg_blackhole(self) -> Fault:
        """A worker's PostgreSQL link black-holed mid-call past its lease, then healed.

        Its executions are swept and run elsewhere; once healed, the worker must get
        through every write it held — each refused by the token (`fencing_rejected`)
        — instead of hanging on a dead connection: a process stuck after heal.
        """
        proxy = FaultProxy(database_target(connection.settings_dict))
        victim = self.add_worker("wnet", DATABASE_URL=proxy.database_url(connection.settings_dict))
        try:
            wait_for(lambda: running_on(victim), timeout=30, what=f"{victim} mid-call")
            proxy.blackhole()
            # Read after the fault: exactly what the cut-off worker can no longer finish.
            fault = Fault("worker_pg_blackhole", victim, db_now(), executions=running_on(victim))
            time.sleep(PG_BLACKHOLE_S)
            proxy.pass_()
            fault.notes["outage_s"] = PG_BLACKHOLE_S
            held = set(fault.executions)

            def through() -> bool:
                done = set(
                    str(e)
                    for e in ExecutionEvent.objects.filter(
                        execution_id__in=held,
                        kind="fencing_rejected",
                        actor__startswith=f"{victim}:",
                    ).values_list("execution_id", flat=True)
                )
                return held <= done

            try:
                wait_for(through, timeout=HEAL_S, what=f"{victim} to get through after heal")
                fault.notes["stuck_after_heal"] = 0
            except AssertionError:
                fault.notes["stuck_after_heal"] = 1
            fault.notes["alive_after_heal"] = self.workers[victim].alive()
        finally:
            self.workers.pop(victim).stop()
            proxy.close()
        return fault

    def broker_link_worker(self) -> Fault:
        """A worker's broker link black-holed mid-call, then reset (RST): the worker must
        reconnect by itself and take new work within HEAL_S, else it is stuck."""
        proxy, broker = self._broker_proxy("broker_link_worker")
        victim = self.add_worker("wbrk", CELERY_BROKER_URL=broker)
        try:
            wait_for(lambda: running_on(victim), timeout=30, what=f"{victim} mid-call")
            proxy.blackhole()
            fault = Fault("broker_link_worker", victim, db_now(), executions=running_on(victim))
            time.sleep(BROKER_BLACKHOLE_S)
            fault.notes["connections_reset"] = proxy.reset()
            proxy.pass_()
            healed = db_now()
            fault.notes["outage_s"] = BROKER_BLACKHOLE_S
            try:
                wait_for(
                    lambda: Execution.objects.filter(
                        lease_owner__startswith=f"{victim}:", started_at__gt=healed
                    ).exists(),
                    timeout=HEAL_S,
                    what=f"{victim} to take new work after the heal",
                )
                fault.notes["stuck_after_heal"] = 0
            except AssertionError:
                fault.notes["stuck_after_heal"] = 1
        finally:
            self.workers.pop(victim).stop()
            proxy.close()
        return fault

    def _broker_proxy(self, kind: str) -> tuple[FaultProxy, str]:
        """A fault proxy of its own in front of the run's broker, and the URL through it."""
        url = urlsplit(self.env["CELERY_BROKER_URL"])
        if url.hostname is None or url.port is None:
            self.skipped[kind] = f"the broker is not on TCP ({url.scheme})"
            raise _Skip
        proxy = FaultProxy((url.hostname, url.port))
        creds = url.netloc.rpartition("@")[0]
        broker = urlunsplit(
            url._replace(netloc=f"{creds}@{proxy.address}" if creds else proxy.address)
        )
        return proxy, broker

    def beat_broker_blackhole(self) -> Fault:
        """A beat's broker link black-holed while it publishes, for longer than its lease,
        then healed.

        The fault is armed on the message text, so it falls mid-publish: the first
        message reaches the broker, its reply (and everything after) is held. The
        beat must not freeze: while it cannot publish it keeps renewing its leases
        and heartbeating (or releases its partitions — a clean hand-over), and once
        healed it publishes again within HEAL_S, else it is stuck. Its admitted rows
        are published again (by it, or by the sweep): nothing is lost.

        Once it has published nothing for BEAT_PUBLISH_STALL_S it hands its partitions
        over and stands by: its leases were kept fresh up to the hand-over (the renewal
        gap is measured to it, by BeatNode.standby_since) and released, not left to
        run out. check() reports how late its partitions' occurrences reached the target.
        """
        proxy, broker = self._broker_proxy("beat_broker_blackhole")
        victim = self.add_beat("bbrk", CELERY_BROKER_URL=broker)
        try:
            wait_for(lambda: owned_by(victim), timeout=30, what=f"{victim} to own partitions")
            before = BeatNode.objects.get(name=victim)
            proxy.arm(PUBLISH_PATTERN, "blackhole")
            armed = proxy.armed.wait(20)
            if not armed:
                proxy.blackhole()
            fault = Fault("beat_broker_blackhole", victim, db_now(), owned_by(victim))
            granted = dict(
                SchedulerPartition.objects.filter(number__in=fault.partitions).values_list(
                    "number", "epoch"
                )
            )
            fault.notes["armed_mid_publish"] = armed

            def renewed_until() -> datetime | None:
                """Its leases' end at the epochs granted (set to renewal + TTL by the database)."""
                ends = [
                    p.lease_expires_at
                    for p in SchedulerPartition.objects.filter(number__in=fault.partitions)
                    if p.owner == victim and p.epoch == granted[p.number] and p.lease_expires_at
                ]
                return max(ends) if ends else None

            # Sample its renewals while the broker is silent: each one moves its leases' end.
            # The first is its last renewal before the fault (read right after it fell).
            renewals: list[datetime] = [first] if (first := renewed_until()) else []
            handed_over_at: datetime | None = None
            t0 = time.monotonic()
            while time.monotonic() - t0 < BEAT_BROKER_BLACKHOLE_S:
                until = renewed_until()
                if until is not None and (not renewals or until > renewals[-1]):
                    renewals.append(until)
                if until is None and handed_over_at is None:
                    # None of its partitions held any more: handed over (standing by
                    # since), or lost — then there is no standby and the gap runs on.
                    handed_over_at = BeatNode.objects.get(name=victim).standby_since
                time.sleep(0.1)
            end = db_now()
            after = list(SchedulerPartition.objects.filter(number__in=fault.partitions))
            node = BeatNode.objects.get(name=victim)
            proxy.pass_()
            healed = db_now()
            handed_over = node.handovers_total > before.handovers_total
            if handed_over and handed_over_at is None:
                # Between the last sample and the end of the window: still standing by.
                handed_over_at = node.standby_since
            gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(renewals)]
            if renewals:  # from its last renewal to its hand-over, or the end of the window
                last = min(end, handed_over_at) if handed_over_at else end
                gaps.append((last - (renewals[-1] - timedelta(seconds=TTL))).total_seconds())
            fault.notes["outage_s"] = BEAT_BROKER_BLACKHOLE_S
            fault.notes["handed_over"] = handed_over
            fault.notes["handed_over_after_s"] = (
                round((handed_over_at - fault.at).total_seconds(), 2) if handed_over_at else None
            )
            fault.notes["renewals_during"] = max(0, len(renewals) - 1)
            fault.notes["max_renewal_gap_s"] = round(max(gaps), 2) if gaps else None
            fault.notes["leases_kept"] = sum(
                1
                for p in after
                if p.owner == victim
                and p.epoch == granted[p.number]
                and p.lease_expires_at
                and p.lease_expires_at > end
            )
            fault.notes["partitions_taken_over"] = sum(
                1 for p in after if p.epoch != granted[p.number]
            )
            fault.notes["published_before_heal"] = node.published_total - before.published_total
            try:
                wait_for(
                    lambda: (
                        BeatNode.objects.filter(
                            name=victim,
                            heartbeat_at__gt=healed,
                            published_total__gt=node.published_total,
                        ).exists()
                        or (
                            BeatNode.objects.filter(name=victim, heartbeat_at__gt=healed).exists()
                            and not owned_by(victim)
                        )
                    ),
                    timeout=HEAL_S,
                    what=f"{victim} to publish (or heartbeat, owning nothing) after the heal",
                )
                fault.notes["stuck_after_heal"] = 0
            except AssertionError:
                fault.notes["stuck_after_heal"] = 1
            fault.notes["stale_writes_rejected"] = (
                BeatNode.objects.get(name=victim).stale_writes_rejected
                - before.stale_writes_rejected
            )
            # Kept renewing while publishing waited — within two thirds of the lease, as
            # the beat promises (renew once a third has passed, whatever the cycle does),
            # so no lease of it ever runs out — and nothing of it was fenced.
            gap = fault.notes["max_renewal_gap_s"]
            fault.notes["clean"] = bool(
                gap is not None
                and gap <= RENEWAL_GAP_BOUND_S
                and fault.notes["stale_writes_rejected"] == 0
            )
        finally:
            fault_rc = self.beats.pop(victim).stop()
            proxy.close()
        fault.notes["returncode_at_retire"] = fault_rc
        return fault

    def beat_partitioned(self) -> Fault:
        """A partition that never heals: one beat black-holed from PostgreSQL and from the
        broker for the rest of the run.

        The rest of the fleet must take its partitions over (epochs bumped) and carry
        on; nothing the isolated beat attempts may be accepted after its lease expiry
        (judged by finish(), which then kills it and says whether it exited on SIGTERM
        or hung). It is excused from "stuck after heal": there is no heal.
        """
        pg = FaultProxy(database_target(connection.settings_dict))
        try:
            broker_proxy, broker = self._broker_proxy("beat_partitioned")
        except _Skip:
            pg.close()
            raise
        victim = self.add_beat(
            "bpart",
            DATABASE_URL=pg.database_url(connection.settings_dict),
            CELERY_BROKER_URL=broker,
            PYTHONFAULTHANDLER="1",  # SIGABRT dumps its stacks if it hangs at the end
        )
        proc = self.beats.pop(victim)  # no other nemesis or liveness check may pick it
        try:
            wait_for(lambda: owned_by(victim), timeout=30, what=f"{victim} to own partitions")
            with contextlib.suppress(AssertionError):  # best effort: it has epochs in use
                wait_for(
                    lambda: Execution.objects.filter(fired_by=victim).exists(),
                    timeout=10,
                    what=f"{victim} to fire",
                )
        except BaseException:
            proc.stop()
            pg.close()
            broker_proxy.close()
            raise
        pg.blackhole()
        broker_proxy.blackhole()
        fault = Fault("beat_partitioned", victim, db_now())
        time.sleep(0.3)  # a write already past the proxy lands (or not) before we read
        rows = list(SchedulerPartition.objects.filter(owner=victim))
        fault.partitions = sorted(p.number for p in rows)
        granted = {p.number: p.epoch for p in rows}
        expiry = max((p.lease_expires_at for p in rows if p.lease_expires_at), default=fault.at)
        fault.notes["granted_epochs"] = granted
        fault.notes["lease_expiry"] = expiry.isoformat()
        fault.notes["fired_before_cut"] = Execution.objects.filter(fired_by=victim).count()
        self.isolated[victim] = (proc, [pg, broker_proxy], fault)
        t0 = time.monotonic()
        try:
            wait_for(
                lambda: all(
                    p.owner not in ("", victim) and p.epoch > granted[p.number]
                    for p in SchedulerPartition.objects.filter(number__in=granted)
                ),
                timeout=TTL * 5,
                what=f"{victim}'s partitions taken over by the rest of the fleet",
            )
            fault.notes["takeover_observed_s"] = round(time.monotonic() - t0, 2)
        except AssertionError:
            fault.notes["takeover_observed_s"] = None
        fault.notes["outage_s"] = round(time.monotonic() - t0, 2)  # lateness window: to takeover
        fault.notes["stuck_after_heal"] = 0  # excused: it never heals
        return fault

    def finish(self) -> None:
        """End of the run: judge each partitioned beat by PostgreSQL, then kill it.

        Accepted after its lease expiry would be: a row it fired, a heartbeat, a
        partition still in its name, or an epoch of its not superseded.
        """
        for victim, (proc, proxies, fault) in list(self.isolated.items()):
            expiry = datetime.fromisoformat(fault.notes["lease_expiry"])
            granted: dict[int, int] = fault.notes["granted_epochs"]
            node = BeatNode.objects.get(name=victim)
            fired_after = Execution.objects.filter(fired_by=victim, created_at__gt=expiry).count()
            superseded = SchedulerPartition.objects.filter(number__in=granted, epoch__gt=0).exclude(
                owner=victim
            )
            epochs_superseded = sum(1 for p in superseded if p.epoch > granted[p.number])
            fault.notes["writes_accepted_after_expiry"] = (
                fired_after + int(node.heartbeat_at > expiry) + len(owned_by(victim))
            )
            fault.notes["fired_after_expiry"] = fired_after
            fault.notes["heartbeat_after_expiry"] = node.heartbeat_at > expiry
            fault.notes["epochs_superseded"] = f"{epochs_superseded}/{len(granted)}"
            fault.notes["all_epochs_superseded"] = epochs_superseded == len(granted)
            fault.notes["isolated_for_s"] = round((db_now() - fault.at).total_seconds(), 1)
            # Connections it kept open into the partition (each one held, never answered).
            fault.notes["connections_held"] = {
                "pg": proxies[0].connections,
                "broker": proxies[1].connections,
            }
            t0 = time.monotonic()
            proc.signal(signal.SIGTERM)
            try:
                proc.proc.wait(PARTITIONED_EXIT_S)
                fault.notes["at_end"] = (
                    f"exited on SIGTERM in {time.monotonic() - t0:.1f} s "
                    f"(rc {proc.proc.returncode})"
                )
            except subprocess.TimeoutExpired:
                fault.notes["at_end"] = f"hung: no exit {PARTITIONED_EXIT_S:.0f} s after SIGTERM"
                # Where it hangs: faulthandler's dump of the main thread's stack.
                os.kill(proc.pid, signal.SIGABRT)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.proc.wait(5)
                fault.notes["hung_in"] = _main_stack(proc.output())
            proc.stop()  # SIGKILL if it still hangs
            fault.notes["exit_returncode"] = proc.proc.returncode
            for proxy in proxies:
                proxy.close()
            del self.isolated[victim]

    def pg_latency(self) -> Fault:
        """+300 ms on every PostgreSQL round trip of every beat and worker, for a while."""
        if self.pg_proxy is None:
            self.skipped["pg_latency"] = "the run has no PostgreSQL fault proxy"
            raise _Skip
        fault = Fault("pg_latency", "postgresql links", db_now())
        self.pg_proxy.delay(PG_LATENCY_MS / 2)
        time.sleep(PG_LATENCY_S)
        self.pg_proxy.pass_()
        fault.notes["outage_s"] = PG_LATENCY_S
        fault.notes["added_rtt_ms"] = PG_LATENCY_MS
        fault.notes["stuck_after_heal"] = self._stuck_after_heal()
        return fault

    def pg_reset(self) -> Fault:
        """Every PostgreSQL connection of every beat and worker reset (RST) at once."""
        if self.pg_proxy is None:
            self.skipped["pg_reset"] = "the run has no PostgreSQL fault proxy"
            raise _Skip
        fault = Fault("pg_reset", "postgresql links", db_now())
        fault.notes["connections_reset"] = self.pg_proxy.reset()
        fault.notes["stuck_after_heal"] = self._stuck_after_heal()
        return fault

    def _stuck_after_heal(self) -> int:
        """Processes that did not carry on within HEAL_S: a beat that stopped
        heartbeating (database clock), a worker that died."""
        t0 = time.monotonic()
        stuck = 0
        for name in list(self.beats):
            try:
                wait_for(
                    lambda name=name: BeatNode.objects.filter(
                        name=name, heartbeat_at__gt=db_now() - timedelta(seconds=TTL)
                    ).exists(),
                    timeout=max(1.0, HEAL_S - (time.monotonic() - t0)),
                    what=f"{name} to heartbeat after the fault",
                )
            except AssertionError:
                stuck += 1
        return stuck + sum(1 for proc in self.workers.values() if not proc.alive())

    NEMESES = (
        "beat_kill",
        "beat_pause",
        "worker_kill",
        "worker_pause",
        "beat_crash_before_commit",
        "beat_crash_after_commit",
        "beat_crash_after_admit",
        "beat_crash_after_publish",
        "worker_crash_after_claim",
        "worker_crash_before_complete",
        "redis_restart",
        "postgres_restart",
        "clock_skew",
        "beat_pg_blackhole",
        "worker_pg_blackhole",
        "pg_latency",
        "pg_reset",
        "broker_link_worker",
        "beat_broker_blackhole",
        "beat_partitioned",
    )

    def inject(self, kind: str) -> Fault | None:
        try:
            fault: Fault = getattr(self, kind)()
        except _Skip:
            print(f"[chaos] {kind} skipped: {self.skipped.get(kind, '?')}")
            return None
        self.faults.append(fault)
        print(f"[chaos] {fault.kind} victim={fault.victim} replacement={fault.replacement or '-'}")
        return fault


def nemeses(broker: str, *, only: str = "") -> tuple[str, ...]:
    """The nemeses of a run on `broker`: the Cluster's, plus the RabbitMQ node's restart;
    `only` (comma-separated kinds, CHAOS_NEMESES) keeps just those."""
    extra = ("rabbitmq_restart",) if broker == "rabbitmq" else ()
    kinds = tuple(Cluster.NEMESES) + tuple(k for k in extra if k not in Cluster.NEMESES)
    wanted = [k.strip() for k in only.split(",") if k.strip()]
    unknown = sorted(set(wanted) - set(kinds))
    if unknown:
        raise ValueError(f"CHAOS_NEMESES: no nemesis {unknown} on {broker}; there are {kinds}")
    return tuple(k for k in kinds if k in wanted) if wanted else kinds


def lengthened_s(kinds: tuple[str, ...]) -> float:
    """How much longer than by default the planned nemeses take (CHAOS_BROKER_BLACKHOLE_S)."""
    if "beat_broker_blackhole" not in kinds:
        return 0.0
    return max(0.0, BEAT_BROKER_BLACKHOLE_S - (TTL + 2))


def broker_depth(url: str) -> int | None:
    """Messages waiting (ready, not delivered) in the platform's queues right now."""
    from kombu import Connection

    from config.celery_app import amqp_queue, is_amqp
    from tests.support.worker_support import QUEUES

    try:
        with Connection(url, connect_timeout=2) as conn:
            channel = conn.default_channel
            if is_amqp(url):
                names = {amqp_queue(q)[0].name for q in QUEUES} | set(QUEUES)
                total = 0
                for name in names:
                    try:
                        total += channel.queue_declare(name, passive=True).message_count
                    except Exception:  # not declared yet (a passive declare closes the channel)
                        channel = conn.channel()
                return total
            return sum(int(channel.client.llen(name)) for name in QUEUES)
    except Exception:
        return None


class _Skip(Exception):
    """A nemesis this machine cannot run (the reason is in Cluster.skipped)."""


def _skewed(cmd: list[str], skew: str) -> list[str]:
    return ["faketime", "-f", skew, *cmd] if skew else cmd


def _skew_env(skew: str) -> dict[str, str]:
    # Only the wall clock is off, as with a drifting NTP-less host; intervals stay true.
    return {"DONT_FAKE_MONOTONIC": "1"} if skew else {}


def _probe_api(token: str) -> dict[str, Any]:
    """What a client sees from the API and the readiness probe right now (in-process)."""
    from django.test import Client

    client = Client(raise_request_exception=False)
    out: dict[str, Any] = {}
    for name, path, headers in (
        ("api", "/v1/schedules", {"HTTP_AUTHORIZATION": f"Bearer {token}"}),
        ("readyz", "/readyz", {}),
    ):
        resp = client.get(path, **headers)
        body = resp.content.decode(errors="replace")
        out[name] = {
            "status": resp.status_code,
            "retry_after": resp.headers.get("Retry-After"),
            "traceback_in_body": "Traceback" in body,
            "body": body[:200],
        }
    return out


# --- workload ----------------------------------------------------------------------------


def create_jobs(
    principal: Principal, tenant: Tenant, *, count: int, spread_s: float, lead_s: float, url: str
) -> tuple[list[str], datetime]:
    """One-off jobs due over the run: the oracle (each must end with one succeeded execution)."""
    tenant.quota.max_schedules = count + 100
    tenant.quota.max_concurrent = count + 100
    tenant.quota.save()
    base = db_now() + timedelta(seconds=lead_s)
    ids = [
        _job_to(
            principal,
            name=f"chaos-{i}",
            run_at=base + timedelta(seconds=spread_s * i / max(1, count)),
            url=url,
            retry=RETRY,
            timeout_s=10,
        )
        for i in range(count)
    ]
    return ids, base + timedelta(seconds=spread_s)


_burst_seq = itertools.count(1)


def create_burst(principal: Principal, *, count: int, url: str) -> list[str]:
    """`count` oracle jobs due now (a backlog on demand)."""
    run_at = db_now()
    return [
        _job_to(
            principal,
            name=f"chaos-burst-{next(_burst_seq)}",
            run_at=run_at,
            url=url,
            retry=RETRY,
            timeout_s=10,
        )
        for _ in range(count)
    ]


def _job_to(
    principal: Principal,
    *,
    name: str,
    run_at: datetime,
    url: str,
    retry: dict[str, Any],
    timeout_s: int,
) -> str:
    """A one-off job calling `url`: saved with a placeholder target (the loopback
    ledger cannot pass the save-time SSRF check) and repointed in the same transaction."""
    with transaction.atomic():
        job, _ = services.job_create(
            actor=principal,
            data={
                "name": name,
                "run_at": run_at,
                "target": {"type": "http", "url": "https://billing.internal/hook"},
                "retry": retry,
            },
        )
        Schedule.objects.filter(pk=job.pk).update(
            target={"type": "http", "url": url, "method": "POST", "timeout_s": timeout_s},
            timeout_s=timeout_s,
        )
    return str(job.id)


def create_held_jobs(principal: Principal, tenant: Tenant, *, count: int, url: str) -> list[str]:
    """`count` oracle jobs calling `url`, held out of the due index (no next run) until
    the caller sets one instant for all: a burst the beats meet at once, as at the top
    of a minute. Made in the API's batches (POST /v1/jobs:batch's service)."""
    tenant.quota.max_schedules = count + 100
    tenant.quota.max_concurrent = count + 100
    tenant.quota.save()
    far = db_now() + timedelta(days=365)
    placeholder = {"type": "http", "url": "https://billing.internal/hook"}
    ids: list[str] = []
    for first in range(0, count, BATCH_MAX):
        items: list[dict[str, Any] | Any] = [
            {"idempotency_key": f"held-{i}", "run_at": far, "target": placeholder, "retry": RETRY}
            for i in range(first, min(count, first + BATCH_MAX))
        ]
        with transaction.atomic():
            results = job_create_batch(actor=principal, items=items)
            made = [str(r.job.id) for r in results if r.status == 201 and r.job is not None]
            if len(made) != len(items):
                raise AssertionError(f"batch at {first}: {[r.error for r in results if r.error]}")
            # Repointed at the ledger (it cannot pass the save-time SSRF check), held back.
            Schedule.objects.filter(pk__in=made).update(
                target={"type": "http", "url": url, "method": "POST", "timeout_s": 10},
                timeout_s=10,
                next_run_at=None,
            )
        ids += made
    return ids


# Hostile jobs run beside the oracle's: each must end as its policy says without
# slowing the others (docs/explanation/failure-contract.md, "What a run asserts"; the
# poison job: C6).
HOSTILE: dict[str, dict[str, Any]] = {
    "poison_500": {
        "path": "/poison",
        "timeout_s": 5,
        "retry": {"max_attempts": 3, "backoff": "fixed", "initial_s": 1, "max_s": 1},
        "expect": ("dead", 3),
    },
    "tarpit": {
        "path": "/tarpit",
        "timeout_s": 2,
        "retry": {"max_attempts": 2, "backoff": "fixed", "initial_s": 1, "max_s": 1},
        "expect": ("dead", 2),
    },
    "huge_body": {
        "path": "/huge",
        "timeout_s": 20,
        "retry": RETRY,
        "expect": ("succeeded", 1),
    },
}
HUGE_BODY = b"x" * (32 * 1024 * 1024)
TARPIT_S = 30.0


def respond(req: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    """The ledger's answers: slow success for the oracle's jobs, hostile ones by path."""
    path = req["path"]
    if path.startswith("/poison"):
        return 500, {}, b"boom"
    if path.startswith("/tarpit"):
        time.sleep(TARPIT_S)
        return 200, {}, b"too late"
    if path.startswith("/huge"):
        return 200, {}, HUGE_BODY
    time.sleep(LEDGER_DELAY)
    return 200, {}, b"ok"


def create_hostile_jobs(principal: Principal, *, base_url: str, due_in_s: float) -> dict[str, str]:
    """Name -> schedule id of each hostile job, all due `due_in_s` from now."""
    run_at = db_now() + timedelta(seconds=due_in_s)
    return {
        name: _job_to(
            principal,
            name=f"hostile-{name}",
            run_at=run_at,
            url=base_url + spec["path"],
            retry=spec["retry"],
            timeout_s=spec["timeout_s"],
        )
        for name, spec in HOSTILE.items()
    }


def hostile_settled(hostile: dict[str, str]) -> bool:
    return Execution.objects.filter(
        schedule_id__in=hostile.values(), state__in=("succeeded", "dead")
    ).count() >= len(hostile)


def hostile_outcomes(hostile: dict[str, str]) -> dict[str, dict[str, Any]]:
    out = {}
    for name, sid in hostile.items():
        row = Execution.objects.filter(schedule_id=sid).values("state", "attempt").first() or {}
        expect_state, expect_attempts = HOSTILE[name]["expect"]
        out[name] = {
            "state": row.get("state"),
            "attempts": row.get("attempt"),
            "expected": f"{expect_state} after {expect_attempts} attempt(s)",
            "ok": row.get("state") == expect_state and row.get("attempt") == expect_attempts,
        }
    return out


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


def _figures(values: list[float]) -> dict[str, float | int | None]:
    """n, p50, p99 and max of a lateness sample, seconds."""
    if not values:
        return {"n": 0, "p50": None, "p99": None, "max": None}
    return {
        "n": len(values),
        "p50": round(_pct(values, 0.50), 3),
        "p99": round(_pct(values, 0.99), 3),
        "max": round(max(values), 3),
    }


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
            "started_at",
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
    first_effect: dict[str, float] = {}  # execution id -> when the target first saw it
    for req in ledger.requests:
        if not req["path"].startswith("/effect"):
            continue
        headers = {k.lower(): v for k, v in req["headers"].items()}
        eid = headers.get("x-execution-id", "")
        deliveries[eid] += 1
        attempts_seen[eid].add(headers.get("x-attempt", "?"))
        first_effect[eid] = min(req["at"], first_effect.get(eid, req["at"]))
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
        cur.execute(SHARED_EPOCHS, {"ids": None})
        shared_epochs = [list(r) for r in cur.fetchall()]
    success_events = Counter(
        str(e)
        for e in ExecutionEvent.objects.filter(
            kind="attempt_succeeded", schedule_id__in=job_ids
        ).values_list("execution_id", flat=True)
    )
    double_success = sorted(eid for eid, n in success_events.items() if n > 1)
    # A partitioned beat's writes after its lease expiry (Cluster.finish) count as accepted.
    partitioned_accepted = sum(int(f.notes.get("writes_accepted_after_expiry", 0)) for f in faults)
    stale_accepted = len(shared_epochs) + len(double_success) + partitioned_accepted

    # Calls under a revoked token: a request the target saw after the execution's
    # token had moved past the one it carries (a newer claim or a sweep, by the
    # database clock; the ledger stamps arrivals with the same host's clock).
    bumps: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for eid, created, data in ExecutionEvent.objects.filter(
        schedule_id__in=job_ids, kind__in=["claimed", "timed_out"]
    ).values_list("execution_id", "at", "data"):
        token = (data or {}).get("fencing_token")
        if token is not None:
            bumps[str(eid)].append((created.timestamp(), int(token)))
    revoked_calls = calls_under_revoked_token(ledger.requests, bumps)

    # Fire lateness: first publish minus due time.
    lateness = {
        str(r["id"]): (r["enqueued_at"] - r["due_at"]).total_seconds()
        for r in rows
        if r["enqueued_at"] is not None
    }
    late = list(lateness.values())

    # Time: nothing starts before it is due by the database clock, whatever the hosts' clocks say.
    started_early = [
        str(r["id"])
        for r in Execution.objects.filter(
            schedule_id__in=job_ids, started_at__lt=F("due_at")
        ).values("id")
    ]
    interrupted = {e for f in faults if f.kind.startswith("worker_") for e in f.executions}
    skewed = [f.notes["skewed_worker"] for f in faults if f.kind == "clock_skew"]
    # Leases that lapsed while every database link was slowed or reset are explained
    # by that fault, not by a skewed clock.
    network = [
        (f.at, f.at + timedelta(seconds=(f.notes.get("outage_s") or 0) + TTL * 2 + 2))
        for f in faults
        if f.kind in NETWORK_WIDE
    ]
    premature_expiries = sorted(
        {
            str(ev.execution_id)
            for w in skewed
            for ev in ExecutionEvent.objects.filter(
                schedule_id__in=job_ids, message__contains=f"lease of worker {w}:"
            )
            if str(ev.execution_id) not in interrupted
            and not any(lo <= ev.at <= hi for lo, hi in network)
        }
    )

    # Server restarts: what was queued when Redis died must still have run; the worst
    # lateness of what came due while a server was away.
    infra = []
    for f in faults:
        if f.kind not in ("redis_restart", "rabbitmq_restart", "postgres_restart", *NETWORK_WIDE):
            continue
        window_end = f.at + timedelta(seconds=f.notes.get("outage_s", 0) + TTL * 2 + 2)
        hit = [
            lateness[str(r["id"])]
            for r in rows
            if f.at <= r["due_at"] <= window_end and str(r["id"]) in lateness
        ]
        # Fire lateness is the first publish; a broker outage shows in when the call started.
        started_late = [
            (r["started_at"] - r["due_at"]).total_seconds()
            for r in rows
            if f.at <= r["due_at"] <= window_end and r["started_at"] is not None
        ]
        infra.append(
            {
                "kind": f.kind,
                "max_start_delay_s": round(max(started_late), 3) if started_late else None,
                "outage_s": f.notes.get("outage_s"),
                "role": f.notes.get("role"),
                "broker_backlog": f.notes.get("broker_backlog"),
                "boot_s": f.notes.get("boot_s"),
                "lease_expiries_in_window": ExecutionEvent.objects.filter(
                    schedule_id__in=job_ids, kind="timed_out", at__gte=f.at, at__lte=window_end
                ).count(),
                "queued_when_lost": len(f.executions),
                "queued_when_lost_not_succeeded": sum(
                    1
                    for r in rows
                    if str(r["id"]) in set(f.executions) and r["state"] != "succeeded"
                ),
                "executions_in_window": len(hit),
                "max_lateness_s": round(max(hit), 3) if hit else None,
                "api_during_outage": f.notes.get("api_during_outage"),
                "api_after_outage": f.notes.get("api_after_outage"),
            }
        )

    # Failover: the worst lateness among executions of the victim's partitions due
    # in the window after a beat fault.
    failovers = []
    for f in faults:
        if not f.kind.startswith("beat_") or f.kind in NOT_FAILOVER:
            continue
        window_end = f.at + timedelta(seconds=FAILOVER_WINDOW_S)
        covered = covered_by(f.partitions)
        hit = [
            lateness[str(r["id"])]
            for r in rows
            if r["partition"] in covered
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

    # A beat whose broker link was black-holed: how late what came due in its partitions
    # while the link was dead reached the target (the effect: the ledger's arrival time,
    # same host clock as the database here), and was first published. Without the
    # hand-over (BEAT_PUBLISH_STALL_S) it waited for the heal.
    broker_blackholes = []
    for f in faults:
        if f.kind != "beat_broker_blackhole":
            continue
        window_end = f.at + timedelta(seconds=f.notes.get("outage_s", 0))
        covered = covered_by(f.partitions)
        due = [r for r in rows if r["partition"] in covered and f.at <= r["due_at"] <= window_end]
        effect = [
            first_effect[str(r["id"])] - r["due_at"].timestamp()
            for r in due
            if str(r["id"]) in first_effect
        ]
        fire = [lateness[str(r["id"])] for r in due if str(r["id"]) in lateness]
        broker_blackholes.append(
            {
                "victim": f.victim,
                "outage_s": f.notes.get("outage_s"),
                "handed_over": f.notes.get("handed_over"),
                "handed_over_after_s": f.notes.get("handed_over_after_s"),
                "partitions": len(f.partitions),
                "due_in_its_partitions": len(due),
                "without_effect": len(due) - len(effect),
                "effect_lateness_s": _figures(effect),
                "fire_lateness_s": _figures(fire),
            }
        )

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
                # The oracle's calls; a hostile job's (checked on its own) may be in flight too.
                "in_flight": len(ex),
                "hostile_in_flight": len(f.executions) - len(ex),
                "final_states": dict(Counter(r["state"] for r in ex.values())),
                "max_attempt": max((r["attempt"] for r in ex.values()), default=0),
                "fencing_rejected_events": ExecutionEvent.objects.filter(
                    kind="fencing_rejected", execution_id__in=f.executions
                ).count(),
            }
        )

    # Lateness per nemesis: the worst of what came due while it acted and just after.
    per_nemesis: dict[str, float | None] = {}
    for f in faults:
        window_end = f.at + timedelta(seconds=f.notes.get("outage_s", 0) + TTL * 2 + 2)
        hit = [
            lateness[str(r["id"])]
            for r in rows
            if f.at <= r["due_at"] <= window_end and str(r["id"]) in lateness
        ]
        worst = round(max(hit), 3) if hit else None
        prior = per_nemesis.get(f.kind)
        per_nemesis[f.kind] = worst if prior is None else max(prior, worst or prior)

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
        "calls_under_revoked_token": len(revoked_calls),
        "calls_under_revoked_token_ids": revoked_calls,
        "processes_stuck_after_heal": sum(int(f.notes.get("stuck_after_heal", 0)) for f in faults),
        "lateness_per_nemesis_s": per_nemesis,
        "stale_writes": {
            "rejected_by_beats": beat_rejected,
            "rejected_by_workers": worker_rejected,
            "accepted": stale_accepted,
            "attempted": beat_rejected + worker_rejected + stale_accepted,
            "epochs_shared_by_two_beats": shared_epochs,
            "accepted_from_partitioned_beats": partitioned_accepted,
            "executions_succeeded_twice": double_success,
        },
        "broker_blackhole": broker_blackholes,
        "failover": {
            "bound_s": FAILOVER_BOUND_S,
            "slack_s": FAILOVER_SLACK_S,
            "max_s": max(failover_values) if failover_values else None,
            "per_fault": failovers,
        },
        "worker_faults": worker_faults,
        "server_faults": infra,
        "clock": {
            "started_before_due": len(started_early),
            "started_before_due_ids": started_early,
            "skewed_workers": skewed,
            "premature_lease_expiries": len(premature_expiries),
            "premature_lease_expiry_ids": premature_expiries,
        },
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
        ("calls under a revoked token", r["calls_under_revoked_token"]),
        ("processes stuck after heal", r["processes_stuck_after_heal"]),
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
        (
            "started before due (db clock)",
            f"{r['clock']['started_before_due']}; premature lease expiries "
            f"{r['clock']['premature_lease_expiries']} (skewed workers {len(r['clock']['skewed_workers'])})",
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
    for kind, worst in r["lateness_per_nemesis_s"].items():
        notes = "; ".join(_summary(f) for f in r["faults"] if f["kind"] == kind and _summary(f))
        out.append(
            f"{('  lateness ' + kind).ljust(width)} | max {worst} s"
            + (f"; {notes}" if notes else "")
        )
    for b in r.get("broker_blackhole", []):
        eff, fire = b["effect_lateness_s"], b["fire_lateness_s"]
        out.append(
            f"{'  broker black-hole: its partitions'.ljust(width)} | effect lateness "
            f"p50/p99/max {eff['p50']} / {eff['p99']} / {eff['max']} s (n={eff['n']}, "
            f"{b['without_effect']} without effect), first publish p99/max {fire['p99']} / "
            f"{fire['max']} s; {b['due_in_its_partitions']} due in its {b['partitions']} "
            f"partitions during the {b['outage_s']} s outage; handed over "
            f"{b['handed_over']} (after {b['handed_over_after_s']} s)"
        )
    for w in r["worker_faults"]:
        out.append(
            f"{('  ' + w['kind']).ljust(width)} | in flight {w['in_flight']}, final "
            f"{w['final_states']}, max attempt {w['max_attempt']}, "
            f"fencing_rejected {w['fencing_rejected_events']}"
        )
    for x in r["server_faults"]:
        api = (x.get("api_during_outage") or {}).get("api") or {}
        extra = (
            f", API during outage {api.get('status')} Retry-After {api.get('retry_after')}"
            if api
            else ""
        )
        if x.get("role"):
            extra += f", {x['role']}, messages in broker {x.get('broker_backlog')}"
        if x.get("boot_s") is not None:
            extra += f", boot {x['boot_s']} s"
        out.append(
            f"{('  ' + x['kind']).ljust(width)} | outage {x['outage_s']} s, queued when lost "
            f"{x['queued_when_lost']} (not run {x['queued_when_lost_not_succeeded']}), max lateness "
            f"{x['max_lateness_s']} s, max start delay {x.get('max_start_delay_s')} s, "
            f"lease expiries {x['lease_expiries_in_window']}{extra}"
        )
    for name, h in r.get("hostile", {}).items():
        out.append(
            f"{('  hostile ' + name).ljust(width)} | {h['state']} after {h['attempts']} "
            f"(expected {h['expected']})"
        )
    for kind, why in r.get("skipped_nemeses", {}).items():
        out.append(f"{('  skipped ' + kind).ljust(width)} | {why}")
    return "\n".join(out)


def _main_stack(log: str, frames: int = 20) -> list[str]:
    """The innermost `frames` of the main thread in a faulthandler dump, innermost first."""
    dump = log[log.rfind("Fatal Python error: Aborted") :]
    main = dump[dump.find("Current thread") :] if "Current thread" in dump else dump
    lines = [ln.strip() for ln in main.splitlines()[1:] if ln.strip().startswith("File ")]
    return lines[:frames]


def _where(stack: list[str]) -> str:
    """Innermost frame, and the innermost of the project's own code: `file:line in fn`."""

    def short(frame: str) -> str:
        path, _, rest = frame.removeprefix("File ").partition(", line ")
        return f"{Path(path.strip(chr(34))).name}:{rest}"

    own = next((fr for fr in stack if "/dispatch/" in fr and "/site-packages/" not in fr), "")
    return short(stack[0]) + (f" under {short(own)}" if own else "")


def _summary(f: dict[str, Any]) -> str:
    """What a network nemesis' line says besides its lateness."""
    if f["kind"] == "beat_broker_blackhole":
        return (
            f"{'armed mid-publish' if f.get('armed_mid_publish') else 'not armed (idle link)'}, "
            f"outage {f.get('outage_s')} s, handed over {f.get('handed_over')} (after "
            f"{f.get('handed_over_after_s')} s), "
            f"renewals during {f.get('renewals_during')}, max renewal gap "
            f"{f.get('max_renewal_gap_s')} s (bound {RENEWAL_GAP_BOUND_S:.1f}), leases kept "
            f"{f.get('leases_kept')}/{len(f['partitions'])}, taken over "
            f"{f.get('partitions_taken_over')}, fenced after heal "
            f"{f.get('stale_writes_rejected')}, clean {f.get('clean')}, stuck "
            f"{f.get('stuck_after_heal')}"
        )
    if f["kind"] == "beat_partitioned":
        return (
            f"takeover {f.get('takeover_observed_s')} s, writes accepted after lease expiry "
            f"{f.get('writes_accepted_after_expiry')}, epochs superseded "
            f"{f.get('epochs_superseded')}, isolated {f.get('isolated_for_s')} s, at end: "
            f"{f.get('at_end')}" + (f" (in {_where(f['hung_in'])})" if f.get("hung_in") else "")
        )
    if "stuck_after_heal" in f:
        return f"stuck after heal {f['stuck_after_heal']}"
    return ""


def write(results: dict[str, Any], path: Path = RESULTS) -> None:
    path.write_text(json.dumps(results, indent=2, default=str))
