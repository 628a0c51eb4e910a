"""Admission at due time: the overlap policy, the tenant and platform caps, the
weighted round robin across tenants and the daily quota, in one fenced transaction.

Admission is atomic across beats. A capped tenant's free slots are its cap less
its in-flight executions (dispatch.states.IN_FLIGHT_STATES) and the slots other
beats hold as grants (dispatch.models.AdmissionGrant), read after its quota row
was locked. A beat takes the slots for everything due in its batch as grants, in
one short transaction under the quota rows, then admits the batch chunk by chunk in
fenced transactions that hold no quota row: a chunk's rows become `queued` and
their slots leave the grant in the same commit, so every reader sees either the
grant or the rows; what is left is released after the batch. With
DISPATCH_MAX_INFLIGHT (one platform-wide advisory lock) the admitting transaction
takes the locks and counts itself, as it must hold them until it commits.

Slots are the queued/running rows themselves plus grants that live only while the
range they name is held at its epoch: nothing leaks past a takeover when a beat
dies (see the tenant_slots and admission_grants_* statements in beat.sql).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

# At import, not in the first admission: importing redis took 0.46 s of the first
# chunk at a burst's boundary (py-spy of `bench cronburst`), delaying every publish.
import redis
from django.conf import settings
from django.db import DatabaseError, transaction

from core import faults
from dispatch import concurrency_keys, selectors
from dispatch.concurrency_keys import OnConflict
from dispatch.queues import PRIORITIES, split_queue_name
from dispatch.scheduler import dependencies, store
from dispatch.scheduler.firing import Pending
from dispatch.scheduler.partitions import Partitions
from dispatch.states import EventData, EventKind, ExecutionState, Overlap, ReasonCode, Trigger

log = logging.getLogger("dispatch.beat")

# Overlap policies decided at due time (`allow` lets every occurrence run).
_DECIDED_OVERLAP = (Overlap.FORBID, Overlap.REPLACE)
# The timeline event of each reason an execution is held back at admission.
_HELD_EVENT = {
    ReasonCode.HELD_CONCURRENCY: EventKind.HELD_CONCURRENCY,
    ReasonCode.HELD_CAPACITY: EventKind.HELD_CAPACITY,
}
# How a key's holder is named in a reason ("key customer-42 already running ...").
_HOLDER_WORD = {
    ExecutionState.QUEUED: "queued",
    ExecutionState.RUNNING: "running",
    ExecutionState.RETRY_SCHEDULED: "retrying",
    ExecutionState.SCHEDULED: "admitted",  # a candidate of this same batch
}
_PRIORITY_RANK = {priority: rank for rank, priority in enumerate(PRIORITIES)}


class _Config(Protocol):
    name: str
    max_inflight: int  # 0: no global cap
    lease_ttl_s: float


# After the quota's Redis timed out, the batches of the next seconds skip it without
# trying: each try would cost its socket timeout inside the admission transaction.
QUOTA_REDIS_BACKOFF_S = 5.0


@dataclass(frozen=True)
class _Grant:
    """What a beat took before admitting a batch: the range its grants name, the
    tenants' limits read under the quota rows, and each capped tenant's slots left."""

    anchor: tuple[int, int]
    info: dict[int, selectors.TenantSlots]
    slots: dict[int, int]


class Admission:
    """Decides, at their due time, which of a batch of due executions are published."""

    def __init__(self, config: _Config) -> None:
        self.cfg = config
        self._redis: Any = None
        self._redis_down_until = 0.0
        # The quota's Redis calls run inside the admission transaction, which holds the
        # tenants' quota rows and whose session is ended by PostgreSQL when idle for
        # half a lease (the beat's session limits): a silent Redis must time out well
        # before that, or every batch would be rolled back and none ever published.
        self._redis_timeout_s = min(2.0, max(0.2, config.lease_ttl_s / 6))
        self._tenant_info: dict[int, selectors.TenantSlots] = {}
        # The last batch's executions held back by a cap: still due, tried again.
        self.held: list[Pending] = []
        # The grant of the batch being admitted (reserve), and whether this beat may hold
        # grant rows (taken and not yet released).
        self._grant: _Grant | None = None
        self._granted = False

    def reserve(self, due: list[Pending], partitions: Partitions) -> None:
        """Before a batch of due executions is admitted chunk by chunk: take the capped
        tenants' slots for all of it at once (_take_grants), so the in-flight count under
        the quota rows is read once per batch, not once per chunk. The chunks' admissions
        spend the grant; release() gives up the rest."""
        self._grant = self._take_grants(due, partitions)
        faults.crash_at("after_grant")

    def release(self) -> None:
        """After the batch: give up the slots its admissions did not use (withdrawn,
        skipped, held or left for the next cycle). If this fails (the database away),
        the next grant taken replaces them, and they stop counting at a takeover."""
        self._grant = None
        if not self._granted:
            return
        try:
            store.clear_admission_grants(beat=self.cfg.name)
        except DatabaseError as exc:
            # Called on the way out of a failed batch too: its own error is the one to
            # raise. The grant rows stay until the next grant replaces them.
            log.warning("beat %s: admission grants not released (%s)", self.cfg.name, exc)
            return
        self._granted = False

    def admit(self, ready: list[Pending], partitions: Partitions, *, now: float) -> list[Pending]:
        """Decide overlap and admission in one fenced transaction; returns the
        executions now queued, to be published (`held`: those a cap held back).
        `now`: the database clock, epoch s. A row withdrawn or changed since it was
        staged is neither: admit_executions updates only rows still as loaded."""
        self.held = []
        grant = self._grant
        with transaction.atomic():
            numbers = partitions.fence()
            if grant is not None and not partitions.holds(*grant.anchor):
                # Its range moved on: the slots count for nobody now, nor are they ours.
                grant = self._grant = None
            owned = set(numbers)
            ready = [p for p in ready if p.partition in owned]
            if not ready:
                return []
            tenant_ids = sorted({p.tenant_id for p in ready})
            if grant is not None:
                info, room = grant.info, dict(grant.slots)
            else:
                # Locks first (quota rows, then execution rows): the manual trigger takes
                # the same order, so the two cannot deadlock.
                if self.cfg.max_inflight:
                    store.lock_admission_global()
                store.lock_admission_tenants(tenant_ids=tenant_ids)
                info = self._slots(tenant_ids)
                room = {tid: row.free for tid, row in info.items() if row.max_concurrent}
            self._tenant_info = info
            ready = self._decide_overlap(ready)
            ready, key_held = self._decide_keys(ready)
            to_send, held = self._apply_limits(ready, info, room)
            to_send, over_quota = self._daily_quota(to_send, now=now)
            admitted: set[str] = set()
            if to_send:
                admitted = store.admit_executions(
                    ids=[p.id for p in to_send],
                    attempts=[p.attempt for p in to_send],
                    partitions=[p.partition for p in to_send],
                    queues=[p.queue for p in to_send],
                    # A first attempt takes its schedule's key ("": none — a re-run's row
                    # drops the key of its earlier chain); a retry keeps the one it holds.
                    ckeys=[
                        (p.ckey[0] if p.ckey else "") if p.chain_start else None for p in to_send
                    ],
                    numbers=numbers,
                    occurred=[p.scheduled_for for p in to_send],
                )
            if grant is not None and admitted:
                self._spend(grant, [p for p in to_send if p.id in admitted])
            for reason, items in over_quota.items():
                rows = store.mark_quota_exhausted(
                    ids=[p.id for p in items],
                    reason=reason,
                    occurred=[p.scheduled_for for p in items],
                )
                store.record_events(
                    store.Event(r.schedule_id, r.tenant_id, r.id, EventKind.QUOTA_EXHAUSTED, reason)
                    for r in rows
                )
                dependencies.propagate(execution_ids=[r.id for r in rows])
            for (code, reason), items in held.items():
                rows = store.mark_held(
                    ids=[p.id for p in items],
                    code=str(code),
                    reason=reason,
                    occurred=[p.scheduled_for for p in items],
                )
                store.record_events(
                    store.Event(r.schedule_id, r.tenant_id, r.id, _HELD_EVENT[code], reason)
                    for r in rows
                )
            if key_held:
                rows = store.mark_held_each(
                    ids=[p.id for p, _ in key_held],
                    reasons=[r for _, r in key_held],
                    code=str(ReasonCode.HELD_KEY),
                    occurred=[p.scheduled_for for p, _ in key_held],
                )
                why = {p.id: r for p, r in key_held}
                store.record_events(
                    store.Event(
                        r.schedule_id, r.tenant_id, r.id, EventKind.HELD_KEY, why[str(r.id)]
                    )
                    for r in rows
                )
        faults.crash_at("after_admit")
        self.held = [p for items in held.values() for p in items] + [p for p, _ in key_held]
        return [p for p in to_send if p.id in admitted]

    def _take_grants(self, ready: list[Pending], partitions: Partitions) -> _Grant | None:
        """The capped tenants' slots for a batch, taken in a short transaction of their
        own under the quota rows (selectors.tenant_slots says how long they count). The
        chunks' admissions then hold no quota row while they write, so two beats
        admitting one tenant's burst work side by side instead of in turns.

        None (the admission locks the quota rows itself): when this is the only live
        beat (nobody to share the boundary with, and the cycle keeps its round trips);
        with DISPATCH_MAX_INFLIGHT, whose platform-wide count must stay locked until
        the admission commits; or when the beat holds no range to name. Either way is
        exact, and beats choosing differently stay exact: both read grants under the
        quota rows' locks."""
        anchor = partitions.anchor()
        if partitions.live_beats < 2 or self.cfg.max_inflight or anchor is None or not ready:
            return None
        wanted: dict[int, int] = defaultdict(int)
        for p in ready:
            wanted[p.tenant_id] += 1
        tenant_ids = sorted(wanted)
        with transaction.atomic():
            store.lock_admission_tenants(tenant_ids=tenant_ids)
            info = self._slots(tenant_ids)
            slots = {
                tid: min(wanted[tid], row.free) for tid, row in info.items() if row.max_concurrent
            }
            if slots:
                store.take_admission_grants(
                    beat=self.cfg.name, range_number=anchor[0], epoch=anchor[1], slots=slots
                )
                self._granted = True
        return _Grant(anchor, info, slots)

    def _spend(self, grant: _Grant, admitted: list[Pending]) -> None:
        """The grant's slots the admitted rows now hold, given up in their commit (any
        reader sees either the slots or the queued rows)."""
        used: dict[int, int] = defaultdict(int)
        for p in admitted:
            if p.tenant_id in grant.slots:
                used[p.tenant_id] += 1
        if not used:
            return
        store.use_admission_grants(beat=self.cfg.name, used=used)

        def spent() -> None:
            for tid, n in used.items():
                grant.slots[tid] -= n

        transaction.on_commit(spent)

    def _slots(self, tenant_ids: list[int]) -> dict[int, selectors.TenantSlots]:
        """The tenants' limits and taken slots (this beat's own grants left out: they
        are replaced or given up by the transaction reading them)."""
        return {r.id: r for r in selectors.tenant_slots(tenant_ids=tenant_ids, beat=self.cfg.name)}

    def _decide_overlap(self, ready: list[Pending]) -> list[Pending]:
        """The overlap policy, at the occurrence's due time (inside the admission transaction).

        A run of the schedule is "active" for a new occurrence when it is queued,
        running or retrying, or is itself due but waiting (held at a cap) for an
        earlier occurrence; a later occurrence planned ahead is not. `forbid` skips
        the new occurrence while one is active; `replace` cancels them, the newest
        due occurrence winning. Catch-up runs of a misfire replay do not count
        against each other (the policy asked for that many). Retries continue a run
        that was let through and are not re-decided; a re-run starts a new chain
        (`Pending.chain_start`) and is decided like a manual run. Only the partition's owner
        publishes a schedule's executions, so no other beat decides concurrently.
        """
        firsts: dict[str, list[Pending]] = defaultdict(list)
        for p in ready:
            if p.chain_start and p.overlap in _DECIDED_OVERLAP and p.schedule_id:
                firsts[p.schedule_id].append(p)
        if not firsts:
            return ready
        active: dict[str, list[tuple[str, str, datetime | None, bool, str]]] = defaultdict(list)
        for sid, items in firsts.items():
            # The candidates themselves: scheduled and due (a sibling can block another).
            active[sid] = [
                (p.id, ExecutionState.SCHEDULED, p.scheduled_for, True, p.trigger) for p in items
            ]
        for run in store.active_executions(
            ids=sorted(firsts), candidates=[p.id for v in firsts.values() for p in v]
        ):
            active[str(run.schedule_id)].append(
                (str(run.id), run.state, run.scheduled_for, run.due, run.trigger)
            )

        def prior(p: Pending, gone: set[str]) -> list[tuple[str, str]]:
            return [
                (eid, state)
                for eid, state, sf, due, trigger in active[p.schedule_id]
                if eid != p.id
                and eid not in gone
                and (
                    state != ExecutionState.SCHEDULED
                    or (
                        due
                        and sf is not None
                        and p.scheduled_for is not None
                        and sf < p.scheduled_for
                    )
                )
                and not (p.trigger == trigger == Trigger.CATCH_UP)
            ]

        dropped: set[str] = set()
        skips: list[tuple[str, str]] = []
        # Each run to cancel, with the occurrence that replaces it.
        cancel: dict[str, str] = {}
        for items in firsts.values():
            items.sort(key=lambda p: (p.scheduled_for or datetime.min.replace(tzinfo=UTC), p.id))
            if items[0].overlap == Overlap.REPLACE:
                # Older occurrences due in this same batch are among the runs replaced.
                cancel.update((eid, items[-1].id) for eid, _state in prior(items[-1], set()))
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
            reason = "cancelled: replaced by a newer occurrence (overlap replace)"
            cancelled = store.cancel_for_replace(
                ids=list(cancel), reasons=[reason] * len(cancel), code=str(ReasonCode.REPLACED)
            )
            store.record_events(
                store.Event(
                    r.schedule_id,
                    r.tenant_id,
                    r.id,
                    EventKind.CANCELLED,
                    "cancelled: replaced by a newer occurrence (overlap replace)",
                    {EventData.RELATED_EXECUTION_ID: cancel[str(r.id)]},
                )
                for r in cancelled
            )
            dropped.update(str(r.id) for r in cancelled)
        if skips:
            skipped = store.mark_admission_skipped(
                ids=[i for i, _ in skips],
                reasons=[r[:500] for _, r in skips],
                code=str(ReasonCode.OVERLAP_FORBID),
            )
            if skipped:
                # A skipped occurrence skips its dependents too, naming the upstream.
                dependencies.propagate(execution_ids=skipped)
        return [p for p in ready if p.id not in dropped]

    def _decide_keys(self, ready: list[Pending]) -> tuple[list[Pending], list[tuple[Pending, str]]]:
        """Keyed concurrency (dispatch/concurrency_keys.py), after the overlap policy and
        before the caps: at most `limit` executions of one (tenant, key) hold it at once,
        across every schedule and job of the tenant and every beat.

        Only the first attempt of a chain is decided (a retry goes on holding the key it
        was admitted with). Each (tenant, key) of the batch is locked (advisory, sorted,
        after any quota rows the admission locks) and its holders read after the lock in one indexed query:
        a batch without a key costs nothing. Candidates are decided oldest due first,
        each by its own `limit` and `on_conflict`: `queue` holds it (still due, tried
        again at the next batch, like a cap's hold), `skip` records it skipped, `replace`
        cancels the oldest holders (token bumped: a running worker stops at its next
        heartbeat and its late completion is rejected) and admits it. Returns the
        executions still to admit and those held, with their reasons.
        """
        keyed = [(p, p.ckey) for p in ready if p.ckey is not None and p.chain_start]
        if not keyed:
            return ready, []
        pairs = sorted({(p.tenant_id, ckey[0]) for p, ckey in keyed})
        store.lock_admission_keys(
            locks=sorted({concurrency_keys.lock_id(tid, key) for tid, key in pairs})
        )
        holders: dict[tuple[int, str], list[tuple[str, str]]] = defaultdict(list)
        for h in store.key_holders(
            tenant_ids=[tid for tid, _ in pairs],
            keys=[key for _, key in pairs],
            candidates=[p.id for p, _ in keyed],
        ):
            holders[h.tenant_id, h.concurrency_key].append((str(h.id), h.state))
        dropped: set[str] = set()
        held: list[tuple[Pending, str]] = []
        skips: list[tuple[Pending, str, str]] = []
        cancel: dict[str, tuple[str, str]] = {}  # holder -> (replacing execution, key)
        for p, (key, limit, on_conflict) in sorted(
            keyed, key=lambda item: (item[0].due, item[0].id)
        ):
            current = holders[p.tenant_id, key]
            if len(current) < limit:
                current.append((p.id, ExecutionState.SCHEDULED))
                continue
            hid, hstate = current[0]
            blocked = (
                f"key {key} already {_HOLDER_WORD.get(ExecutionState(hstate), hstate)} "
                f"execution {hid} (limit {limit}, on_conflict {on_conflict})"
            )
            if on_conflict == OnConflict.REPLACE:
                while len(current) >= limit:
                    old, _state = current.pop(0)
                    cancel[old] = (p.id, key)
                current.append((p.id, ExecutionState.SCHEDULED))
            elif on_conflict == OnConflict.SKIP:
                skips.append((p, f"skipped: {blocked}", hid))
            else:
                held.append((p, f"held: {blocked}"))
            if on_conflict != OnConflict.REPLACE:
                dropped.add(p.id)
        if cancel:
            cancelled = store.cancel_for_replace(
                ids=list(cancel),
                reasons=[
                    f"cancelled: replaced by execution {new} (key {key}, on_conflict replace)"[:500]
                    for new, key in cancel.values()
                ],
                code=str(ReasonCode.KEY_REPLACED),
            )
            store.record_events(
                store.Event(
                    r.schedule_id,
                    r.tenant_id,
                    r.id,
                    EventKind.CANCELLED,
                    f"replaced: key {cancel[str(r.id)][1]} taken over by execution "
                    f"{cancel[str(r.id)][0]} (on_conflict replace)",
                    {EventData.RELATED_EXECUTION_ID: cancel[str(r.id)][0]},
                )
                for r in cancelled
            )
            # A candidate of this batch replaced by a later one is not admitted either.
            dropped.update(str(r.id) for r in cancelled)
        if skips:
            skipped = store.mark_admission_skipped(
                ids=[p.id for p, _, _ in skips],
                reasons=[r[:500] for _, r, _ in skips],
                code=str(ReasonCode.KEY_SKIPPED),
            )
            done = {str(i) for i in skipped}
            store.record_events(
                store.Event(
                    p.schedule_id,
                    p.tenant_id,
                    p.id,
                    EventKind.KEY_SKIPPED,
                    reason,
                    {EventData.RELATED_EXECUTION_ID: hid},
                )
                for p, reason, hid in skips
                if p.id in done
            )
            if skipped:
                dependencies.propagate(execution_ids=skipped)
        return [p for p in ready if p.id not in dropped], held

    def _daily_quota(
        self, items: list[Pending], *, now: float
    ) -> tuple[list[Pending], dict[str, list[Pending]]]:
        """Enforce executions/day per tenant with a Redis counter per tenant and UTC day.

        Only first attempts of a chain count, once — a re-run is a run of its own, like a
        manual trigger (a retry is the same execution; so is an
        attempt the rate limiter handed back: counted again, it was dropped at every
        re-fire once the day's quota was reached and stayed due forever). A counter, not
        a COUNT(*) over today's rows, keeps this O(batch) at 100k executions a
        day. If Redis is unreachable the quota is not enforced for that batch
        (and, without a retry, for the batches of the next QUOTA_REDIS_BACKOFF_S):
        the firing path's availability comes before the quota's precision.
        """
        first: dict[int, list[Pending]] = defaultdict(list)
        for p in items:
            if p.chain_start and p.fresh:
                first[p.tenant_id].append(p)
        if not first:
            return items, {}
        # The quota row was read by _apply_limits for this same batch.
        caps = {
            tid: (row.slug, row.max_executions_per_day) for tid, row in self._tenant_info.items()
        }
        day = datetime.fromtimestamp(now, UTC).strftime("%Y%m%d")
        over: dict[str, list[Pending]] = defaultdict(list)
        if time.monotonic() < self._redis_down_until:
            log.warning(
                "beat %s: daily quota not enforced this batch (Redis failed moments ago)",
                self.cfg.name,
            )
            return items, {}
        try:
            if self._redis is None:
                self._redis = redis.Redis.from_url(
                    settings.REDIS_URL,
                    socket_timeout=self._redis_timeout_s,
                    socket_connect_timeout=self._redis_timeout_s,
                )
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
            if isinstance(exc, redis.TimeoutError):  # a refused connection costs nothing
                self._redis_down_until = time.monotonic() + QUOTA_REDIS_BACKOFF_S
            log.warning(
                "beat %s: daily quota not enforced this batch (Redis: %s)", self.cfg.name, exc
            )
            return items, {}
        dropped = {p.id for group in over.values() for p in group}
        return [p for p in items if p.id not in dropped], over

    def _apply_limits(
        self,
        ready: list[Pending],
        info: dict[int, selectors.TenantSlots],
        free: dict[int, int],
    ) -> tuple[list[Pending], dict[tuple[ReasonCode, str], list[Pending]]]:
        """Per-tenant concurrency caps and weighted fair share across tenants.

        Within a tenant, higher priority goes first; across tenants, publishing is
        interleaved in proportion to quota weights, so when capacity is short a
        flooding tenant cannot starve a small one. `free`: each capped tenant's slots
        for this chunk (its grant, or what the locked count left: see _room).
        """
        if not ready:
            return [], {}
        by_tenant: dict[int, list[Pending]] = defaultdict(list)
        for p in sorted(
            ready, key=lambda p: (_PRIORITY_RANK.get(split_queue_name(p.queue)[0], 1), p.due)
        ):
            by_tenant[p.tenant_id].append(p)
        held: dict[tuple[ReasonCode, str], list[Pending]] = defaultdict(list)
        room: dict[int, int] = {}
        for tid, items in by_tenant.items():
            limits = info.get(tid) or selectors.TenantSlots(tid, str(tid), 0, 1, 0, 0, 0)
            cap = limits.max_concurrent
            room[tid] = free.get(tid, 0) if cap else len(items)
            if room[tid] < len(items):
                reason = f"waiting: tenant {limits.slug} at its concurrency limit {cap}"
                held[ReasonCode.HELD_CONCURRENCY, reason].extend(items[room[tid] :])
                by_tenant[tid] = items[: room[tid]]
        # Weighted round robin: each round a tenant sends `weight` items. Positions,
        # not re-sliced lists: slicing off the rest each round was quadratic (1.7 s
        # for one tenant's 50,000-job burst).
        order: list[Pending] = []
        weights = {tid: max(1, int(info[tid].weight if tid in info else 1)) for tid in by_tenant}
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
            budget = max(0, self.cfg.max_inflight - store.inflight_total())
            if budget < len(order):
                held[ReasonCode.HELD_CAPACITY, "waiting: platform at its dispatch capacity"].extend(
                    order[budget:]
                )
                order = order[:budget]
        return order, held
