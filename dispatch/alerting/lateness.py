"""Late (dead-man) occurrences: not started within the policy's `late_after_s` of
their due time, or still running past `max_duration_s` (0 = off: nothing is late).

One definition (dispatch/sql/alerts.sql `late_occurrences`) serves both readers:
- the late scan: nothing changes state when a run is late, so there is no
  transaction to decide in: a step of the control pump (every beat) finds the
  occurrences an alert is owed for and writes the alert rows, once per occurrence
  (the outbox's dedup key), and the sender delivers them with the explainer's
  reason ("held: tenant at its concurrency limit", "paused");
- the tenant dashboard's "late now" (every late occurrence, snoozed or alerted or not).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from core.replicas import reads
from dispatch.sql import sql
from tenants.models import Tenant

BATCH = 100


def late_now(*, tenant: Tenant, limit: int) -> list[Any]:
    """The tenant's `limit` longest-late occurrences (rows of `late_occurrences`)."""
    return sql.rows(
        "late_occurrences",
        {"tenant_id": tenant.pk, "for_alerts": False, "batch": limit},
        using=reads(),
    )


def scan_once() -> int:
    """Write the late alerts now owed; returns how many were new. Two statements, not
    one: beats that find the same occurrence race only on the insert, where the
    outbox's dedup key keeps one alert."""
    owed = sql.rows("late_occurrences", {"tenant_id": None, "for_alerts": True, "batch": BATCH})
    if not owed:
        return 0
    started: list[datetime | None] = [r.started_at for r in owed]
    return len(
        sql.rows(
            "alert_late_insert",
            {
                "execution_ids": [r.execution_id for r in owed],
                "states": [r.state for r in owed],
                "not_started": [r.not_started for r in owed],
                "due_ats": [r.due_at for r in owed],
                "started_ats": started,
                "limits": [r.limit_s for r in owed],
            },
        )
    )
