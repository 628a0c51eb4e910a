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

from datetime import datetime, timedelta
from typing import Any

from django.db import DEFAULT_DB_ALIAS
from django.utils import timezone

from core.replicas import reads
from dispatch.sql import sql
from tenants.models import Tenant

BATCH = 100
LOOKBACK = timedelta(days=1)  # late_occurrences looks at the occurrences of the last day


def late_now(*, tenant: Tenant, limit: int) -> list[Any]:
    """The tenant's `limit` longest-late occurrences (rows of `late_occurrences`)."""
    tenants = _watchers(tenant.pk, using=reads())
    if not tenants:
        return []
    return sql.rows(
        "late_occurrences", _params(tenants, for_alerts=False, batch=limit), using=reads()
    )


def scan_once() -> int:
    """Write the late alerts now owed; returns how many were new. Two statements, not
    one: beats that find the same occurrence race only on the insert, where the
    outbox's dedup key keeps one alert."""
    tenants = _watchers(None)
    if not tenants:
        return 0
    owed = sql.rows("late_occurrences", _params(tenants, for_alerts=True, batch=BATCH))
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


def _watchers(tenant_id: int | None, using: str = DEFAULT_DB_ALIAS) -> list[int]:
    """The tenants (the one; None: any) with a policy that sets a lateness limit. With
    none, late_occurrences is not run at all: with nothing to find, its planning alone
    cost 35-290 ms every round of every beat's late scan (`bench cronburst`, 10-40 day
    partitions), a core's tenth to a third on a two-core machine."""
    return [
        r.tenant_id for r in sql.rows("lateness_watchers", {"tenant_id": tenant_id}, using=using)
    ]


def _params(tenants: list[int], *, for_alerts: bool, batch: int) -> dict[str, Any]:
    # "The last day", from this process's clock: the window is a bound on how far back
    # to look (an occurrence a day late has long been alerted), not a rule to the second.
    since = timezone.now() - LOOKBACK
    return {"tenants": tenants, "for_alerts": for_alerts, "batch": batch, "since": since}
