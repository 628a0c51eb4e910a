"""Rows written straight to the tables, for states the services do not produce on demand."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from dispatch.models import Execution, Schedule


def execution_row(schedule: Schedule, at: datetime, **fields: Any) -> Execution:
    """An execution of `schedule` for its occurrence at `at` (scheduled_for), in the
    schedule's tenant and partition, due at `at` and "scheduled" unless `fields` say otherwise."""
    values: dict[str, Any] = {
        "tenant_id": schedule.tenant_id,
        "partition": schedule.partition,
        "due_at": at,
        "state": "scheduled",
    }
    if "tenant" in fields:
        del values["tenant_id"]
    return Execution.objects.create(schedule=schedule, scheduled_for=at, **(values | fields))
