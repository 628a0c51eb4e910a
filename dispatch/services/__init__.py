"""Writes of the dispatch app: schedules and one-off jobs.

Every function is one transaction with its audit row inside; the beat is woken
with NOTIFY, which PostgreSQL delivers only when the transaction commits.

  common.py     what the writes share: wake-up, snapshot, event + audit, locks, quota, constraints
  schedules.py  create, update, delete, pause, resume
  triggers.py   run now
  jobs.py       one-off jobs with an idempotency key
  runs.py       cancel and re-run of one execution

Callers use `from dispatch import services; services.x`: every public name is here.
"""

from __future__ import annotations

from core.db import db_now  # the clock callers of services use
from dispatch.services.common import (
    WAKE_CHANNEL,
    WAKE_HORIZON,
    _save_unique,
    schedule_snapshot,
)
from dispatch.services.jobs import (
    job_create,
    request_digest,
)
from dispatch.services.runs import (
    CancelResult,
    execution_cancel,
    execution_rerun,
)
from dispatch.services.schedules import (
    schedule_create,
    schedule_delete,
    schedule_pause,
    schedule_resume,
    schedule_update,
)
from dispatch.services.triggers import (
    TRIGGER_RETRY_AFTER_S,
    schedule_trigger,
)

__all__ = [
    "TRIGGER_RETRY_AFTER_S",
    "WAKE_CHANNEL",
    "WAKE_HORIZON",
    "CancelResult",
    "_save_unique",
    "db_now",
    "execution_cancel",
    "execution_rerun",
    "job_create",
    "request_digest",
    "schedule_create",
    "schedule_delete",
    "schedule_pause",
    "schedule_resume",
    "schedule_snapshot",
    "schedule_trigger",
    "schedule_update",
]
