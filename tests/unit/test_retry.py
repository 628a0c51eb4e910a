"""Backoff math: exponential and fixed, jitter bounds, caps, Retry-After."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatch.timing import retry

EXP = {"max_attempts": 5, "backoff": "exponential", "initial_s": 10, "max_s": 60}
FIXED = {"max_attempts": 5, "backoff": "fixed", "initial_s": 7, "max_s": 60}


class Const(random.Random):
    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = value

    def random(self) -> float:
        return self.value


def test_exponential_doubles_from_initial_and_is_capped() -> None:
    assert [retry.base_delay_s(EXP, n) for n in range(1, 6)] == [10, 20, 40, 60, 60]


def test_fixed_is_constant() -> None:
    assert {retry.base_delay_s(FIXED, n) for n in range(1, 10)} == {7}


def test_jitter_only_shortens_by_at_most_a_fifth() -> None:
    assert retry.backoff_s(EXP, 2, rng=Const(0.0)) == 20
    assert retry.backoff_s(EXP, 2, rng=Const(1.0)) == pytest.approx(16)


@given(
    attempt=st.integers(min_value=1, max_value=100),
    initial=st.integers(min_value=0, max_value=3600),
    extra=st.integers(min_value=0, max_value=86400),
    backoff=st.sampled_from(["exponential", "fixed"]),
    seed=st.integers(),
)
def test_delay_is_never_above_the_cap_nor_negative(
    attempt: int, initial: int, extra: int, backoff: str, seed: int
) -> None:
    pol = {"max_attempts": 100, "backoff": backoff, "initial_s": initial, "max_s": initial + extra}
    delay = retry.backoff_s(pol, attempt, rng=random.Random(seed))
    assert 0 <= delay <= pol["max_s"]
    assert delay >= (1 - retry.JITTER_FRACTION) * retry.base_delay_s(pol, attempt) - 1e-9


def test_retry_after_is_a_floor_even_beyond_max_s_but_bounded() -> None:
    assert retry.backoff_s(EXP, 1, retry_after_s=120, rng=Const(0.0)) == 120
    assert retry.backoff_s(EXP, 1, retry_after_s=1, rng=Const(0.0)) == 10
    assert (
        retry.backoff_s(EXP, 1, retry_after_s=10**9, rng=Const(0.0)) == retry.RETRY_AFTER_CEILING_S
    )


def test_exhausted_at_max_attempts() -> None:
    assert not retry.exhausted(EXP, 4)
    assert retry.exhausted(EXP, 5)


def test_policy_fills_defaults() -> None:
    assert retry.policy({}) == retry.DEFAULT_POLICY
    assert retry.policy(None) == retry.DEFAULT_POLICY
    assert retry.policy({"max_attempts": 9})["max_attempts"] == 9


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("30", 30.0),
        (" 0 ", 0.0),
        ("Wed, 21 Oct 2015 07:28:30 GMT", 30.0),
        ("Wed, 21 Oct 2015 07:27:00 GMT", 0.0),  # in the past: come back now
        ("soon", None),
        ("", None),
        (None, None),
        ("-5", None),
    ],
)
def test_parse_retry_after(value: str | None, expected: float | None) -> None:
    now = datetime(2015, 10, 21, 7, 28, tzinfo=UTC)
    assert retry.parse_retry_after(value, now=now) == expected
