"""Simple dependencies: B runs after A succeeds, for the same occurrence.

A schedule that names upstream schedules is fired by them, not by its own
timing: when every upstream has succeeded for an occurrence `scheduled_for`,
the dependent gets an execution for that same `scheduled_for`; when any
upstream ends otherwise (dead, skipped, cancelled), the dependent's occurrence
is recorded as skipped, naming the upstream. A paused upstream's occurrences
are recorded skipped (reason `paused`) by the beat as they fall due
(firing.record_paused), so its dependents are skipped too instead of waiting
forever. Call `propagate` inside the transaction that made the upstream
execution final.

The statement is `propagate_dependents` in dispatch/sql/dependencies.sql: one
round trip however many dependents the finished executions have.
"""

from __future__ import annotations

from typing import Any

from dispatch.services import WAKE_CHANNEL
from dispatch.sql import sql
from dispatch.states import FINAL_STATES, state_values


def propagate(*, execution_ids: list[Any]) -> int:
    """Fire or skip the dependents of executions that just became final; returns rows written."""
    if not execution_ids:
        return 0
    row = sql.one(
        "propagate_dependents",
        {
            "ids": [str(i) for i in execution_ids],
            "final": state_values(FINAL_STATES),
            "channel": WAKE_CHANNEL,
        },
    )
    return int(row.written) if row is not None else 0
