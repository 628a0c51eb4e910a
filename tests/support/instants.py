"""Instants written short in the cron unit tests."""

from __future__ import annotations

from datetime import UTC, datetime


def z(*args: int) -> datetime:
    """`datetime(*args)` in UTC: z(2026, 3, 29, 1) is 01:00Z on 29 March 2026."""
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]
