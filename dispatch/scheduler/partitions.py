"""A beat's partition leases: acquire, renew, release, the fence and the fair share.

Every takeover bumps a partition's epoch (the fencing token). Every write
transaction of the beat first runs `fence()`, which share-locks the
partitions it still holds at the epochs it was granted: a beat whose epoch
moved on (it was paused past its lease) gets fewer rows back and drops
those partitions before writing anything.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from dispatch.scheduler import store

log = logging.getLogger("dispatch.beat")


class _Config(Protocol):
    name: str
    partitions: int
    lease_ttl_s: float


class Partitions:
    """The partitions this beat holds, partition -> epoch granted to it.

    `on_drop(number)` runs for each partition given up or lost, so the beat
    forgets the work it had loaded for it. `on_fenced()` runs once per
    refused renewal or fence (a stale write rejected).
    """

    def __init__(
        self,
        config: _Config,
        *,
        on_drop: Callable[[int], None],
        on_fenced: Callable[[], None],
    ) -> None:
        self.cfg = config
        self.owned: dict[int, int] = {}
        self.live_beats = 1
        self._on_drop = on_drop
        self._on_fenced = on_fenced

    def arrays(self) -> tuple[list[int], list[int]]:
        numbers = sorted(self.owned)
        return numbers, [self.owned[n] for n in numbers]

    def renew(self) -> int:
        """Extend our leases; returns how many were lost (expired or taken over)."""
        if not self.owned:
            return 0
        numbers, epochs = self.arrays()
        renewed = store.renew_partitions(
            numbers=numbers, epochs=epochs, owner=self.cfg.name, ttl=self.cfg.lease_ttl_s
        )
        lost = set(numbers) - renewed
        if lost:
            # The renewal is the first write a beat makes after a pause; it being
            # refused is the fence working, and is counted as such.
            self._on_fenced()
            self._lose(lost, why="lease could not be renewed (expired or taken over)")
        return len(lost)

    def rebalance(self, live: list[str]) -> int:
        """Hand over what exceeds our fair share, or take what is missing; returns the change."""
        share = self.fair_share(live)
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
            got = store.acquire_partitions(
                count=self.cfg.partitions,
                want=share - len(self.owned),
                owner=self.cfg.name,
                ttl=self.cfg.lease_ttl_s,
            )
            for number, epoch in got:
                self.owned[number] = epoch
            if got:
                log.info(
                    "beat %s acquired partitions %s",
                    self.cfg.name,
                    sorted((n, e) for n, e in got),
                )
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
        base, extra = divmod(self.cfg.partitions, len(names))
        return base + (1 if names.index(self.cfg.name) < extra else 0)

    def release_all(self) -> list[int]:
        """Give every partition up (shutdown) so another beat takes them at once."""
        numbers, epochs = self.arrays()
        if numbers:
            store.release_partitions(numbers=numbers, epochs=epochs, owner=self.cfg.name)
        self.owned.clear()
        return numbers

    def fence(self) -> list[int]:
        """Inside a transaction: share-lock our partitions at our epochs; drop any we lost."""
        numbers, epochs = self.arrays()
        held = store.fence_partitions(numbers=numbers, epochs=epochs, owner=self.cfg.name)
        lost = set(numbers) - held
        if lost:
            self._on_fenced()
            self._lose(lost, why="epoch moved on or lease expired")
        return sorted(held)

    def drop(self, number: int) -> None:
        self.owned.pop(number, None)
        self._on_drop(number)

    def _lose(self, numbers: set[int], *, why: str) -> None:
        for number in sorted(numbers):
            log.warning(
                "beat %s: fencing — partition %d (epoch %d) lost: %s; its writes are rejected",
                self.cfg.name,
                number,
                self.owned.get(number, -1),
                why,
            )
            self.drop(number)
