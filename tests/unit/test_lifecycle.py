"""The lifecycle bounds' pure parts: durations as users write them, delete_after's
bounds and spelling (export → apply must round-trip it), and the completed rule."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from dispatch import lifecycle
from dispatch.exceptions import InvalidSchedule
from dispatch.timing import cron, durations

NOW = datetime(2026, 12, 24, 6, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90m", 5400), ("1h30m", 5400), ("7d", 604800), ("2w", 1209600), ("0s", 0), (" 45S ", 45)],
)
def test_durations_parse_units(text: str, seconds: int) -> None:
    assert durations.parse(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "5", "m", "1x", "1.5h", "-1h", "\uff11h", "1h 30m"])
def test_durations_refuse_what_is_not_one(text: str) -> None:
    with pytest.raises(ValueError, match=r"duration|unit"):
        durations.parse(text)


@pytest.mark.parametrize("value", ["1h30m", "7d", "1d2h3m4s", "0s", "3650d"])
def test_delete_after_spelling_round_trips(value: str) -> None:
    delta = lifecycle.clean_delete_after(value, kind="once")
    assert delta is not None
    spelled = lifecycle.spell_delete_after(delta)
    assert spelled is not None
    assert lifecycle.clean_delete_after(spelled, kind="once") == delta


@pytest.mark.parametrize(
    ("value", "kind", "reason"),
    [
        ("-5m", "once", "negative"),
        ("3651d", "once", "at most"),
        (12, "once", "duration string"),
        ("1h", "cron", "one-off"),
    ],
)
def test_delete_after_bounds(value: object, kind: str, reason: str) -> None:
    with pytest.raises(InvalidSchedule) as exc:
        lifecycle.clean_delete_after(value, kind=kind)
    assert "delete_after" in (exc.value.detail or {})
    assert reason in str(exc.value)


@dataclass
class Row:
    max_runs: int | None = None
    runs_succeeded: int = 0
    completed_at: datetime | None = None
    kind: str = "cron"
    cron: str = "0 * * * *"


def ending(end: datetime) -> Row:
    """A schedule whose timing text carries an end_at (dispatch/timing/cron.py)."""
    return Row(cron=cron.compose([cron.Spec(cron="0 * * * *")], start_at=None, end_at=end))


def test_completed_by_max_runs_names_the_bound_and_when() -> None:
    assert lifecycle.completion(Row(max_runs=500, runs_succeeded=499), now=NOW) is None
    done = lifecycle.completion(Row(max_runs=500, runs_succeeded=500, completed_at=NOW), now=NOW)
    assert done is not None and done.reason == "max_runs"
    assert done.sentence == "completed: reached max_runs 500 on 2026-12-24 06:00 UTC"
    # Successes of runs already running when it completed may take the count past it.
    assert lifecycle.completion(Row(max_runs=2, runs_succeeded=3), now=NOW) is not None


def test_completed_by_end_at_once_it_passed() -> None:
    end = datetime(2026, 12, 24, tzinfo=UTC)
    assert lifecycle.completion(ending(end), now=end - timedelta(seconds=1)) is None
    assert lifecycle.completion(Row(), now=NOW) is None
    done = lifecycle.completion(ending(end), now=NOW)
    assert done is not None and done.reason == "end_at"
    assert done.sentence == "completed: end_at 2026-12-24T00:00:00Z passed"


def test_max_runs_bounds() -> None:
    assert lifecycle.clean_max_runs(None, kind="once") is None
    assert lifecycle.clean_max_runs(1, kind="cron") == 1
    for bad in (0, -1, True, 1.5, lifecycle.MAX_RUNS_LIMIT + 1):
        with pytest.raises(InvalidSchedule):
            lifecycle.clean_max_runs(bad, kind="cron")
