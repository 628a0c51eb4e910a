"""The beat: a scheduler shard.

A beat leases a fair share of the due index's partitions. Its lease keeper
renews them, with the heartbeat, once a third of the lease has passed — on a
thread and connection of its own, whatever the cycle is doing (partitions.py).
Each cycle
  0. asks one read-only question (store.probe): is anything due to fire, is a
     pending execution not yet loaded, has the sweep anything to do — and skips
     the steps whose answer is no (an idle cycle is one round trip);
  1. drops the partitions the keeper could not renew, and hands over or takes
     partitions to keep its fair share (partitions.py);
  2. stages (pre-staged firing): claims the schedules of its partitions due
     within the stage-ahead window (BEAT_STAGE_AHEAD_S, minutes; FOR UPDATE SKIP
     LOCKED), creates their executions (INSERT … ON CONFLICT DO NOTHING) and
     advances next_run_at, in one transaction fenced by its partition epochs
     (firing.py) — all of it well before the due time;
  3. loads the staged executions into an in-memory heap — incrementally, from a
     watermark (store.horizon): only rows written since the last load — and hands
     them to the publisher to build their message bytes ahead (`prepare`);
  4. at each one's due time (database clock), chunk by chunk in due order, decides
     the overlap policy, admits it against the tenant's and the platform's in-flight
     caps and the daily quota (marking it queued, in one fenced transaction that
     serialises admission across beats: admission.py), then publishes what it
     admitted to the Celery queue `{priority}.{duration}` (publish.py) before the
     next chunk is admitted. Rows withdrawn since staging (an edit or pause,
     services/schedules.py) are simply not admitted: they are gone;
  5. sweeps: re-publishes queued rows nobody claimed, rescues expired worker
     leases (sweeper.py), resumes schedules whose pause ended, and now and then
     starts the history's maintenance pass in a child process (dispatch/history).
A beat that has had work due and published nothing for BEAT_PUBLISH_STALL_S hands
its partitions over to a beat that can publish and stands by until its broker
answers again (the rule: handover.py).
Any number of beats run side by side; they coordinate only through PostgreSQL
(every statement: store.py). Each step of `cycle()` returns how much it did.
"""

from __future__ import annotations

import heapq
import logging
import os
import select
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection, transaction

from config import telemetry
from core import faults
from core.db import notify, open_listener
from dispatch.history import maintenance as history_maintenance
from dispatch.queues import DEFAULT_QUEUE
from dispatch.scheduler import firing, store, sweeper
from dispatch.scheduler.admission import Admission
from dispatch.scheduler.control import ControlPump
from dispatch.scheduler.firing import Pending
from dispatch.scheduler.handover import PublishStall
from dispatch.scheduler.partitions import LeaseKeeper, Partitions
from dispatch.scheduler.publish import Publisher, publisher_for
from dispatch.scheduler.watchdog import Watchdog
from dispatch.services import WAKE_CHANNEL

log = logging.getLogger("dispatch.beat")

# Executions admitted in one transaction at the due instant, then published before
# the next chunk is admitted: the first messages of a 100k burst leave after one
# chunk's admission, not after all of it.
ADMIT_CHUNK = 5000
# A maintenance pass still running when the beat stops gets this long to end on SIGTERM.
MAINTENANCE_STOP_S = 10.0
# The wake-up channel's payload a beat sends when it hands its partitions over or takes
# part again: the others re-read the live beats at once (not at their next renewal)
# and take, or hand back, partitions on that cycle.
REBALANCE = "rebalance"


@dataclass
class Counters:
    fired: int = 0
    published: int = 0
    stale_writes_rejected: int = 0


@dataclass
class BeatConfig:
    name: str
    partitions: int = 16
    lease_ttl_s: float = 10.0
    cycle_s: float = 1.0
    lookahead_s: float = 90.0  # the stage-ahead window (BEAT_STAGE_AHEAD_S)
    batch: int = 1000
    queued_republish_s: float = 60.0
    sweep_interval_s: float = 2.0
    max_inflight: int = 0  # 0: no global cap
    stall_exit_s: float = 60.0  # 0: no watchdog (watchdog.py)
    publish_stall_s: float = 5.0  # 0: never hand over (handover.py)
    publish_cooloff_s: float = 30.0

    @classmethod
    def from_settings(cls, **overrides: Any) -> BeatConfig:
        values: dict[str, Any] = {
            "name": f"beat-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}",
            "partitions": settings.SCHEDULER_PARTITIONS,
            "lease_ttl_s": settings.BEAT_LEASE_TTL_S,
            "cycle_s": settings.BEAT_CYCLE_S,
            "lookahead_s": settings.BEAT_STAGE_AHEAD_S,
            "batch": settings.BEAT_BATCH,
            "queued_republish_s": settings.QUEUED_REPUBLISH_S,
            "sweep_interval_s": settings.SWEEP_INTERVAL_S,
            "max_inflight": settings.DISPATCH_MAX_INFLIGHT,
            "stall_exit_s": settings.BEAT_STALL_EXIT_S,
            "publish_stall_s": settings.BEAT_PUBLISH_STALL_S,
            "publish_cooloff_s": settings.BEAT_PUBLISH_COOLOFF_S,
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


class Beat:
    def __init__(self, config: BeatConfig) -> None:
        self.cfg = config
        self.partitions = Partitions(config, on_drop=self._forget, on_fenced=self._fenced)
        # The publish-stall rule (handover.py); the keeper reports whether it is failing.
        self.stall = PublishStall(
            stall_s=config.publish_stall_s, cooloff_s=config.publish_cooloff_s
        )
        self.keeper = LeaseKeeper(
            self.partitions,
            heartbeat=self._totals,
            failing=lambda: self.stall.failing,
            session=self._configure_keeper_session,
        )
        self.admission = Admission(config)
        # Only `run()` (the process) starts it; in-process beats (tests, benches) don't.
        self.watchdog = Watchdog(
            name=config.name, stall_s=config.stall_exit_s, grace_s=config.lease_ttl_s
        )
        # Backfills and bulk operations, on a thread of their own; only `run()` starts it.
        self.control = ControlPump(name=config.name)
        self.heap: list[Pending] = []
        # id -> the item in the heap that stands for it: an item popped that is not
        # its id's current one was superseded by a later load (lazy deletion).
        self.in_heap: dict[str, Pending] = {}
        # The load watermark (store.horizon); None: load the whole window next time.
        self._horizon: tuple[int, datetime] | None = None
        # Held back at admission (a cap): admitted again at the next load.
        self._held: list[Pending] = []
        self.counters = Counters()
        self.stopping = False
        self._last_sweep = 0.0
        self._last_retention = 0.0
        # The history maintenance pass this beat started last (maybe_retention).
        self.maintenance: subprocess.Popen[bytes] | None = None
        self._fired_since_load = True
        self._listen: psycopg.Connection[Any] | None = None
        self._publishers: dict[str, Publisher] = {}
        # Admitted (queued in the database) but not yet on the broker: retried first.
        self._unsent: list[Pending] = []
        # The last publish round owed messages the broker did not take (admission waits).
        self._publish_blocked = False
        # Another beat handed partitions over or came back (NOTIFY REBALANCE).
        self._rebalance_asked = False
        # The partitions this beat handed over when it last stood by.
        self._handed_over: list[int] = []

    @property
    def owned(self) -> dict[int, int]:
        """partition range -> epoch granted to us"""
        return self.partitions.owned

    @property
    def covered(self) -> dict[int, int]:
        """logical partition -> its range's epoch: the rows this beat may load and write"""
        return self.partitions.covered

    # --- lifecycle -----------------------------------------------------------------

    def start(self) -> None:
        self._configure_session()
        self.partitions.ensure()
        store.register_beat(name=self.cfg.name, hostname=socket.gethostname(), pid=os.getpid())
        self.keeper.tick()  # the database clock and the live beats before the first cycle
        self._open_listener()
        from config.celery_app import app

        app.amqp.queues  # noqa: B018 - load Celery's producer machinery before the first due time
        log.info(
            "beat %s started (%d partition ranges, lease %.1fs)",
            self.cfg.name,
            self.partitions.ranges,
            self.cfg.lease_ttl_s,
        )

    def run(self) -> None:
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        self.start()
        self.keeper.start()
        self.control.start()
        self.watchdog.start()
        try:
            while not self.stopping:
                self.watchdog.alive()
                self.cycle()
                self._wait()
        finally:
            self.shutdown()
            self.watchdog.stop()

    def _stop(self, *_: Any) -> None:
        if not self.stopping:
            self.watchdog.terminating()
        self.stopping = True

    def shutdown(self) -> None:
        """Give partitions up so another beat takes them at once instead of after lease expiry."""
        self.control.stop()
        self.keeper.stop()
        try:
            released = self.partitions.release_all()
            if released:
                log.info("beat %s released partitions %s", self.cfg.name, released)
            self.report_counters()
            store.beat_stopped(name=self.cfg.name)
        except Exception:
            log.exception("beat %s: error during shutdown", self.cfg.name)
        if self._listen is not None:
            self._listen.close()
        self._stop_maintenance()

    def _stop_maintenance(self) -> None:
        """A pass still running stops with the beat (each step of it is repeatable:
        the next pass finishes what this one left)."""
        child = self.maintenance
        if child is None or child.poll() is not None:
            return
        child.terminate()
        try:
            child.wait(MAINTENANCE_STOP_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()

    # --- one cycle -------------------------------------------------------------------

    def cycle(self) -> None:
        """One pass: leases, firing, loading, publishing, sweeping. Safe to call repeatedly.

        Publishing does not wait for housekeeping: lease renewal and the heartbeat are
        the keeper's, what is due publishes before the cycle fires and loads (and
        again after, for what came due meanwhile), and the other steps run only when
        the probe says they have something to do.
        """
        with telemetry.tracer.start_as_current_span("beat.cycle") as span:
            span.set_attribute("scheduler.beat", self.cfg.name)
            try:
                self.maintain_leases()
                if self.stall.standby:
                    self.rejoin_when_able()
                elif self.owned:
                    # What is due now goes out first: the probe, firing and loading
                    # (seconds under database latency) wait for it, not it for them.
                    self.publish_due()
                    if self.hand_over_if_stalled():
                        return
                    sweep_due = time.monotonic() - self._last_sweep >= self.cfg.sweep_interval_s
                    found = store.probe(
                        numbers=sorted(self.covered),
                        lookahead=self.cfg.lookahead_s,
                        since=self._horizon,
                        sweep=sweep_due,
                        republish_s=self.cfg.queued_republish_s,
                        grace_s=settings.EXECUTION_BACKSTOP_GRACE_S,
                    )
                    if found.due and self.fire_all_due():
                        self._fired_since_load = True
                    if found.unloaded or self._fired_since_load or self._held:
                        self._fired_since_load = False
                        self.load_pending()
                    self.publish_due()
                    if self.hand_over_if_stalled():
                        return
                    if sweep_due:
                        # Nothing to sweep: the interval starts again without a transaction.
                        self.sweep_when_due(work=found.sweep)
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                log.warning("beat %s: database unavailable (%s); retrying", self.cfg.name, exc)
                self._reset_connection()
            except Exception as exc:
                # Django wraps driver errors; the same reconnect applies to them.
                if exc.__class__.__module__.startswith("django.db"):
                    log.warning("beat %s: database error (%s); retrying", self.cfg.name, exc)
                    self._reset_connection()
                else:
                    raise

    def maintain_leases(self) -> int:
        """Drop what the keeper could not renew (renewing inline when no keeper thread
        runs and a renewal is due), then hand over or take partitions (none while
        standing by after a publish stall): partitions lost or changed. No round trip
        unless the fair share changed, a renewal is due, or another beat announced a
        hand-over (REBALANCE)."""
        before = dict(self.owned)
        if self._rebalance_asked:
            # A beat handed its partitions over (or came back): the live beats now, not
            # at the keeper's next renewal, so they are taken on this very cycle.
            self._rebalance_asked = False
            self.keeper.tick()
        else:
            self.keeper.keep()
        lost = self.partitions.apply_lost()
        changed = lost + self.partitions.rebalance(self.keeper.live, take=not self.stall.standby)
        if any(before.get(n) != epoch for n, epoch in self.owned.items()):
            # A partition taken at a new epoch (a crashed or departing beat's, or our
            # own lost and taken back in this same call, its heap items dropped): its
            # staged rows are `scheduled` in PostgreSQL, written before our
            # watermark — load it all; and sweep on this cycle: rows a stalled beat
            # admitted and handed back unpublished are owed at once.
            self._horizon = None
            self._last_sweep = 0.0
        return changed

    def fire_all_due(self) -> int:
        """Fire batch after batch until the due set is drained: schedules claimed."""
        claimed = 0
        while True:
            batch = self.fire_due()
            claimed += batch
            # A batch returned: the beat is working, not stuck in a call. Draining a large
            # due set can outlast the watchdog's bound (steady bench, 10,000/s: 300,000
            # rows due within the stage-ahead window, admitted chunk by chunk).
            self.watchdog.alive()
            if batch < self.cfg.batch:
                return claimed

    def fire_due(self) -> int:
        """One firing batch (one fenced transaction): schedules claimed."""
        with telemetry.tracer.start_as_current_span("beat.claim_batch") as span:
            claimed, fired = firing.fire_due(
                self.partitions, lookahead_s=self.cfg.lookahead_s, batch=self.cfg.batch
            )
            self.counters.fired += fired
            span.set_attribute("scheduler.claimed", claimed)
            return claimed

    def load_pending(self) -> int:
        """Executions staged within the window into the heap (incrementally, since the
        last load's watermark), their messages prepared ahead: how many were new."""
        loaded: list[Pending] = []
        held, self._held = self._held, []
        for item in held:
            if item.id not in self.in_heap and item.partition in self.covered:
                self._push(item)
        items, mark = firing.load_pending(
            sorted(self.covered),
            lookahead_s=self.cfg.lookahead_s,
            # Pages bounded: a 100k load's transient rows stay small beside the heap.
            limit=min(self.cfg.batch * 10, 10_000),
            since=self._horizon,
        )
        self._horizon = mark
        for item in items:
            known = self.in_heap.get(item.id)
            if known is not None and (known.due, known.attempt) == (item.due, item.attempt):
                continue
            # New, or rewritten since it was loaded (a retry's new due time): the
            # older heap entry is skipped when popped.
            self._push(item)
            loaded.append(item)
        if loaded:
            self._publisher().prepare(loaded)
        return len(loaded)

    def _push(self, item: Pending) -> None:
        self.in_heap[item.id] = item
        heapq.heappush(self.heap, item)

    def publish_due(self) -> int:
        """Admit what is due now and publish it, chunk by chunk: messages published."""
        now = self.db_time()
        ready: list[Pending] = []
        dropped: list[str] = []
        while self.heap and self.heap[0].due <= now:
            item = heapq.heappop(self.heap)
            if self.in_heap.get(item.id) is not item:
                continue  # superseded by a later load of the same id
            del self.in_heap[item.id]
            if item.partition in self.covered:
                ready.append(item)
            else:
                dropped.append(item.id)
        # What was admitted but could not be published last time keeps its slot: no
        # second admission, just another try (a duplicate message would be harmless).
        retry = [p for p in self._unsent if p.partition in self.covered]
        self._unsent = []
        published = self._send(retry) if retry else 0
        self._publish_blocked = False
        if not retry and not ready:
            self.stall.idle()
        if ready:
            try:
                published += self._admit_chunks(ready, now, dropped)
            finally:
                self.admission.release()
        if dropped:
            self._forget_prepared(dropped)
        return published

    def _admit_chunks(self, ready: list[Pending], now: float, dropped: list[str]) -> int:
        """Admit and publish `ready` a chunk at a time (publish_due): messages published;
        the ids neither admitted nor held are added to `dropped`."""
        published = 0
        try:
            self.admission.reserve(ready, self.partitions)
        except BaseException:
            self._requeue(ready)  # as for a failed admission below
            raise
        for start in range(0, len(ready), ADMIT_CHUNK):
            if self._unsent:
                # The broker did not take what was owed: admitting more would take slots
                # and stamp admission times for messages that cannot go out. The rest
                # stay `scheduled`, back in the heap: tried next cycle, or admitted by
                # their next owner if this beat hands its partitions over.
                self._publish_blocked = True
                for item in ready[start:]:
                    self._push(item)
                break
            chunk = ready[start : start + ADMIT_CHUNK]
            try:
                admitted = self.admission.admit(chunk, self.partitions, now=now)
            except BaseException:
                self._requeue(ready[start:])
                raise
            held = self.admission.held
            self._held.extend(held)
            # Neither admitted nor held: withdrawn, skipped, cancelled or fenced off.
            done = {p.id for p in admitted} | {p.id for p in held}
            dropped.extend(p.id for p in chunk if p.id not in done)
            if admitted:
                published += self._send(admitted)
            self.watchdog.alive()  # a chunk admitted and pushed: progress, as in fire_all_due
        return published

    def _requeue(self, items: list[Pending]) -> None:
        """After an admission rolled back (the database went away mid-burst): these are
        still `scheduled`, unchanged, and older than the load watermark, so no later load
        would find them again — they go back into the heap for the next cycle."""
        for item in items:
            if item.id not in self.in_heap:
                self._push(item)

    def _send(self, to_send: list[Pending]) -> int:
        """Publish admitted executions; what the broker did not take is retried next time."""
        published = self.publish_items(to_send)
        if published:
            faults.crash_at("after_publish")
        sent = {p.id for p in published}
        self._unsent.extend(p for p in to_send if p.id not in sent)
        self.counters.published += len(published)
        return len(published)

    def hand_over_if_stalled(self) -> bool:
        """After BEAT_PUBLISH_STALL_S with work due and nothing published (the rule:
        handover.py), give every partition to a beat that can publish, and stand by:
        True when it did.

        One transaction: the beat stands by only if another live beat takes part (the
        database decides, one hand-over at a time), the rows it admitted but could not
        publish are handed back under the fence — their next owner publishes them at
        its first sweep — and its leases are released through the ordinary path, so
        the next owner's acquire bumps every epoch and anything this beat might still
        try to write under the old ones is refused. The NOTIFY, sent at commit, makes
        the other beats take the partitions on their next cycle.
        """
        if not self.owned or not self.stall.should_hand_over():
            return False
        stalled_for = self.stall.stalled_for()
        unsent = list(self._unsent)
        with telemetry.tracer.start_as_current_span("beat.handover") as span:
            span.set_attribute("scheduler.beat", self.cfg.name)
            span.set_attribute("scheduler.stalled_s", round(stalled_for, 3))
            with transaction.atomic():
                if not store.step_out(name=self.cfg.name, ttl=self.cfg.lease_ttl_s):
                    self.stall.no_taker()
                    span.set_attribute("scheduler.handed_over", False)
                    log.warning(
                        "beat %s: nothing published for %.1f s with work due, but no other "
                        "beat takes part to take its partitions: keeping them",
                        self.cfg.name,
                        stalled_for,
                    )
                    return False
                numbers = self.partitions.fence()
                held = set(numbers)
                owed = [p for p in unsent if p.partition in held]
                handed_back = (
                    store.hand_back_unpublished(
                        ids=[p.id for p in owed],
                        attempts=[p.attempt for p in owed],
                        numbers=numbers,
                    )
                    if owed
                    else 0
                )
                released = self.partitions.release_all()
                notify(WAKE_CHANNEL, REBALANCE)
            self.stall.stepped_out()
            self._handed_over = released
            span.set_attribute("scheduler.handed_over", True)
            span.set_attribute("scheduler.partitions", len(released))
        log.warning(
            "beat %s: nothing published for %.1f s with work due (broker unreachable or "
            "silent): handed partitions %s over to the other beats (%d admitted executions "
            "handed back unpublished) and stands by for at least %.0f s",
            self.cfg.name,
            stalled_for,
            released,
            handed_back,
            self.cfg.publish_cooloff_s,
        )
        return True

    def rejoin_when_able(self) -> bool:
        """Standing by after a hand-over: take part again when the rule says so
        (handover.py: the broker answers after the cool-off, no other beat takes part,
        or what was handed over was left untaken). True when it did."""
        why = self.stall.rejoin_reason(
            others_take_part=any(name != self.cfg.name for name in self.keeper.live),
            lease_s=self.cfg.lease_ttl_s,
            partitions_untaken=lambda: store.partitions_free(numbers=self._handed_over) > 0,
            broker_answers=lambda: self._publisher().ping(),
        )
        if why is None:
            return False
        standby_s = self.stall.standby_for()
        with transaction.atomic():
            store.rejoin(name=self.cfg.name)
            notify(WAKE_CHANNEL, REBALANCE)
        self.stall.rejoined()
        log.warning(
            "beat %s takes part again after %.1f s standing by: %s",
            self.cfg.name,
            standby_s,
            why,
        )
        return True

    def sweep_when_due(self, *, work: bool = True) -> int:
        """Every sweep interval: the sweep (when the probe found work for it), then
        retention when it is due."""
        if time.monotonic() - self._last_sweep < self.cfg.sweep_interval_s:
            return 0
        swept = self.sweep() if work else 0
        self._last_sweep = time.monotonic()
        return swept + self.maybe_retention()

    def sweep(self) -> int:
        """Lost messages re-published, pause ends, paused occurrences recorded, expired
        worker leases rescued: rows handled.

        Every write of the sweep is made in the transaction that fenced the
        partitions (docs/explanation/firing.md, "Partitions, leases and the fence"):
        a takeover cannot commit between the fence
        and a rescue, so a beat paused past its lease rescues nothing afterwards.
        """
        with transaction.atomic():
            numbers = self.partitions.fence()
            if not numbers:
                return 0
            stale = store.stale_queued(
                numbers=numbers, timeout=self.cfg.queued_republish_s, limit=self.cfg.batch
            )
            resumed = store.auto_resume(numbers=numbers)
            if resumed:
                store.record_auto_resumed(resumed)
            recorded = firing.record_paused(self.partitions, numbers, batch=self.cfg.batch)
            rescued = sweeper.sweep_expired_leases(partitions=numbers)
        republished = 0
        if stale:
            again = [
                Pending(0, str(r.id), r.attempt, r.queue or DEFAULT_QUEUE, 0, -1) for r in stale
            ]
            republished = len(self.publish_items(again))
            log.info(
                "beat %s re-published %d queued executions nobody claimed",
                self.cfg.name,
                len(stale),
            )
        return republished + len(resumed) + recorded + rescued

    def maybe_retention(self) -> int:
        """One beat (the owner of partition 0), now and then: the history's maintenance
        pass (day partitions a week ahead, expired days archived and dropped, what lies
        before them purged: dispatch/history/maintenance.py) in a child process, so
        the pass never holds this loop or its interpreter. 1 when one was started."""
        if (
            0 not in self.owned
            or time.monotonic() - self._last_retention < settings.RETENTION_INTERVAL_S
            or (self.maintenance is not None and self.maintenance.poll() is None)
        ):
            return 0
        self._last_retention = time.monotonic()
        self.maintenance = history_maintenance.spawn()
        return 1

    def report_counters(self) -> int:
        """Heartbeat with the counters now (the keeper's round trip, renewals included):
        1 when it was written. The keeper reports them every third of a lease anyway."""
        self.keeper.tick()
        return 1

    # --- the pieces the steps share --------------------------------------------------

    def publish_items(self, items: list[Pending]) -> list[Pending]:
        """Every publish goes through here, so the publish-stall rule sees each outcome."""
        started = time.monotonic()
        sent = self._publisher().publish(items)
        self.stall.attempted(started=started, sent=len(sent), total=len(items))
        return sent

    def _forget_prepared(self, ids: list[str]) -> None:
        """Items that left the heap unpublished: the publisher drops their prepared bytes."""
        self._publisher().forget(ids)

    def _publisher(self) -> Publisher:
        broker = settings.CELERY_BROKER_URL
        if broker not in self._publishers:
            # Each broker call is bounded well inside the lease (a handful of them can
            # follow each other on a failure), and leases are renewed while it waits.
            self._publishers[broker] = publisher_for(
                broker,
                beat=self.cfg.name,
                io_timeout_s=max(1.0, min(5.0, self.cfg.lease_ttl_s / 6)),
                keepalive=self._keep_leases,
            )
        return self._publishers[broker]

    def _keep_leases(self) -> None:
        """While publishing waits on the broker: the keeper's renewal when one is due
        (a no-op when the keeper's thread runs: it renews by itself), so a slow or
        silent broker cannot cost the partitions."""
        try:
            self.keeper.keep()
        except Exception as exc:
            # The cycle's next steps report and recover the database; publishing goes on.
            log.warning("beat %s: lease renewal while publishing failed (%s)", self.cfg.name, exc)

    def _fair_share(self, live: list[str]) -> int:
        return self.partitions.fair_share(live)

    def _fenced(self) -> None:
        self.counters.stale_writes_rejected += 1

    def _forget(self, span: range) -> None:
        """A partition range given up or lost: the next owner's sweep re-publishes its
        admitted executions (they are queued, unclaimed), and loads the rest."""
        self._unsent = [p for p in self._unsent if p.partition not in span]
        self._held = [p for p in self._held if p.partition not in span]
        gone = [p.id for p in self.in_heap.values() if p.partition in span]
        if gone:
            self.in_heap = {i: p for i, p in self.in_heap.items() if p.partition not in span}
            self.heap = [p for p in self.heap if self.in_heap.get(p.id) is p]
            heapq.heapify(self.heap)
            self._forget_prepared(gone)

    def _totals(self) -> tuple[int, int, int]:
        """The counters the heartbeat reports: (fired, published, stale writes rejected)."""
        c = self.counters
        return c.fired, c.published, c.stale_writes_rejected

    # --- the database session and clock ----------------------------------------------

    def _configure_session(self) -> None:
        # A beat paused inside a transaction must not keep schedule rows locked:
        # every other beat would silently skip them (failure contract, "Stalled sessions
        # hold no locks": docs/explanation/failure-contract.md). The server
        # ends such a session well before the lease could be taken over.
        idle_ms = max(1000, int(self.cfg.lease_ttl_s * 1000 / 2))
        store.set_session_limits(idle_ms=idle_ms, statement_timeout="30s")

    def _configure_keeper_session(self) -> None:
        # The keeper's connection: one autocommit statement at a time, each bounded
        # well inside the third of a lease it has before the next renewal is due.
        third_ms = max(500, int(self.cfg.lease_ttl_s * 1000 / 3))
        store.set_session_limits(idle_ms=third_ms, statement_timeout=f"{third_ms}ms")

    def _reset_connection(self) -> None:
        connection.close()
        # The next connection may reach another server (a fail-over's new primary),
        # whose transaction ids need not follow the old one's: one that lost the old
        # primary's last transactions hands their ids out again, and rows written
        # under them look older than the load watermark — never loaded, never fired.
        # So the next load reads the whole stage-ahead window (known rows are skipped).
        self._horizon = None
        self._fired_since_load = True
        time.sleep(min(2.0, self.cfg.cycle_s))
        try:
            self._configure_session()
        except Exception:
            return
        if self._listen is None or self._listen.closed:
            self._open_listener()

    @property
    def clock_offset(self) -> float:
        """Database clock minus local clock, seconds (measured by each keeper round trip)."""
        return self.keeper.clock_offset

    def db_time(self) -> float:
        return time.time() + self.clock_offset

    # --- waiting -----------------------------------------------------------------------

    def _open_listener(self) -> None:
        try:
            self._listen = open_listener(WAKE_CHANNEL)
        except psycopg.Error:
            log.warning("beat %s: LISTEN unavailable; polling every cycle", self.cfg.name)
            self._listen = None

    def _wait(self) -> None:
        timeout = self.cfg.cycle_s
        if self.heap and not self._publish_blocked:
            # (Blocked: what is due waits for the broker, one cycle apart, not in a spin.)
            timeout = max(0.0, min(timeout, self.heap[0].due - self.db_time()))
        if timeout <= 0:
            return
        if self._listen is None:
            time.sleep(timeout)
            return
        try:
            ready, _, _ = select.select([self._listen.fileno()], [], [], timeout)
            if ready:
                # Drain notifications: any wake-up means "look now".
                for note in self._listen.notifies(timeout=0):
                    if note.payload == REBALANCE:
                        self._rebalance_asked = True
        except (psycopg.Error, OSError, ValueError):
            self._listen = None
