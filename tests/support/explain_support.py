"""Schedules for the explainer tests: cron in Europe/Amsterdam, created in the past
so the occurrences asked about are not before the schedule existed; and the ids an
answer's evidence names."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from dispatch import services
from dispatch.models import Schedule
from tenants.roles import Principal
from tests.support.console_support import TARGET

CREATED = datetime(2025, 12, 1, tzinfo=UTC)


def amsterdam_schedule(
    principal: Principal, cron: str, *, name: str, created: datetime = CREATED, **extra: Any
) -> Schedule:
    """A schedule on `cron` in Europe/Amsterdam calling TARGET, its created_at set to `created`."""
    data = {"name": name, "cron": cron, "timezone": "Europe/Amsterdam", "target": TARGET, **extra}
    schedule = services.schedule_create(actor=principal, data=data)
    Schedule.objects.filter(pk=schedule.pk).update(created_at=created)
    schedule.refresh_from_db()
    return schedule


def ids(answer: Any, kind: str) -> set[str]:
    """The ids of an explainer answer's evidence of one `kind` ("execution", "audit")."""
    return {e.id for e in answer.evidence if e.kind == kind}
