"""The publish-stall rule (dispatch/scheduler/handover.py) on a clock the test moves:
when a beat that cannot publish hands its partitions over, and when it takes part
again. The processes doing it for real: tests/integration/scheduler/test_publish_stall_handover.py."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dispatch.scheduler.handover import PublishStall

STALL_S = 5.0
COOLOFF_S = 30.0
LEASE_S = 10.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def stall(clock: Clock) -> PublishStall:
    return PublishStall(stall_s=STALL_S, cooloff_s=COOLOFF_S, clock=clock)


def fail(stall: PublishStall, clock: Clock, *, lasting: float) -> None:
    """One publish attempt that started now, waited `lasting` and sent nothing."""
    started = clock.now
    clock.now += lasting
    stall.attempted(started=started, sent=0, total=3)


def never() -> Callable[[], bool]:
    def ask() -> bool:
        raise AssertionError("asked although its answer could not matter")

    return ask


def test_hands_over_once_due_work_went_unpublished_for_the_stall_bound(
    stall: PublishStall, clock: Clock
) -> None:
    fail(stall, clock, lasting=1.0)
    assert not stall.should_hand_over()
    fail(stall, clock, lasting=1.0)
    clock.now += 2.9
    assert not stall.should_hand_over()
    clock.now += 0.1
    assert stall.should_hand_over()


def test_the_wait_of_a_silent_broker_counts_from_the_attempt_start(
    stall: PublishStall, clock: Clock
) -> None:
    # One call held for its I/O bound (Redis: BROKER_SOCKET_TIMEOUT_S, 5 s) is already
    # a 5 s stall when it fails.
    fail(stall, clock, lasting=STALL_S)
    assert stall.stalled_for() == STALL_S
    assert stall.should_hand_over()


def test_any_message_the_broker_takes_ends_the_stall(stall: PublishStall, clock: Clock) -> None:
    assert not stall.failing
    fail(stall, clock, lasting=4.0)
    assert stall.failing  # what the heartbeat reports: no taker for another's hand-over
    stall.attempted(started=clock.now, sent=1, total=3)  # partly sent: the link carries
    clock.now += STALL_S
    assert not stall.failing and not stall.should_hand_over()
    fail(stall, clock, lasting=1.0)
    assert not stall.should_hand_over()  # a new run of failures starts from zero


def test_an_idle_beat_with_a_dead_broker_does_not_hand_over(
    stall: PublishStall, clock: Clock
) -> None:
    fail(stall, clock, lasting=1.0)
    stall.idle()  # nothing due, nothing owed
    clock.now += 60
    assert not stall.should_hand_over()
    stall.attempted(started=clock.now, sent=0, total=0)  # nothing to publish is no attempt
    clock.now += 60
    assert not stall.should_hand_over()


def test_no_taker_keeps_the_partitions_and_asks_again_a_stall_later(
    stall: PublishStall, clock: Clock
) -> None:
    fail(stall, clock, lasting=STALL_S)
    assert stall.should_hand_over()
    stall.no_taker()
    fail(stall, clock, lasting=STALL_S - 0.5)
    assert not stall.should_hand_over()
    clock.now += 0.5
    assert stall.should_hand_over()


def test_zero_disables_the_hand_over(clock: Clock) -> None:
    stall = PublishStall(stall_s=0, cooloff_s=COOLOFF_S, clock=clock)
    fail(stall, clock, lasting=600)
    assert not stall.should_hand_over()


def test_standing_by_the_beat_probes_its_broker_only_after_the_cool_off(
    stall: PublishStall, clock: Clock
) -> None:
    fail(stall, clock, lasting=STALL_S)
    stall.stepped_out()
    assert stall.standby and not stall.should_hand_over()
    clock.now += COOLOFF_S - 1
    why = stall.rejoin_reason(
        others_take_part=True,
        lease_s=LEASE_S,
        partitions_untaken=lambda: False,
        broker_answers=never(),
    )
    assert why is None
    clock.now += 1
    dead = stall.rejoin_reason(
        others_take_part=True,
        lease_s=LEASE_S,
        partitions_untaken=lambda: False,
        broker_answers=lambda: False,
    )
    assert dead is None
    back = stall.rejoin_reason(
        others_take_part=True,
        lease_s=LEASE_S,
        partitions_untaken=lambda: False,
        broker_answers=lambda: True,
    )
    assert back == "its broker answers again"
    stall.rejoined()
    assert not stall.standby and stall.failing_since is None


def test_standing_by_with_no_other_beat_taking_part_rejoins_at_once(
    stall: PublishStall, clock: Clock
) -> None:
    stall.stepped_out()
    why = stall.rejoin_reason(
        others_take_part=False,
        lease_s=LEASE_S,
        partitions_untaken=never(),
        broker_answers=never(),
    )
    assert why == "no other beat takes part"


def test_partitions_left_untaken_a_lease_after_the_hand_over_are_taken_back(
    stall: PublishStall, clock: Clock
) -> None:
    stall.stepped_out()
    clock.now += LEASE_S - 0.1
    early = stall.rejoin_reason(
        others_take_part=True, lease_s=LEASE_S, partitions_untaken=never(), broker_answers=never()
    )
    assert early is None
    clock.now += 0.1
    taken = stall.rejoin_reason(
        others_take_part=True,
        lease_s=LEASE_S,
        partitions_untaken=lambda: False,
        broker_answers=never(),
    )
    assert taken is None
    untaken = stall.rejoin_reason(
        others_take_part=True,
        lease_s=LEASE_S,
        partitions_untaken=lambda: True,
        broker_answers=never(),
    )
    assert untaken == "partitions are left untaken a lease after the hand-over"


def test_a_beat_taking_part_is_never_told_to_rejoin(stall: PublishStall) -> None:
    why = stall.rejoin_reason(
        others_take_part=False, lease_s=LEASE_S, partitions_untaken=never(), broker_answers=never()
    )
    assert why is None
