"""Rates of the throttles: the forms operators write, and a start-up error for a typo."""

from __future__ import annotations

import pytest
from django.test import override_settings

from tenants import limits


@pytest.mark.parametrize(
    "text,limit,window",
    [
        ("1200/min", 1200, 60),
        ("3/m", 3, 60),
        ("10/15min", 10, 900),
        ("100/hour", 100, 3600),
        ("5/days", 5, 86400),
        ("2/s", 2, 1),
        (" 7 / 2 minutes ", 7, 120),
    ],
)
def test_rates_parse(text: str, limit: int, window: int) -> None:
    assert limits.parse_rate(text) == limits.Rate(limit=limit, window_s=window)


@pytest.mark.parametrize("text", ["", "ten/min", "0/min", "5/0min", "5/fortnight", "5"])
def test_bad_rates_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="must"):
        limits.parse_rate(text)


def test_a_mistyped_limit_is_a_system_check_error() -> None:
    with override_settings(LOGIN_FAILURES_PER_USER="10 per hour"):
        errors = limits.check_settings()
    assert [e.id for e in errors] == ["tenants.E001"]
    assert "LOGIN_FAILURES_PER_USER" in errors[0].msg
    assert limits.check_settings() == []


def test_invitation_settings_are_checked_at_start_up() -> None:
    with override_settings(INVITE_ATTEMPTS_PER_ADDRESS="lots", INVITATION_TTL_DAYS=0):
        errors = limits.check_settings()
    assert [e.id for e in errors] == ["tenants.E001", "tenants.E002"]
    assert "INVITE_ATTEMPTS_PER_ADDRESS" in errors[0].msg and "1 to 365" in errors[1].msg
