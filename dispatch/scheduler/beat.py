"""The beat: a scheduler shard.

A beat leases a fair share of the due index's partitions, and each cycle
  1. fires: claims due schedules of its partitions (FOR UPDATE SKIP LOCKED),
     creates their executions (INSERT … ON CONFLICT DO NOTHING) and advances
     next_run_at, in one transaction fenced by its partition epochs;
  2. loads executions due within the lookahead into an in-memory heap;
  3. at each one's due time (database clock) decides the overlap policy, admits
     it against the tenant's and the platform's in-flight caps (marking it queued,
     in one fenced transaction that serialises admission across beats), then
     publishes what it admitted to the Celery queue `{priority}.{duration}`;
  4. sweeps: re-publishes queued rows nobody claimed, rescues expired worker
     leases, resumes schedules whose pause ended.
Any number of beats run side by side; they coordinate only through PostgreSQL.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import os
import select
import signal
import socket
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection, transaction

from config import telemetry
from core import faults
from core.db import db_clock
from dispatch.models import ExecutionEvent, Schedule
from dispatch.scheduler import dependencies, retention
from dispatch.services import WAKE_CHANNEL, schedule_snapshot
from dispatch.sql import queries
from dispatch.timing import cron
from tenants.models import AuditEvent

log = logging.getLogger("dispatch.beat")

TASK_NAME = "dispatch.run_execution"
# Occurrences of one paused upstream recorded per sweep at most; older ones of a
# longer backlog (the beat was down too) get one summary event instead.
PAUSED_RECORD_LIMIT = 100


@dataclass(order=True)
class Pending:
    due: float  # epoch seconds, database clock
    id: str = field(compare=False)
    attempt: int = field(compare=False)
    queue: str = field(compare=False)
    tenant_id: int = field(compare=False)
    partition: int = field(compare=False)
    schedule_id: str = field(default="", compare=False)
    overlap: str = field(default="allow", compare=False)
    scheduled_for: datetime | None = field(default=None, compare=False)
    trigger: str = field(default="", compare=False)
    # Not yet counted against the daily quota: a first attempt still `scheduled`. An
    # attempt handed back by the rate limiter (retry_scheduled, same attempt) was.
    fresh: bool = field(default=True, compare=False)


@dataclass
class Counters:
    fired: int = 0
    skipped: int = 0
    published: int = 0
    republished: int = 0
    stale_writes_rejected: int = 0


@dataclass
class BeatConfig:
    name: str
    partitions: int = 16
    lease_ttl_s: float = 10.0
    cycle_s: float = 1.0
    lookahead_s: float = 10.0
    batch: int = 1000
    queued_republish_s: float = 60.0
    sweep_interval_s: float = 2.0
    max_inflight: int = 0  # 0: no global cap

    @classmethod
    def from_settings(cls, **overrides: Any) -> BeatConfig:
        values: dict[str, Any] = {
            "name": f"beat-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}",
            "partitions": settings.SCHEDULER_PARTITIONS,
            "lease_ttl_s": settings.BEAT_LEASE_TTL_S,
            "cycle_s": settings.BEAT_CYCLE_S,
            "lookahead_s": settings.BEAT_LOOKAHEAD_S,
            "batch": settings.BEAT_BATCH,
            "queued_republish_s": settings.QUEUED_REPUBLISH_S,
            "sweep_interval_s": settings.SWEEP_INTERVAL_S,
            "max_inflight": settings.DISPATCH_MAX_INFLIGHT,
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


def _rows(sql_name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    # psycopg's own cursor (server-side binding, binary format) rather than
    # Django's client-side one: the firing statements carry arrays of thousands
    # of values, which client-side binding would quote into the SQL text one by one.
    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cur:
        cur.execute(queries[sql_name], params, binary=True)
        return list(cur.fetchall()) if cur.description else []


class Beat:
    def __init__(self, config: BeatConfig) -> None:
        self.cfg = config
        self.owned: dict[int, int] = {}  # partition -> epoch granted to us
        self.heap: list[Pending] = []
        self.in_heap: set[str] = set()
        self.counters = Counters()
        self._reported = Counters()
        self.stopping = False
        self.clock_offset = 0.0  # database clock minus local clock, seconds
        self._last_sweep = 0.0
        self._last_retention = 0.0
        self._live_beats = 1
        self._listen: psycopg.Connection[Any] | None = None
        self._template: tuple[dict[str, Any], dict[str, Any], Any] | None = None
        self._declared: set[str] = set()
        self._trace_headers: dict[str, Any] = {}
        self._amqp: tuple[Any, Any, dict[str, int], list[int]] | None = None
        self._redis: Any = None
        self._tenant_info: dict[int, tuple[Any, ...]] = {}
        # Admitted (queued in the database) but not yet on the broker: retried first.
        self._unsent: list[Pending] = []

    # --- lifecycle -----------------------------------------------------------------

    def start(self) -> None:
        self._configure_session()
        _rows("partitions_ensure", {"count": self.cfg.partitions})
        _rows(
            "beat_register",
            {"name": self.cfg.name, "hostname": socket.gethostname(), "pid": os.getpid()},
        )
        self._open_listener()
        from config.celery_app import app

        app.amqp.queues  # noqa: B018 - load Celery's producer machinery before the first due time
        log.info(
            "beat %s started (%d partitions, lease %.1fs)",
            self.cfg.name,
            self.cfg.partitions,
            self.cfg.lease_ttl_s,
        )

    def run(self) -> None:
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        self.start()
        try:
            while not self.stopping:
                self.cycle()
                self._wait()
        finally:
            self.shutdown()

    def _stop(self, *_: Any) -> None:
        self.stopping = True

    def shutdown(self) -> None:
        """Give partitions up so another beat takes them at once instead of after lease expiry."""
        try:
            if self.owned:
                numbers, epochs = self._owned_arrays()
                _rows(
                    "partitions_release",
                    {"numbers": numbers, "epochs": epochs, "owner": self.cfg.name},
                )
                log.info("beat %s released partitions %s", self.cfg.name, numbers)
            self.owned.clear()
            self._report()
            _rows("beat_stopped", {"name": self.cfg.name})
        except Exception:
            log.exception("beat %s: error during shutdown", self.cfg.name)
        if self._listen is not None:
            self._listen.close()

    def _configure_session(self) -> None:
        # A beat paused inside a transaction must not keep schedule rows locked:
        # every other beat would silently skip them (RELIABILITY.md). The server
        # ends such a session well before the lease could be taken over.
        idle_ms = max(1000, int(self.cfg.lease_ttl_s * 1000 / 2))
        with connection.cursor() as cur:
            cur.execute(f"SET idle_in_transaction_session_timeout = {idle_ms}")
            cur.execute("SET statement_timeout = '30s'")

    def _open_listener(self) -> None:
        params = connection.get_connection_params()
        params.pop("cursor_factory", None)
        params.pop("context", None)
        try:
            self._listen = psycopg.connect(**params, autocommit=True)
            self._listen.execute(f"LISTEN {WAKE_CHANNEL}")
        except psycopg.Error:
            log.warning("beat %s: LISTEN unavailable; polling every cycle", self.cfg.name)
            self._listen = None

    # --- one cycle ---------------------------------------------------------------------

    def cycle(self) -> None:
        """One pass: leases, firing, loading, publishing, sweeping. Safe to call repeatedly."""
        with telemetry.tracer.start_as_current_span("beat.cycle") as span:
            span.set_attribute("scheduler.beat", self.cfg.name)
            self._cycle()

    def _cycle(self) -> None:
        try:
            self._sync_clock()
            self.maintain_leases()
            if self.owned:
                while self.fire_due() >= self.cfg.batch:
                    pass
                self.load_pending()
                self.publish_due()
                if time.monotonic() - self._last_sweep >= self.cfg.sweep_interval_s:
                    self.sweep()
                    self._last_sweep = time.monotonic()
                    self.maybe_retention()
            self._report()
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

    def _reset_connection(self) -> None:
        connection.close()
        time.sleep(min(2.0, self.cfg.cycle_s))
        try:
            self._configure_session()
        except Exception:
            return
        if self._listen is None or self._listen.closed:
            self._open_listener()

    def _sync_clock(self) -> None:
        # Due-ness is judged on the database clock (RELIABILITY.md C5); the local
        # clock only measures intervals, so a skewed host neither fires early nor late.
        before = time.time()
        db_now = db_clock().timestamp()
        after = time.time()
        self.clock_offset = db_now - (before + after) / 2

    def db_time(self) -> float:
        return time.time() + self.clock_offset

    def _owned_arrays(self) -> tuple[list[int], list[int]]:
        numbers = sorted(self.owned)
        return numbers, [self.owned[n] for n in numbers]

    # --- partition leases ------------------------------------------------------------------

    def maintain_leases(self) -> None:
        if self.owned:
            numbers, epochs = self._owned_arrays()
            renewed = {
                r[0]
                for r in _rows(
                    "partitions_renew",
                    {
                        "numbers": numbers,
                        "epochs": epochs,
                        "owner": self.cfg.name,
                        "ttl": self.cfg.lease_ttl_s,
                    },
                )
            }
            lost = set(numbers) - renewed
            if lost:
                # The renewal is the first write a beat makes after a pause; it being
                # refused is the fence working, and is counted as such.
                self.counters.stale_writes_rejected += 1
                self._lose(lost, why="lease could not be renewed (expired or taken over)")
        live = _rows("beat_heartbeat", self._heartbeat_params())[0][0]
        share = self._fair_share(list(live))
        if len(self.owned) > share:
            # Rebalance: a beat joined; hand over what exceeds our fair share.
            extra = sorted(self.owned)[share:]
            _rows(
                "partitions_release",
                {
                    "numbers": extra,
                    "epochs": [self.owned[n] for n in extra],
                    "owner": self.cfg.name,
                },
            )
            for n in extra:
                self._drop(n)
            log.info(
                "beat %s released %s to rebalance (%d live beats)",
                self.cfg.name,
                extra,
                self._live_beats,
            )
        elif len(self.owned) < share:
            got = _rows(
                "partitions_acquire",
                {
                    "count": self.cfg.partitions,
                    "want": share - len(self.owned),
                    "owner": self.cfg.name,
                    "ttl": self.cfg.lease_ttl_s,
                },
            )
            for number, epoch in got:
                self.owned[number] = epoch
            if got:
                log.info(
                    "beat %s acquired partitions %s", self.cfg.name, sorted((n, e) for n, e in got)
                )

    def _fair_share(self, live: list[str]) -> int:
        """This beat's exact share: P // N each, plus one for the first P % N beats by name.

        With a rounded-up share for everyone, N beats holding ceil(P/N) each can
        already cover every partition, so a newcomer would get nothing until
        some lease happened to lapse; exact targets make the others hand over.
        """
        names = sorted(set(live) | {self.cfg.name})
        self._live_beats = len(names)
        base, extra = divmod(self.cfg.partitions, len(names))
        return base + (1 if names.index(self.cfg.name) < extra else 0)

    def _heartbeat_params(self) -> dict[str, Any]:
        import json

        delta = Counters(
            fired=self.counters.fired - self._reported.fired,
            published=self.counters.published - self._reported.published,
            stale_writes_rejected=self.counters.stale_writes_rejected
            - self._reported.stale_writes_rejected,
        )
        self._reported.fired = self.counters.fired
        self._reported.published = self.counters.published
        self._reported.stale_writes_rejected = self.counters.stale_writes_rejected
        return {
            "name": self.cfg.name,
            "partitions": json.dumps(sorted(self.owned)),
            "rejected": delta.stale_writes_rejected,
            "fired": delta.fired,
            "published": delta.published,
            "ttl": self.cfg.lease_ttl_s,
        }

    def _report(self) -> None:
        if (self.counters.fired, self.counters.published, self.counters.stale_writes_rejected) != (
            self._reported.fired,
            self._reported.published,
            self._reported.stale_writes_rejected,
        ):
            _rows("beat_heartbeat", self._heartbeat_params())

    def _drop(self, number: int) -> None:
        self.owned.pop(number, None)
        # The next owner's sweep re-publishes these (they are queued, unclaimed).
        self._unsent = [p for p in self._unsent if p.partition != number]
        kept = [p for p in self.heap if p.partition != number]
        if len(kept) != len(self.heap):
            self.heap = kept
            heapq.heapify(self.heap)
            self.in_heap = {p.id for p in self.heap}

    def _lose(self, numbers: set[int], *, why: str) -> None:
        for number in sorted(numbers):
            log.warning(
                "beat %s: fencing — partition %d (epoch %d) lost: %s; its writes are rejected",
                self.cfg.name,
                number,
                self.owned.get(number, -1),
                why,
            )
            self._drop(number)

    def _fence(self) -> list[int]:
        """Inside a transaction: share-lock our partitions at our epochs; drop any we lost."""
        numbers, epochs = self._owned_arrays()
        held = {
            r[0]
            for r in _rows(
                "fence_partitions", {"numbers": numbers, "epochs": epochs, "owner": self.cfg.name}
            )
        }
        lost = set(numbers) - held
        if lost:
            self.counters.stale_writes_rejected += 1
            self._lose(lost, why="epoch moved on or lease expired")
        return sorted(held)

    # --- firing --------------------------------------------------------------------------

    def fire_due(self) -> int:
        """Create executions for due schedules of our partitions; returns schedules claimed."""
        with telemetry.tracer.start_as_current_span("beat.claim_batch") as span:
            claimed = self._fire_due()
            span.set_attribute("scheduler.claimed", claimed)
            return claimed

    def _fire_due(self) -> int:
        with transaction.atomic():
            numbers = self._fence()
            if not numbers:
                return 0
            ((claimed, fired, skipped),) = _rows(
                "fire_due_one_offs",
                {
                    "numbers": numbers,
                    "epochs": [self.owned[n] for n in numbers],
                    "lookahead": self.cfg.lookahead_s,
                    "batch": self.cfg.batch,
                    "fired_by": self.cfg.name,
                },
            )
            if skipped:
                # One-offs skipped by their misfire policy skip their dependents too.
                dependencies.propagate(execution_ids=list(skipped))
            planned_claimed, planned_fired = self._fire_planned(numbers)
            faults.crash_at("before_fire_commit")
        faults.crash_at("after_fire_commit")
        self.counters.fired += fired + planned_fired
        return int(claimed) + planned_claimed

    def _fire_planned(self, numbers: list[int]) -> tuple[int, int]:
        """The general path, occurrences planned in Python (cron math, misfire, overlap):
        (schedules claimed, executions inserted)."""
        now = db_clock()
        due = _rows(
            "due_schedules",
            {"numbers": numbers, "lookahead": self.cfg.lookahead_s, "batch": self.cfg.batch},
        )
        if not due:
            return 0, 0
        until = now + timedelta(seconds=self.cfg.lookahead_s)
        plan = _FirePlan(beat=self.cfg.name, epochs=self.owned)
        # The overlap policy is not applied here: an occurrence is planned up to the
        # lookahead before it is due, and whether the previous run is still active
        # is only known then (publish_due decides it at due time).
        for row in due:
            plan.add_schedule(row, now=now, until=until)
        inserted = _rows("insert_executions", plan.insert_params()) if plan.ids else []
        skipped = [eid for eid, state in inserted if state == "skipped"]
        if skipped:
            # A skipped occurrence skips its dependents too, naming the upstream.
            dependencies.propagate(execution_ids=skipped)
        _rows("advance_schedules", {"ids": plan.advance_ids, "next_run_ats": plan.advance_to})
        if plan.events:
            _events(plan.events)
        return len(due), len(inserted)

    # --- publishing --------------------------------------------------------------------------

    def load_pending(self) -> None:
        numbers = sorted(self.owned)
        rows = _rows(
            "pending_executions",
            {"numbers": numbers, "lookahead": self.cfg.lookahead_s, "limit": self.cfg.batch * 10},
        )
        for row in rows:
            eid, attempt, due, prio, duration, tenant_id, partition, sid, overlap, sf, trig, st = (
                row
            )
            key = str(eid)
            if key in self.in_heap:
                continue
            self.in_heap.add(key)
            heapq.heappush(
                self.heap,
                Pending(
                    due.timestamp(),
                    key,
                    attempt,
                    f"{prio}.{duration}",
                    tenant_id,
                    partition,
                    str(sid),
                    overlap,
                    sf,
                    trig,
                    st == "scheduled",
                ),
            )

    def publish_due(self) -> int:
        now = self.db_time()
        ready: list[Pending] = []
        while self.heap and self.heap[0].due <= now:
            item = heapq.heappop(self.heap)
            self.in_heap.discard(item.id)
            if item.partition in self.owned:
                ready.append(item)
        # What was admitted but could not be published last time keeps its slot: no
        # second admission, just another try (a duplicate message would be harmless).
        retry = [p for p in self._unsent if p.partition in self.owned]
        self._unsent = []
        admitted = self._admit(ready) if ready else []
        to_send = retry + admitted
        if not to_send:
            return 0
        published = self._publish(to_send)
        if published:
            faults.crash_at("after_publish")
        sent = {p.id for p in published}
        self._unsent = [p for p in to_send if p.id not in sent]
        self.counters.published += len(published)
        return len(published)

    def _admit(self, ready: list[Pending]) -> list[Pending]:
        """Decide overlap and admission at due time, in one fenced transaction; returns
        the executions now queued, to be published.

        Admission is atomic across beats: capped tenants' quota rows (and, with
        DISPATCH_MAX_INFLIGHT, one platform-wide advisory lock) are locked first,
        the in-flight counts are read after the locks were granted, and the admitted
        rows become `queued` before the transaction commits — so the next beat to
        take the lock counts them. Slots are not a counter but the queued/running
        rows themselves: nothing can leak when a beat dies (see admit_executions).
        """
        with transaction.atomic():
            numbers = self._fence()
            owned = set(numbers)
            ready = [p for p in ready if p.partition in owned]
            if not ready:
                return []
            # Locks first (quota rows, then execution rows): the manual trigger takes
            # the same order, so the two cannot deadlock.
            tenant_ids = sorted({p.tenant_id for p in ready})
            if self.cfg.max_inflight:
                _rows("admission_lock_global", {})
            _rows("admission_lock_tenants", {"tenant_ids": tenant_ids})
            ready = self._decide_overlap(ready)
            to_send, held = self._apply_limits(ready)
            to_send, over_quota = self._daily_quota(to_send)
            admitted: set[str] = set()
            if to_send:
                admitted = {
                    str(r[0])
                    for r in _rows(
                        "admit_executions",
                        {
                            "ids": [p.id for p in to_send],
                            "attempts": [p.attempt for p in to_send],
                            "queues": [p.queue for p in to_send],
                            "numbers": numbers,
                        },
                    )
                }
            for reason, items in over_quota.items():
                rows = _rows(
                    "mark_quota_exhausted", {"ids": [p.id for p in items], "reason": reason}
                )
                _events([(sid, tid, eid, "quota_exhausted", reason) for eid, sid, tid in rows])
                dependencies.propagate(execution_ids=[r[0] for r in rows])
            for reason, items in held.items():
                code = "held_concurrency" if "concurrency" in reason else "held_capacity"
                rows = _rows(
                    "mark_held", {"ids": [p.id for p in items], "code": code, "reason": reason}
                )
                _events([(sid, tid, eid, code, reason) for eid, sid, tid in rows])
        faults.crash_at("after_admit")
        return [p for p in to_send if p.id in admitted]

    def _decide_overlap(self, ready: list[Pending]) -> list[Pending]:
        """The overlap policy, at the occurrence's due time (inside the admission transaction).

        A run of the schedule is "active" for a new occurrence when it is queued,
        running or retrying, or is itself due but waiting (held at a cap) for an
        earlier occurrence; a later occurrence planned ahead is not. `forbid` skips
        the new occurrence while one is active; `replace` cancels them, the newest
        due occurrence winning. Catch-up runs of a misfire replay do not count
        against each other (the policy asked for that many). Retries continue a run
        that was let through and are not re-decided. Only the partition's owner
        publishes a schedule's executions, so no other beat decides concurrently.
        """
        firsts: dict[str, list[Pending]] = defaultdict(list)
        for p in ready:
            if p.attempt == 1 and p.overlap in ("forbid", "replace") and p.schedule_id:
                firsts[p.schedule_id].append(p)
        if not firsts:
            return ready
        active: dict[str, list[tuple[str, str, datetime | None, bool, str]]] = defaultdict(list)
        for sid, items in firsts.items():
            # The candidates themselves: scheduled and due (a sibling can block another).
            active[sid] = [(p.id, "scheduled", p.scheduled_for, True, p.trigger) for p in items]
        for sid, eid, state, scheduled_for, due, trigger in _rows(
            "active_executions",
            {"ids": sorted(firsts), "candidates": [p.id for v in firsts.values() for p in v]},
        ):
            active[str(sid)].append((str(eid), state, scheduled_for, due, trigger))

        def prior(p: Pending, gone: set[str]) -> list[tuple[str, str]]:
            return [
                (eid, state)
                for eid, state, sf, due, trigger in active[p.schedule_id]
                if eid != p.id
                and eid not in gone
                and (
                    state != "scheduled"
                    or (
                        due
                        and sf is not None
                        and p.scheduled_for is not None
                        and sf < p.scheduled_for
                    )
                )
                and not (p.trigger == trigger == "catch_up")
            ]

        dropped: set[str] = set()
        skips: list[tuple[str, str]] = []
        cancel: list[str] = []
        for items in firsts.values():
            items.sort(key=lambda p: (p.scheduled_for or datetime.min.replace(tzinfo=UTC), p.id))
            if items[0].overlap == "replace":
                # Older occurrences due in this same batch are among the runs replaced.
                cancel.extend(eid for eid, _state in prior(items[-1], set()))
                continue
            for p in items:  # forbid, oldest first: a skipped one blocks nobody
                found = prior(p, dropped)
                if found:
                    eid, state = found[0]
                    skips.append(
                        (p.id, f"skipped: previous run {eid} still {state} (overlap forbid)")
                    )
                    dropped.add(p.id)
        if cancel:
            cancelled = _rows("cancel_for_replace", {"ids": cancel})
            _events(
                [
                    (
                        sid,
                        tid,
                        eid,
                        "cancelled",
                        "cancelled: replaced by a newer occurrence (overlap replace)",
                    )
                    for eid, sid, tid in cancelled
                ]
            )
            dropped.update(str(r[0]) for r in cancelled)
        if skips:
            skipped = _rows(
                "mark_overlap_skipped",
                {"ids": [i for i, _ in skips], "reasons": [r[:500] for _, r in skips]},
            )
            if skipped:
                # A skipped occurrence skips its dependents too, naming the upstream.
                dependencies.propagate(execution_ids=[r[0] for r in skipped])
        return [p for p in ready if p.id not in dropped]

    def _daily_quota(self, items: list[Pending]) -> tuple[list[Pending], dict[str, list[Pending]]]:
        """Enforce executions/day per tenant with a Redis counter per tenant and UTC day.

        Only first attempts count, once (a retry is the same execution; so is an
        attempt the rate limiter handed back: counted again, it was dropped at every
        re-fire once the day's quota was reached and stayed due forever). A counter, not
        a COUNT(*) over today's rows, keeps this O(batch) at 100k executions a
        day. If Redis is unreachable the quota is not enforced for that batch:
        the firing path's availability comes before the quota's precision.
        """
        first: dict[int, list[Pending]] = defaultdict(list)
        for p in items:
            if p.attempt == 1 and p.fresh:
                first[p.tenant_id].append(p)
        if not first:
            return items, {}
        import redis

        # The quota row was read by _apply_limits for this same batch.
        caps = {tid: (row[1], row[5]) for tid, row in self._tenant_info.items()}
        day = datetime.fromtimestamp(self.db_time(), UTC).strftime("%Y%m%d")
        over: dict[str, list[Pending]] = defaultdict(list)
        try:
            if self._redis is None:
                self._redis = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2)
            client = self._redis
            for tid, group in first.items():
                slug, cap = caps.get(tid, (str(tid), 0))
                if not cap:
                    continue
                key = f"sched:quota:{tid}:{day}"
                total = int(client.incrby(key, len(group)))
                client.expire(key, 2 * 86400)
                excess = min(len(group), max(0, total - cap))
                if excess:
                    client.decrby(key, excess)
                    reason = f"skipped: tenant {slug} used its daily quota of {cap} executions"
                    over[reason].extend(group[len(group) - excess :])
        except redis.RedisError as exc:
            log.warning(
                "beat %s: daily quota not enforced this batch (Redis: %s)", self.cfg.name, exc
            )
            return items, {}
        dropped = {p.id for group in over.values() for p in group}
        return [p for p in items if p.id not in dropped], over

    def _apply_limits(self, ready: list[Pending]) -> tuple[list[Pending], dict[str, list[Pending]]]:
        """Per-tenant concurrency caps and weighted fair share across tenants.

        Within a tenant, higher priority goes first; across tenants, publishing is
        interleaved in proportion to quota weights, so when capacity is short a
        flooding tenant cannot starve a small one. Called inside _admit, after the
        admission locks: the counts read here include every other beat's admissions.
        """
        if not ready:
            return [], {}
        tenant_ids = sorted({p.tenant_id for p in ready})
        info = {r[0]: r for r in _rows("tenant_inflight", {"tenant_ids": tenant_ids})}
        self._tenant_info = info
        by_tenant: dict[int, list[Pending]] = defaultdict(list)
        prio = {"high": 0, "default": 1, "low": 2}
        for p in sorted(ready, key=lambda p: (prio.get(p.queue.split(".")[0], 1), p.due)):
            by_tenant[p.tenant_id].append(p)
        held: dict[str, list[Pending]] = defaultdict(list)
        room: dict[int, int] = {}
        for tid, items in by_tenant.items():
            _, slug, cap, _weight, inflight, _daily = info.get(tid, (tid, str(tid), 0, 1, 0, 0))
            room[tid] = max(0, cap - inflight) if cap else len(items)
            if room[tid] < len(items):
                reason = f"waiting: tenant {slug} at its concurrency limit {cap}"
                held[reason].extend(items[room[tid] :])
                by_tenant[tid] = items[: room[tid]]
        # Weighted round robin: each round a tenant sends `weight` items. Positions,
        # not re-sliced lists: slicing off the rest each round was quadratic (1.7 s
        # for one tenant's 50,000-job burst).
        order: list[Pending] = []
        weights = {tid: max(1, int(info.get(tid, (0, "", 0, 1, 0, 0))[3])) for tid in by_tenant}
        pos = {tid: 0 for tid, items in by_tenant.items() if items}
        while pos:
            for tid in list(pos):
                start, items = pos[tid], by_tenant[tid]
                order.extend(items[start : start + weights[tid]])
                pos[tid] = start + weights[tid]
                if pos[tid] >= len(items):
                    del pos[tid]
        if self.cfg.max_inflight:
            # Every tenant's in-flight work counts, not only the tenants of this batch.
            total_inflight = int(_rows("inflight_total", {})[0][0])
            budget = max(0, self.cfg.max_inflight - total_inflight)
            if budget < len(order):
                held["waiting: platform at its dispatch capacity"].extend(order[budget:])
                order = order[:budget]
        return order, held

    def _publish(self, items: list[Pending]) -> list[Pending]:
        """Publish Celery messages in pipelined chunks.

        One round trip per message, and Celery's per-call `send_task` overhead,
        cap a beat at a few thousand messages a second; a top-of-hour burst
        needs tens of thousands (DESIGN.md §7). So the message envelope is built
        once from Celery's own protocol-2 template, and each chunk goes out as
        one Redis pipeline (RabbitMQ: see _publish_amqp).
        """
        from config.celery_app import app, is_amqp

        if is_amqp(settings.CELERY_BROKER_URL):
            return self._publish_amqp(app, items)
        sent: list[Pending] = []
        chunk_size = 1000
        try:
            with (
                telemetry.tracer.start_as_current_span("beat.publish") as span,
                app.producer_or_acquire() as producer,
            ):
                span.set_attribute("scheduler.messages", len(items))
                # Every message of the batch carries this span's context, so each
                # execution's worker and target spans join the firing's trace.
                self._trace_headers = telemetry.inject({})
                for start in range(0, len(items), chunk_size):
                    chunk = items[start : start + chunk_size]
                    # The batch flushes on a clean exit; on an error nothing of the
                    # chunk counts as sent and its rows are published again later
                    # (a duplicate message is harmless: the worker's claim decides).
                    with producer.batch(max_size=chunk_size):
                        for p in chunk:
                            self._publish_one(app, producer, p)
                    sent.extend(chunk)
        except Exception:
            log.exception(
                "beat %s: publish failed after %d of %d; the rest retry next cycle",
                self.cfg.name,
                len(sent),
                len(items),
            )
        return sent

    def _publish_amqp(self, app: Any, items: list[Pending]) -> list[Pending]:
        """RabbitMQ: publisher confirms in windows — publish a chunk, then await its acks.

        Waiting for each message's confirm caps a beat near a thousand messages
        a second; not confirming at all lost messages in bursts (measured here:
        96-195 of 200k in 4 of 6 runs). A window keeps the guarantee: a chunk
        counts as sent only once the broker acknowledged all of it.
        """
        from kombu import Connection, Producer

        sent: list[Pending] = []
        chunk_size = 1000
        try:
            with telemetry.tracer.start_as_current_span("beat.publish") as span:
                span.set_attribute("scheduler.messages", len(items))
                self._trace_headers = telemetry.inject({})
                if self._amqp is None:
                    conn = Connection(settings.CELERY_BROKER_URL, connect_timeout=5)
                    channel: Any = conn.default_channel  # py-amqp channel: confirm_select, events
                    channel.confirm_select()
                    state = {"acked": 0, "nacked": 0}

                    def on_ack(tag: int, multiple: bool) -> None:
                        state["acked"] = max(state["acked"], tag)

                    def on_nack(tag: int, multiple: bool) -> None:
                        state["nacked"] = tag

                    channel.events["basic_ack"].add(on_ack)
                    channel.events["basic_nack"].add(on_nack)
                    self._amqp = (conn, Producer(channel), state, [0])
                    self._declared.clear()
                conn, producer, state, tag = self._amqp
                for start in range(0, len(items), chunk_size):
                    chunk = items[start : start + chunk_size]
                    for p in chunk:
                        self._publish_one(app, producer, p, amqp=True)
                    tag[0] += len(chunk)
                    deadline = time.monotonic() + 30
                    while state["acked"] < tag[0] and not state["nacked"]:
                        if time.monotonic() > deadline:
                            raise TimeoutError("publisher confirms did not arrive within 30 s")
                        conn.drain_events(timeout=5)
                    if state["nacked"]:
                        raise RuntimeError(
                            f"broker refused messages (nack up to tag {state['nacked']})"
                        )
                    sent.extend(chunk)
        except Exception:
            log.exception(
                "beat %s: publish failed after %d of %d; the rest retry next cycle",
                self.cfg.name,
                len(sent),
                len(items),
            )
            if self._amqp is not None:
                with contextlib.suppress(Exception):
                    self._amqp[0].release()
            self._amqp = None
        return sent

    def _publish_one(self, app: Any, producer: Any, p: Pending, *, amqp: bool = False) -> None:
        if self._template is None:
            msg = app.amqp.as_task_v2(
                str(uuid.uuid4()), TASK_NAME, args=[p.id, p.attempt], kwargs={}, ignore_result=True
            )
            self._template = (dict(msg.headers), dict(msg.properties), msg.body[2])
        headers, properties, embed = self._template
        task_id = str(uuid.uuid4())
        extra: dict[str, Any] = {}
        if amqp:
            from config.celery_app import amqp_queue

            # RabbitMQ: the duration class's priority queue, the level as message priority.
            queue, level = amqp_queue(p.queue)
            extra["priority"] = level or 0
        else:
            queue = app.amqp.queues[p.queue]
        declare = [] if queue.name in self._declared else [queue]
        # The default (anonymous) exchange routes by queue name: no binding
        # lookup per message on Redis, and the same result on RabbitMQ.
        producer.publish(
            [[p.id, p.attempt], {}, embed],
            exchange="",
            routing_key=queue.name,
            serializer="json",
            headers=headers
            | self._trace_headers
            | {"id": task_id, "root_id": task_id, "argsrepr": repr([p.id, p.attempt])},
            correlation_id=task_id,
            reply_to=properties.get("reply_to") or "",
            delivery_mode=2,
            declare=declare,
            retry=False,
            **extra,
        )
        self._declared.add(queue.name)

    # --- sweeping ------------------------------------------------------------------------------

    def sweep(self) -> None:
        numbers = sorted(self.owned)
        with transaction.atomic():
            numbers = self._fence()
            if not numbers:
                return
            stale = _rows(
                "stale_queued",
                {
                    "numbers": numbers,
                    "timeout": self.cfg.queued_republish_s,
                    "limit": self.cfg.batch,
                },
            )
            resumed = _rows("auto_resume", {"numbers": numbers})
            if resumed:
                _events(
                    [
                        (
                            sid,
                            tid,
                            None,
                            "resumed",
                            "resumed automatically: the pause's end time passed",
                        )
                        for sid, tid, _ in resumed
                    ]
                )
                _audit_auto_resumed(resumed)
            self.record_paused(numbers)
        if stale:
            again = [
                Pending(0, str(eid), attempt, queue or "default.short", 0, -1)
                for eid, attempt, queue in stale
            ]
            self.counters.republished += len(self._publish(again))
            log.info(
                "beat %s re-published %d queued executions nobody claimed",
                self.cfg.name,
                len(stale),
            )
        try:
            from dispatch.scheduler import sweeper
        except ImportError:
            return
        sweeper.sweep_expired_leases(partitions=numbers)

    def record_paused(self, numbers: list[int]) -> int:
        """Inside the sweep's fenced transaction: record the occurrences of paused
        upstreams that resuming would skip anyway, as they fall due; returns rows written.

        DESIGN.md §5 records paused occurrences as skipped. Without a record, a
        dependent waited "pending" on a paused upstream forever. Recording at due
        time (past the grace) costs what firing would: one cheap row per
        occurrence, no publish, spread over time — never a burst at resume. Only
        upstreams that a live dependent waits on are recorded (the explainer
        answers for the others from the pause's own events). The misfire policy
        still decides at resume: the latest late occurrence (run_once) or the
        latest catch_up_limit (catch_up), and those within the grace, stay
        unrecorded so resuming runs them exactly as before.
        """
        rows = _rows("paused_upstreams_due", {"numbers": numbers, "limit": self.cfg.batch})
        if not rows:
            return 0
        now = db_clock()
        plan = _FirePlan(beat=self.cfg.name, epochs=self.owned)
        for row in rows:
            sched, paused_by, paused_reason = row[:14], row[14], row[15]
            sid, tid, _part, _kind, expr, tz, _run_at, nxt = sched[:8]
            misfire, grace, catch_up = sched[8], sched[9], sched[10]
            missed = cron.plan_misfire(
                expr,
                tz,
                seed=str(sid),
                next_run_at=nxt,
                now=now,
                until=now,
                grace_s=grace,
                policy=misfire,
                catch_up_limit=catch_up,
                max_listed=PAUSED_RECORD_LIMIT,
            )
            why = f"skipped: the schedule was paused by {paused_by or 'someone'}" + (
                f' ("{paused_reason}")' if paused_reason else ""
            )
            for occ in missed.skipped:
                plan._row(
                    sched,
                    scheduled_for=occ,
                    due_at=occ,
                    trigger="cron",
                    state="skipped",
                    code="paused",
                    reason=why,
                )
            if missed.skipped_total > len(missed.skipped):
                plan.events.append(
                    (
                        sid,
                        tid,
                        None,
                        "paused_skipped",
                        f"{missed.skipped_total - len(missed.skipped)} older occurrences missed "
                        "while paused were skipped without individual records",
                    )
                )
            plan.advance_ids.append(sid)
            plan.advance_to.append(min(missed.fire) if missed.fire else missed.next_run_at)
        inserted = _rows("insert_executions", plan.insert_params()) if plan.ids else []
        if inserted:
            dependencies.propagate(execution_ids=[eid for eid, _ in inserted])
        _rows("advance_schedules", {"ids": plan.advance_ids, "next_run_ats": plan.advance_to})
        if plan.events:
            _events(plan.events)
        return len(inserted)

    def maybe_retention(self) -> None:
        """One beat (the owner of partition 0) purges expired history now and then."""
        if (
            0 not in self.owned
            or time.monotonic() - self._last_retention < settings.RETENTION_INTERVAL_S
        ):
            return
        self._last_retention = time.monotonic()
        archive = Path(settings.RETENTION_ARCHIVE_DIR) if settings.RETENTION_ARCHIVE_DIR else None
        retention.purge(now=db_clock(), archive_dir=archive)

    # --- waiting ---------------------------------------------------------------------------------

    def _wait(self) -> None:
        timeout = self.cfg.cycle_s
        if self.heap:
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
                for _ in self._listen.notifies(timeout=0):
                    pass
        except (psycopg.Error, OSError, ValueError):
            self._listen = None


def _events(items: list[tuple[Any, Any, Any, str, str]]) -> None:
    ExecutionEvent.objects.bulk_create(
        [
            ExecutionEvent(
                schedule_id=sid,
                tenant_id=tid,
                execution_id=eid,
                kind=kind,
                message=msg[:1000],
                actor="beat",
            )
            for sid, tid, eid, kind, msg in items
        ]
    )


def _audit_auto_resumed(rows: list[tuple[Any, Any, Any]]) -> None:
    """One audit row per schedule that resumed by itself, as a user's resume writes one:
    the audit log must show every pause ending, not only the ones a person ended."""
    ends = {sid: until for sid, _, until in rows}
    audits = []
    for schedule in Schedule.objects.filter(id__in=list(ends)):
        after = schedule_snapshot(schedule) | {"paused_until": None}
        before = after | {
            "paused": True,
            "paused_until": ends[schedule.id].isoformat() if ends[schedule.id] else None,
            "version": schedule.version - 1,
        }
        audits.append(
            AuditEvent(
                tenant_id=schedule.tenant_id,
                actor_kind="system",
                actor_label="beat",
                action="schedule.resume",
                object_type="schedule",
                object_id=str(schedule.id),
                before=before,
                after=after,
            )
        )
    AuditEvent.objects.bulk_create(audits)


class _FirePlan:
    """The rows one firing transaction writes, computed from the due schedules."""

    def __init__(self, *, beat: str, epochs: dict[int, int]) -> None:
        self.beat = beat
        self.epochs = epochs
        self.ids: list[uuid.UUID] = []
        self.schedule_ids: list[uuid.UUID] = []
        self.tenant_ids: list[int] = []
        self.partitions: list[int] = []
        self.scheduled_fors: list[datetime] = []
        self.due_ats: list[datetime] = []
        self.triggers: list[str] = []
        self.states: list[str] = []
        self.reason_codes: list[str] = []
        self.reasons: list[str] = []
        self.row_epochs: list[int] = []
        self.advance_ids: list[uuid.UUID] = []
        self.advance_to: list[datetime | None] = []
        self.events: list[tuple[Any, Any, Any, str, str]] = []

    def _row(
        self,
        sched: tuple[Any, ...],
        *,
        scheduled_for: datetime,
        due_at: datetime,
        trigger: str,
        state: str = "scheduled",
        code: str = "",
        reason: str = "",
    ) -> None:
        sid, tid, partition = sched[0], sched[1], sched[2]
        self.ids.append(uuid.uuid4())
        self.schedule_ids.append(sid)
        self.tenant_ids.append(tid)
        self.partitions.append(partition)
        self.scheduled_fors.append(scheduled_for)
        self.due_ats.append(due_at)
        self.triggers.append(trigger)
        self.states.append(state)
        self.reason_codes.append(code)
        self.reasons.append(reason[:500])
        self.row_epochs.append(self.epochs[partition])

    def add_schedule(
        self,
        sched: tuple[Any, ...],
        *,
        now: datetime,
        until: datetime,
    ) -> None:
        (
            sid,
            _tid,
            _part,
            kind,
            expr,
            tz,
            run_at,
            next_run_at,
            misfire,
            grace,
            catch_up,
            jitter,
            _overlap,
            created_at,
        ) = sched
        seed = str(sid)
        self.advance_ids.append(sid)
        once_late = False
        if kind == "once":
            # As on the fast path (fire_due_one_offs): due at run_at, or at creation
            # when run_at was already past; later than the grace is a misfire.
            once_late = now - max(run_at, created_at) > timedelta(seconds=grace)
            if once_late and misfire == "skip":
                self._row(
                    sched,
                    scheduled_for=run_at,
                    due_at=run_at,
                    trigger="api",
                    state="skipped",
                    code="misfire",
                    reason=f"skipped by misfire policy (skip): the one-off job was found "
                    f"{_ago(now - max(run_at, created_at))} late, beyond the {grace}s grace period",
                )
                self.advance_to.append(None)
                return
            fire, skipped, total, nxt = [run_at], [], 0, None
        else:
            plan = cron.plan_misfire(
                expr,
                tz,
                seed=seed,
                next_run_at=next_run_at,
                now=now,
                until=until,
                grace_s=grace,
                policy=misfire,
                catch_up_limit=catch_up,
            )
            fire, skipped, total, nxt = (
                plan.fire,
                plan.skipped,
                plan.skipped_total,
                plan.next_run_at,
            )
        self.advance_to.append(nxt)
        late_cutoff = now - timedelta(seconds=grace)
        for occ in skipped:
            self._row(
                sched,
                scheduled_for=occ,
                due_at=occ,
                trigger="cron",
                state="skipped",
                code="misfire",
                reason=f"skipped by misfire policy ({misfire}): the occurrence was found "
                f"{_ago(now - occ)} late, beyond the {grace}s grace period",
            )
        if total > len(skipped):
            self.events.append(
                (
                    sid,
                    sched[1],
                    None,
                    "misfire_skipped",
                    f"{total - len(skipped)} older missed occurrences were skipped "
                    f"by the misfire policy ({misfire}) without individual records",
                )
            )
        for occ in fire:
            if kind == "once":
                due = occ
                trigger = "catch_up" if once_late else "api"
            else:
                due = occ + timedelta(
                    seconds=cron.jitter_seconds(seed=seed, scheduled_for=occ, jitter_s=jitter)
                )
                trigger = "catch_up" if occ < late_cutoff else "cron"
            self._row(sched, scheduled_for=occ, due_at=due, trigger=trigger)

    def insert_params(self) -> dict[str, Any]:
        return {
            "ids": self.ids,
            "schedule_ids": self.schedule_ids,
            "tenant_ids": self.tenant_ids,
            "partitions": self.partitions,
            "scheduled_fors": self.scheduled_fors,
            "due_ats": self.due_ats,
            "triggers": self.triggers,
            "states": self.states,
            "reason_codes": self.reason_codes,
            "reasons": self.reasons,
            "epochs": self.row_epochs,
            "fired_by": self.beat,
        }


def _ago(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds >= 3600:
        return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"
