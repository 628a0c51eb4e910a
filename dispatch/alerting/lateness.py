"""Late (dead-man) alerts: occurrences that have not started within the policy's
`late_after_s` of their due time, or are still running past `max_duration_s`.

Nothing changes state when a run is late, so there is no transaction to decide
in: a step of the control pump (every beat) scans for them and writes the alert
rows, once per occurrence (the outbox's dedup key), and the sender delivers them
with the explainer's reason ("held: tenant at its concurrency limit", "paused").
"""

from __future__ import annotations

from dispatch.sql import sql

BATCH = 100


def scan_once() -> int:
    """Write the late alerts now owed; returns how many were new."""
    return len(sql.rows("alert_late_scan", {"batch": BATCH}))
