"""Instants written short: aware UTC datetimes (`z`) and their ISO text (`zulu`)."""

from __future__ import annotations

from datetime import UTC, datetime


def z(*args: int) -> datetime:
    """`datetime(*args)` in UTC: z(2026, 3, 29, 1) is 01:00Z on 29 March 2026."""
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def zulu(value: datetime) -> str:
    """`value` in ISO 8601, in UTC, with "Z" for the offset."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
