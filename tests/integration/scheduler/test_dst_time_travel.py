"""Fired == preview through the real processes across DST transitions (issue 20).

Four transitions — Europe/Amsterdam and America/New_York, spring forward and fall
back — each on its own throwaway PostgreSQL whose clock is moved there with
libfaketime (tests/support/timetravel.py says how and why), run side by side. On
each, a real beat and a real worker (prefork) live through the transition, against
their own Redis database and the loopback ledger; the executions they create must
be exactly what schedule_preview said at creation time — same scheduled_for, same
due_at, none missing, none twice — and each must have run once.

Schedules: a fixed hour inside the gap or the repeated hour, wildcard hours (`*/30`,
`0 *`), hashed (`H h`, `H/30`) and a wildcard one whose transition day an exclude
calendar closes; and intervals (elapsed time): every 30m from a midnight months
before, and every 90m anchored three hours before the transition, whose second run
lands on the transition instant although the wall clock says one hour more or less.

Independent of the real time of day: every instant here is the faked database's.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from tests.support.ledger import Ledger
from tests.support.timetravel import Case, Outcome, faketime_missing, template, travel

pytestmark = [
    pytest.mark.system,
    pytest.mark.slow,
    pytest.mark.skipif(bool(faketime_missing()), reason=faketime_missing() or "n/a"),
]


def _case(name: str, zone: str, transition: datetime, hour: int, *, spring: bool) -> Case:
    fixed = f"30 {hour} * * *" if spring else f"0 {hour} * * *"
    # Three hours before the transition, in ordinary time: two 90-minute steps reach it.
    anchor = (transition - timedelta(hours=3)).astimezone(ZoneInfo(zone)).replace(tzinfo=None)
    return Case(
        name=name,
        zone=zone,
        transition=transition,
        schedules={
            "fixed": {"cron": fixed},
            "half_hourly": {"cron": "*/30 * * * *"},
            "hourly": {"cron": "0 * * * *"},
            "hashed": {"cron": f"H {hour} * * *"},
            "hashed_wild": {"cron": "H/30 * * * *"},
            "closed": {"cron": "0 * * * *", "exclude_calendars": ["closed"]},
            "interval_30m": {
                "cron": None,
                "specs": [{"every": "30m", "anchor": "2026-01-01T00:00:00"}],
            },
            "interval_90m": {
                "cron": None,
                "specs": [{"every": "90m", "anchor": anchor.isoformat()}],
            },
        },
        closed_dates=[transition.astimezone(ZoneInfo(zone)).date().isoformat()],
    )


# hour: the local hour the clocks skip (spring) or repeat (fall); the transition is
# the instant the skipped hour would start / the repeated hour starts again.
CASES = [
    _case("ams-spring", "Europe/Amsterdam", datetime(2026, 3, 29, 1, tzinfo=UTC), 2, spring=True),
    _case("ams-fall", "Europe/Amsterdam", datetime(2026, 10, 25, 1, tzinfo=UTC), 2, spring=False),
    _case("ny-spring", "America/New_York", datetime(2026, 3, 8, 7, tzinfo=UTC), 2, spring=True),
    _case("ny-fall", "America/New_York", datetime(2026, 11, 1, 6, tzinfo=UTC), 1, spring=False),
]


@pytest.fixture(scope="module")
def ledger() -> Iterator[Ledger]:
    with Ledger() as receiver:
        yield receiver


@pytest.fixture(scope="module")
def outcomes(ledger: Ledger) -> Iterator[dict[str, Outcome]]:
    from tests.support.procs import server_data_dir

    # Side by side: each case's clock is its own cluster's; the Redis databases keep
    # their workers apart.
    with (
        server_data_dir("dst-") as data,
        template(data / "template") as base,
        ThreadPoolExecutor(len(CASES)) as pool,
    ):
        futures = {
            case.name: pool.submit(
                travel, case, base, data / case.name, ledger=ledger, broker_db=10 + i
            )
            for i, case in enumerate(CASES)
        }
        yield {name: f.result() for name, f in futures.items()}


@pytest.mark.parametrize("case", [c.name for c in CASES])
def test_fired_equals_preview(outcomes: dict[str, Outcome], ledger: Ledger, case: str) -> None:
    outcome = outcomes[case]
    expected = outcome.expected()
    fired = {n: [(f.scheduled_for, f.due_at) for f in runs] for n, runs in outcome.fired.items()}
    started = f"beat registered at {outcome.beat_started_at} (database clock)"
    assert fired == expected, f"{started}\n{outcome.logs}"
    assert sum(len(v) for v in expected.values()) >= 2, "the window crossed no occurrence"
    for runs in outcome.fired.values():
        for run in runs:
            assert run.state == "succeeded", (run, outcome.logs)
            assert ledger.deliveries[run.id] == 1, (run, outcome.logs)


@pytest.mark.parametrize("case", [c.name for c in CASES])
def test_dst_policy_at_the_transition(outcomes: dict[str, Outcome], case: str) -> None:
    """What the DST policy says happens at the transition instant, independent of the
    preview: wildcard hours run there; a fixed hour runs there when the clocks skipped
    it (spring) and not when its wall time comes round again (fall); a closed day runs
    nothing."""
    outcome = outcomes[case]
    at = outcome.case.transition
    ran_at = {n: [f.scheduled_for for f in runs] for n, runs in outcome.fired.items()}
    assert ran_at["half_hourly"] == [at]
    assert ran_at["hourly"] == [at]
    assert ran_at["closed"] == []
    # Intervals count elapsed time: both run at the transition instant itself.
    assert ran_at["interval_30m"] == [at]
    assert ran_at["interval_90m"] == [at]
    if case.endswith("spring"):
        # The nonexistent 02:30 (and any hashed minute of the skipped hour) runs once,
        # at the first instant after the gap; so do both of H/30's skipped minutes
        # (its minute in the hour before the gap may have come after the creation).
        assert ran_at["fixed"] == [at]
        assert ran_at["hashed"] == [at]
        assert [t for t in ran_at["hashed_wild"] if t >= at] == [at]
    else:
        # The repeated hour runs once, in its first pass (before the schedules were
        # created here): nothing in the second, next run the same wall time tomorrow.
        assert ran_at["fixed"] == []
        assert outcome.seeded.preview["fixed"][0][0] == at + timedelta(days=1)
        assert all(t < at for t in ran_at["hashed"])
