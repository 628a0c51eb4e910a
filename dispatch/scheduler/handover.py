"""The publish-stall rule: when a beat that cannot publish hands its partitions over,
and when it takes part again.

A beat's leases do not depend on its broker (the lease keeper renews them whatever
publishing does), so a beat whose broker link is dead or silent would keep its
partitions, and everything due in them would wait for the link to heal while
another beat could have published it (docs/explanation/failure-contract.md,
"A beat that cannot publish hands its partitions over"). The rule, in one place:

* **stalled**: work was due and no publish attempt since the first failed one has
  got a message onto the broker, for `stall_s` (BEAT_PUBLISH_STALL_S). The clock
  starts when that attempt *started*: a silent broker holds each call for its I/O
  bound, and that wait is part of the stall. Any message the broker takes ends it,
  and so does a round with nothing to publish — an idle beat with a dead broker has
  nothing late, and handing its partitions round would only churn;
* a stalled beat **hands over** — releases every lease through the ordinary release
  path (the next owner's acquire bumps each epoch, so anything it might still try
  to write under the old one is refused) — only when another live beat takes part to
  take them and is not failing to publish itself (each beat's heartbeat says whether
  it is: `failing`; the database decides, one hand-over at a time: store.step_out).
  With no taker it keeps them, as every beat would if the broker were down for all, and asks
  again after another `stall_s`: its occurrences are still claimed and recorded, and
  go out when the broker is back, not skipped for want of an owner;
* it then **stands by**: no part in the fair share, claims nothing, for at least
  `cooloff_s` (BEAT_PUBLISH_COOLOFF_S); after that it probes its broker each cycle
  and takes part again at the first answer. It takes part again at once when no
  other beat does any more, and when what it handed over was not taken within a
  lease (a taker that died, or one whose code predates the hand-over).

The beat (loop.py) feeds it every publish attempt and asks it each cycle; the clock
is injectable so that the rule's tests are not timed.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class PublishStall:
    def __init__(
        self,
        *,
        stall_s: float,
        cooloff_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stall_s = stall_s
        self.cooloff_s = cooloff_s
        self._clock = clock
        # When the first of the current run of failed attempts started (monotonic);
        # None while publishing works or nothing is owed.
        self.failing_since: float | None = None
        # When the beat stepped out of the fair share; None while it takes part.
        self.standby_since: float | None = None
        # After a hand-over found no taker: not asked again before this.
        self._ask_again_at = float("-inf")

    # --- what the beat reports -----------------------------------------------------------

    def attempted(self, *, started: float, sent: int, total: int) -> None:
        """One publish attempt of `total` messages, started at `started`: `sent` went out."""
        if total == 0:
            return
        if sent:
            self.failing_since = None  # the link carries messages
        elif self.failing_since is None:
            self.failing_since = started

    def idle(self) -> None:
        """A round with nothing due and nothing owed: nothing is late, whatever the broker."""
        self.failing_since = None

    def no_taker(self) -> None:
        """The hand-over found no beat to take the partitions: kept, asked again later."""
        self._ask_again_at = self._clock() + self.stall_s

    def stepped_out(self) -> None:
        self.standby_since = self._clock()
        self.failing_since = None

    def rejoined(self) -> None:
        self.standby_since = None
        self.failing_since = None
        self._ask_again_at = float("-inf")

    # --- what the beat asks --------------------------------------------------------------

    @property
    def failing(self) -> bool:
        """Publishes are failing now (the heartbeat says so: no taker for a hand-over)."""
        return self.failing_since is not None

    def stalled_for(self) -> float:
        """Seconds since the current run of failed attempts began (0: none)."""
        return 0.0 if self.failing_since is None else self._clock() - self.failing_since

    def should_hand_over(self) -> bool:
        """Due work went unpublished for stall_s (and no refusal to hand over is recent)."""
        return (
            self.stall_s > 0
            and self.standby_since is None
            and self.failing_since is not None
            and self.stalled_for() >= self.stall_s
            and self._clock() >= self._ask_again_at
        )

    @property
    def standby(self) -> bool:
        return self.standby_since is not None

    def standby_for(self) -> float:
        return 0.0 if self.standby_since is None else self._clock() - self.standby_since

    def cooled_off(self) -> bool:
        """Standing by for the cool-off at least: time to probe the broker."""
        return self.standby and self.standby_for() >= self.cooloff_s

    def rejoin_reason(
        self,
        *,
        others_take_part: bool,
        lease_s: float,
        partitions_untaken: Callable[[], bool],
        broker_answers: Callable[[], bool],
    ) -> str | None:
        """Why a standing-by beat takes part again now, or None to stand by on. The two
        callables are asked only when their answer matters (each is a round trip)."""
        if not self.standby:
            return None
        if not others_take_part:
            return "no other beat takes part"
        if self.standby_for() >= lease_s and partitions_untaken():
            return "partitions are left untaken a lease after the hand-over"
        if self.cooled_off() and broker_answers():
            return "its broker answers again"
        return None
