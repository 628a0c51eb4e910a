"""Maintenance windows: whether a tenant's alerts are being held right now, and
until when. A one-off window is open from `starts_at` to `ends_at`; a recurring
one for `duration_s` from each occurrence of its cron (in its time zone)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from core.db import db_now
from dispatch.models import MaintenanceWindow
from dispatch.timing import cron


@dataclass(frozen=True)
class Open:
    name: str
    ends_at: datetime


def window_open(window: MaintenanceWindow, now: datetime) -> Open | None:
    """The window's current opening at `now`, if it is open."""
    if not window.cron:
        if window.starts_at and window.ends_at and window.starts_at <= now < window.ends_at:
            return Open(window.name, window.ends_at)
        return None
    span = timedelta(seconds=window.duration_s)
    started = cron.occurrences_between(
        window.cron, window.timezone, start=now - span, end=now, seed=str(window.id)
    )
    if not started:
        return None
    return Open(window.name, max(started) + span)


def open_now(*, tenant_ids: Iterable[int]) -> dict[int, Open]:
    """Each listed tenant's open window (the one that stays open longest), by tenant id."""
    ids = set(tenant_ids)
    if not ids:
        return {}
    now = db_now()
    found: dict[int, Open] = {}
    for window in MaintenanceWindow.objects.filter(tenant_id__in=ids):
        opened = window_open(window, now)
        current = found.get(window.tenant_id)
        if opened and (current is None or opened.ends_at > current.ends_at):
            found[window.tenant_id] = opened
    return found
