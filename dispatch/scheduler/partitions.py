"""A beat's partition leases: acquire, renew, release, the fence and the fair share.

A lease is on a *range* of logical partitions (dispatch/partitioning.py): `owned`
holds the ranges and their epochs, `covered` the logical partitions those ranges
cover (what the beat's row statements ask for, each with its range's epoch).

Every takeover bumps a partition's epoch (the fencing token). Every write
transaction of the beat first runs `fence()`, which key-share-locks the
partitions it still holds at the epochs it was granted: a beat whose epoch
moved on (it was paused past its lease) gets fewer rows back and drops
those partitions before writing anything.

Renewal is the lease keeper's (`LeaseKeeper`): one round trip renews every
lease, writes the heartbeat and reads the live beats and the database clock,
once a third of the lease has passed since the last renewal — on a thread and
connection of its own in a running beat, so that nothing the cycle does (a slow
database, a burst, a silent broker) delays it. The relation between lease and
cycle is then safe by construction: a renewal is due every TTL/3 whatever the
cycle's length, with two thirds of the lease still left (a failed one is
retried within a second, min(1, TTL/10)), and a lease the keeper could not
renew in time is dropped by the cycle (`apply_lost`) before its next write.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from django.db import connection

from dispatch.scheduler import store

log = logging.getLogger("dispatch.beat")


class _Config(Protocol):
    name: str
    partitions: int
    lease_ttl_s: float


class Partitions:
    """The ranges this beat holds, range -> epoch granted to it (`owned`), and the
    logical partitions they cover, partition -> its range's epoch (`covered`).

    `on_drop(partitions)` runs for each range given up or lost, with the logical
    partitions it covered, so the beat forgets the work it had loaded for them.
    `on_fenced()` runs once per refused renewal or fence (a stale write rejected).

    `owned` changes only on the cycle's thread; the lease keeper reads it under
    `lock` and reports what it could not renew through `_lost`, which the cycle
    applies (`apply_lost`) before each fence and each rebalance.
    """

    def __init__(
        self,
        config: _Config,
        *,
        on_drop: Callable[[range], None],
        on_fenced: Callable[[], None],
    ) -> None:
        self.cfg = config
        self.owned: dict[int, int] = {}
        self.covered: dict[int, int] = {}
        self._spans: dict[int, range] = {}  # range held -> the logical partitions it covers
        # How many ranges the installation has (the table's, learnt at start; the
        # configured count only sizes a new table).
        self.ranges = config.partitions
        self.live_beats = 1
        self.lock = threading.Lock()
        # partition -> the latest local (monotonic) time its lease surely still
        # holds: when the renewal (or the acquisition) that set it was sent, plus TTL.
        self._holds_until: dict[int, float] = {}
        self._lost: dict[int, int] = {}  # partition -> epoch the keeper could not renew
        # When this beat last lost ranges and has not had any back since (monotonic):
        # the acquisition that ends it is logged as a recovery, at the loss's level.
        self._lost_since: float | None = None
        self._on_drop = on_drop
        self._on_fenced = on_fenced

    def arrays(self) -> tuple[list[int], list[int]]:
        """The ranges held and their epochs (the lease statements' arrays)."""
        with self.lock:
            numbers = sorted(self.owned)
            return numbers, [self.owned[n] for n in numbers]

    def anchor(self) -> tuple[int, int] | None:
        """One range held and its epoch (the lowest): what an admission grant names
        (selectors.tenant_slots), or None when nothing is held."""
        with self.lock:
            if not self.owned:
                return None
            number = min(self.owned)
            return number, self.owned[number]

    def holds(self, number: int, epoch: int) -> bool:
        """Whether range `number` is still held at `epoch` (after fence(): locked so)."""
        with self.lock:
            return self.owned.get(number) == epoch

    def covering(self, numbers: list[int] | set[int]) -> list[int]:
        """The logical partitions the held ranges `numbers` cover, in order."""
        with self.lock:
            return [p for n in sorted(numbers) for p in self._spans.get(n, ())]

    def ensure(self) -> None:
        """Create the installation's ranges if there are none; learn how many there are."""
        self.ranges = store.ensure_partitions(count=self.cfg.partitions)
        if self.ranges != self.cfg.partitions:
            log.warning(
                "beat %s: SCHEDULER_PARTITIONS=%d, but this installation's partitions are "
                "leased in %d ranges: using those (`manage.py partition_ranges N` re-cuts them)",
                self.cfg.name,
                self.cfg.partitions,
                self.ranges,
            )

    def _hold(self, grant: store.Grant) -> None:
        # Under self.lock.
        self.owned[grant.number] = grant.epoch
        self._spans[grant.number] = span = range(grant.lo, grant.hi)
        for p in span:
            self.covered[p] = grant.epoch

    # --- what the lease keeper reports (any thread) -------------------------------------

    def renewed(
        self, numbers: list[int], epochs: list[int], renewed: set[int], sent: float
    ) -> None:
        """The outcome of a renewal sent at monotonic time `sent` for these leases."""
        with self.lock:
            for number, epoch in zip(numbers, epochs, strict=True):
                if self.owned.get(number) != epoch:
                    continue  # released or re-acquired meanwhile: not ours to judge
                if number in renewed:
                    self._holds_until[number] = sent + self.cfg.lease_ttl_s
                else:
                    self._lost[number] = epoch

    # --- the cycle's thread ---------------------------------------------------------------

    def apply_lost(self) -> int:
        """Drop what the keeper could not renew, and any lease whose renewal is overdue
        by the local clock (the keeper is stuck on a dead link): partitions dropped."""
        now = time.monotonic()
        with self.lock:
            refused = {n for n, e in self._lost.items() if self.owned.get(n) == e}
            self._lost.clear()
            lapsed = {
                n for n in self.owned if n not in refused and self._holds_until.get(n, now) < now
            }
        if refused or lapsed:
            # The renewal is the first write a beat makes after a pause; it being
            # refused is the fence working, and is counted as such.
            self._on_fenced()
            self._lose(refused, why="lease could not be renewed (expired or taken over)")
            self._lose(lapsed, why="lease not renewed in time (the database did not answer)")
        return len(refused) + len(lapsed)

    def rebalance(self, live: list[str], *, take: bool = True) -> int:
        """Hand over what exceeds our fair share, or take what is missing (unless `take`
        is False: a beat standing by after a publish stall, handover.py); returns the change."""
        share = self.fair_share(live) if take else 0
        if len(self.owned) > share:
            # Rebalance: a beat joined; hand over what exceeds our fair share.
            extra = sorted(self.owned)[share:]
            store.release_partitions(
                numbers=extra, epochs=[self.owned[n] for n in extra], owner=self.cfg.name
            )
            for n in extra:
                self.drop(n)
            log.info(
                "beat %s released %s to rebalance (%d live beats)",
                self.cfg.name,
                extra,
                self.live_beats,
            )
            return len(extra)
        if len(self.owned) < share:
            sent = time.monotonic()
            got = store.acquire_partitions(
                want=share - len(self.owned), owner=self.cfg.name, ttl=self.cfg.lease_ttl_s
            )
            with self.lock:
                for grant in got:
                    self._hold(grant)
                    self._holds_until[grant.number] = sent + self.cfg.lease_ttl_s
            if got:
                ranges = sorted((g.number, g.epoch, f"{g.lo}-{g.hi - 1}") for g in got)
                if self._lost_since is not None:
                    # The operator saw the loss as a warning: the recovery is said as loudly.
                    log.warning(
                        "beat %s: recovered — acquired partition ranges %s again, %.1f s "
                        "after losing ranges; it fires them from now on",
                        self.cfg.name,
                        [number for number, _, _ in ranges],
                        time.monotonic() - self._lost_since,
                    )
                    self._lost_since = None
                else:
                    log.info("beat %s acquired partition ranges %s", self.cfg.name, ranges)
            return len(got)
        return 0

    def fair_share(self, live: list[str]) -> int:
        """This beat's exact share: P // N each, plus one for the first P % N beats by name.

        With a rounded-up share for everyone, N beats holding ceil(P/N) each can
        already cover every partition, so a newcomer would get nothing until
        some lease happened to lapse; exact targets make the others hand over.
        """
        names = sorted(set(live) | {self.cfg.name})
        self.live_beats = len(names)
        base, extra = divmod(self.ranges, len(names))
        return base + (1 if names.index(self.cfg.name) < extra else 0)

    def release_all(self) -> list[int]:
        """Give every partition up (shutdown, or a hand-over after a publish stall) so
        another beat takes them at once; the beat forgets what it had loaded for them."""
        numbers, epochs = self.arrays()
        if numbers:
            store.release_partitions(numbers=numbers, epochs=epochs, owner=self.cfg.name)
        for number in numbers:
            self.drop(number)
        return numbers

    def fence(self) -> list[int]:
        """Inside a transaction: key-share-lock our ranges at our epochs; drop any we lost.
        Returns the logical partitions still ours (what the transaction may write)."""
        self.apply_lost()
        numbers, epochs = self.arrays()
        held = store.fence_partitions(numbers=numbers, epochs=epochs, owner=self.cfg.name)
        lost = set(numbers) - held
        if lost:
            self._on_fenced()
            self._lose(lost, why="epoch moved on or lease expired")
        return self.covering(held)

    def drop(self, number: int) -> None:
        with self.lock:
            self.owned.pop(number, None)
            self._holds_until.pop(number, None)
            span = self._spans.pop(number, range(0))
            for p in span:
                self.covered.pop(p, None)
        self._on_drop(span)

    def _lose(self, numbers: set[int], *, why: str) -> None:
        """One line for every range lost at once (a recovery is logged when ranges come
        back: rebalance)."""
        if not numbers:
            return
        lost = sorted(numbers)
        log.warning(
            "beat %s: fencing — partition ranges %s (epochs %s) lost: %s; their writes are "
            "rejected until this beat acquires ranges again",
            self.cfg.name,
            lost,
            [self.owned.get(number, -1) for number in lost],
            why,
        )
        for number in lost:
            self.drop(number)
        if self._lost_since is None:
            self._lost_since = time.monotonic()


class LeaseKeeper:
    """Renews the leases, heartbeats, and learns the live beats and the database clock:
    one statement (beat_keep) once a third of the lease has passed since the last one.

    `start()` runs it on a daemon thread with its own database connection (Django's
    connections are per thread); without it (a beat driven in-process by tests and
    benches), `keep()` renews inline when a renewal is due — the cycle and the
    publisher call it. Either way there is this one mechanism.

    Locks: the renewal is an UPDATE of non-key columns (FOR NO KEY UPDATE), and the
    fence takes FOR KEY SHARE: the two do not conflict, so a renewal never waits for
    a firing, admission or sweep transaction of the same beat (with FOR SHARE it
    did, and a long transaction under database latency cost the lease). Takeovers
    take FOR UPDATE and still wait for, or skip, a fenced partition. The renewal
    runs in autocommit and holds its row locks for itself alone.

    `heartbeat()` returns the counters to report as (fired, published, rejected)
    totals; the deltas since the last successful report go into the statement.
    `failing()` says whether the beat's publishes are failing now: a beat whose broker
    is dead is no taker for another beat's hand-over (handover.py).
    """

    def __init__(
        self,
        partitions: Partitions,
        *,
        heartbeat: Callable[[], tuple[int, int, int]],
        failing: Callable[[], bool] = lambda: False,
        session: Callable[[], None] = lambda: None,
    ) -> None:
        self.partitions = partitions
        self.cfg = partitions.cfg
        self.interval_s = self.cfg.lease_ttl_s / 3
        self.live: list[str] = []
        self.clock_offset = 0.0  # database clock minus local clock, seconds
        self.renewed_at = float("-inf")  # monotonic, when the last successful one was sent
        self._heartbeat = heartbeat
        self._failing = failing
        self._session = session
        self._reported = (0, 0, 0)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._tick_lock = threading.Lock()

    @property
    def threaded(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def due(self) -> bool:
        return time.monotonic() - self.renewed_at >= self.interval_s

    def keep(self) -> None:
        """Renew now if a renewal is due and no keeper thread does it."""
        if not self.threaded and self.due():
            self.tick()

    def tick(self) -> store.Kept:
        """One renewal + heartbeat, on the calling thread's connection."""
        with self._tick_lock:
            numbers, epochs = self.partitions.arrays()
            totals = self._heartbeat()
            fired, published, rejected = (
                t - r for t, r in zip(totals, self._reported, strict=True)
            )
            sent = time.monotonic()
            before = time.time()
            kept = store.keep_leases(
                numbers=numbers,
                epochs=epochs,
                name=self.cfg.name,
                partitions=f"[{', '.join(map(str, numbers))}]",
                rejected=rejected,
                fired=fired,
                published=published,
                failing=self._failing(),
                ttl=self.cfg.lease_ttl_s,
            )
            after = time.time()
            self._reported = totals
            self.partitions.renewed(numbers, epochs, kept.renewed, sent)
            self.live = kept.live
            # The ranges may have been re-cut (manage.py partition_ranges): the fair
            # share follows the table.
            self.partitions.ranges = kept.ranges or self.partitions.ranges
            # Due-ness is judged on the database clock (failure contract C5:
            # docs/explanation/failure-contract.md); the local
            # clock only measures intervals, so a skewed host neither fires early nor late.
            self.clock_offset = kept.now.timestamp() - (before + after) / 2
            self.renewed_at = sent
            return kept

    # --- the thread ---------------------------------------------------------------------

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, name=f"lease-keeper-{self.cfg.name}", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self._thread = None

    def _run(self) -> None:
        retry_s = max(0.1, min(1.0, self.cfg.lease_ttl_s / 10))
        configured = False
        try:
            while True:
                wait = max(0.0, self.renewed_at + self.interval_s - time.monotonic())
                if self._stop.wait(wait):
                    return
                try:
                    if not configured:
                        self._session()
                        configured = True
                    self.tick()
                except Exception as exc:
                    # A lease not renewed in time is dropped by the cycle (apply_lost);
                    # until then the keeper retries on a fresh connection.
                    log.warning("beat %s: lease renewal failed (%s); retrying", self.cfg.name, exc)
                    configured = False
                    connection.close()
                    if self._stop.wait(retry_s):
                        return
        finally:
            connection.close()

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"<LeaseKeeper {self.cfg.name} threaded={self.threaded}>"
