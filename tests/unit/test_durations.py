"""The one breakdown of a duration, in the beat's compact and the explainer's spaced spelling."""

from __future__ import annotations

from datetime import timedelta

import pytest

from dispatch.explain.present import late
from dispatch.timing.durations import measured, relative, spell


@pytest.mark.parametrize(
    ("seconds", "compact", "spaced"),
    [
        (0, "0s", "0 s"),
        (59, "59s", "59 s"),
        (60, "1m00s", "1 min 00 s"),
        (840, "14m00s", "14 min 00 s"),
        (3599, "59m59s", "59 min 59 s"),
        (3600, "1h00m", "1 h 00 min"),
        (3 * 3600 + 5 * 60 + 59, "3h05m", "3 h 05 min"),
    ],
)
def test_both_spellings(seconds: int, compact: str, spaced: str) -> None:
    delta = timedelta(seconds=seconds, microseconds=900_000)  # whole seconds only
    assert spell(delta) == compact
    assert late(delta) == spaced


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0.0, "0 ms"),
        (0.0004, "0.4 ms"),
        (0.008, "8 ms"),
        (0.0304, "30 ms"),
        (0.9994, "999 ms"),
        (0.9996, "1.0 s"),  # rounds up to a second: said in seconds, not "1000 ms"
        (2.4, "2.4 s"),
        (59.94, "59.9 s"),
        (59.96, "1.0 min"),  # likewise, not "60.0 s"
        (150, "2.5 min"),
        (7200, "120 min"),
        (-0.012, "-12 ms"),
    ],
)
def test_a_measured_duration_reads_in_ms_s_or_min(seconds: float, shown: str) -> None:
    assert measured(seconds) == shown


def test_relative_times_say_the_largest_whole_unit() -> None:
    assert relative(0) == "just now" and relative(4.9) == "just now" and relative(-3) == "just now"
    assert relative(40) == "40 s ago"
    assert relative(5 * 60 + 59) == "5 min ago"
    assert relative(3 * 3600 + 10) == "3 h ago"
    assert relative(2 * 86400) == "2 d ago"
    assert relative(-300) == "in 5 min"
