"""Writes of the dispatch app: schedules and one-off jobs.

Every function is one transaction with its audit row inside; the beat is woken
with NOTIFY, which PostgreSQL delivers only when the transaction commits.

  common.py     what the writes share: wake-up, snapshot, event + audit, locks, quota, constraints
  schedules.py  create, update, delete, pause, resume
  triggers.py   run now
  jobs.py       one-off jobs with an idempotency key
  runs.py       cancel and re-run of one execution
  backfills.py  backfill a past range (with a dry run), cancel a backfill
  job_cancel.py cancel a one-off job that has not started
  alert_channels.py  alert channels: create, update, delete, send a test (admins)
  alert_policies.py  alert policies (tenant default, schedule override), a schedule's snooze
  maintenance_windows.py  a tenant's maintenance windows (alerts held, summarised after)
  apply.py      declarative apply: a file of definitions by name, in one transaction
  bulk.py       bulk actions by ids or filter, as operations (worked here or by the control pump)
  completion.py the callbacks that end a handed-off attempt (heartbeat, succeed, fail)
  commands.py   managed commands' registrations (platform staff): register, enable, disable

Callers use `from dispatch import services; services.x`: every public name is here.
"""

from __future__ import annotations

from core.db import db_now  # the clock callers of services use
from dispatch.services.alert_channels import (
    alert_channel_create,
    alert_channel_delete,
    alert_channel_test,
    alert_channel_update,
)
from dispatch.services.alert_policies import (
    alert_policy_delete,
    alert_policy_set,
    schedule_snooze,
)
from dispatch.services.apply import (
    ApplyResult,
    schedules_apply,
)
from dispatch.services.backfills import (
    BackfillResult,
    backfill_cancel,
    backfill_create,
)
from dispatch.services.bulk import (
    BulkOutcome,
    bulk_executions,
    bulk_schedules,
    operation_cancel,
)
from dispatch.services.commands import (
    managed_command_problems,
    managed_command_register,
    managed_command_set_enabled,
)
from dispatch.services.common import (
    BACKFILL_WAKE_CHANNEL,
    WAKE_CHANNEL,
    WAKE_HORIZON,
    save_schedule_unique,
    schedule_snapshot,
)
from dispatch.services.completion import completion_finish, completion_heartbeat
from dispatch.services.job_cancel import job_cancel
from dispatch.services.jobs import (
    job_create,
    request_digest,
)
from dispatch.services.maintenance_windows import (
    maintenance_window_create,
    maintenance_window_delete,
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
    "BACKFILL_WAKE_CHANNEL",
    "TRIGGER_RETRY_AFTER_S",
    "WAKE_CHANNEL",
    "WAKE_HORIZON",
    "ApplyResult",
    "BackfillResult",
    "BulkOutcome",
    "CancelResult",
    "alert_channel_create",
    "alert_channel_delete",
    "alert_channel_test",
    "alert_channel_update",
    "alert_policy_delete",
    "alert_policy_set",
    "backfill_cancel",
    "backfill_create",
    "bulk_executions",
    "bulk_schedules",
    "completion_finish",
    "completion_heartbeat",
    "db_now",
    "execution_cancel",
    "execution_rerun",
    "job_cancel",
    "job_create",
    "maintenance_window_create",
    "maintenance_window_delete",
    "managed_command_problems",
    "managed_command_register",
    "managed_command_set_enabled",
    "operation_cancel",
    "request_digest",
    "save_schedule_unique",
    "schedule_create",
    "schedule_delete",
    "schedule_pause",
    "schedule_resume",
    "schedule_snapshot",
    "schedule_snooze",
    "schedule_trigger",
    "schedule_update",
    "schedules_apply",
]
