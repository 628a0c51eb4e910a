"""The one breakdown of a duration, in the beat's compact and the explainer's spaced spelling."""

from __future__ import annotations

from datetime import timedelta

import pytest

from dispatch.explain.present import late
from dispatch.timing.durations import spell


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
