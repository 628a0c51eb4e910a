"""The platform's vocabulary: states, triggers, event kinds, reason codes, answers.

Defined once; Python compares against these and SQL receives the sets as
parameters (`state_values(...)`), so a state's meaning cannot drift between
the beat, the worker, the API and the console.
"""

from __future__ import annotations

from django.db import models


class ExecutionState(models.TextChoices):
    SCHEDULED = "scheduled"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    RETRY_SCHEDULED = "retry_scheduled"
    TIMED_OUT = "timed_out"
    DEAD = "dead"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"


# A worker may claim an execution in these states (a message names it).
CLAIMABLE_STATES = frozenset(
    {ExecutionState.SCHEDULED, ExecutionState.QUEUED, ExecutionState.RETRY_SCHEDULED}
)
# Not finished yet: an occurrence in one of these may still run.
ACTIVE_STATES = CLAIMABLE_STATES | {ExecutionState.RUNNING}
# Not started yet: waiting for its time or for a worker. A schedule's "last run" (the
# console's list, the health card) is never one of these: it has not run.
NOT_STARTED_STATES = frozenset({ExecutionState.SCHEDULED, ExecutionState.QUEUED})
# Finished for good: dependents fire or skip on these; nothing changes them again.
FINAL_STATES = frozenset(
    {
        ExecutionState.SUCCEEDED,
        ExecutionState.DEAD,
        ExecutionState.SKIPPED,
        ExecutionState.CANCELLED,
    }
)
# "In flight" for a tenant's max_concurrent: holding a worker slot or about to
# (published to the broker). The one definition the beat's admission, manual
# triggers and the console's counts all use.
IN_FLIGHT_STATES = frozenset({ExecutionState.QUEUED, ExecutionState.RUNNING})
# Holding a concurrency key (dispatch/concurrency_keys.py): admitted and not finished —
# queued, running, or waiting for a retry (the run goes on). Like the overlap policy's
# "active", less `scheduled`: an occurrence holds its key from admission on.
KEY_HOLDING_STATES = frozenset(
    {ExecutionState.QUEUED, ExecutionState.RUNNING, ExecutionState.RETRY_SCHEDULED}
)


def state_values(states: frozenset[ExecutionState]) -> list[str]:
    """A state set as plain strings, for SQL parameters (`= ANY(%(states)s)`)."""
    return sorted(str(state.value) for state in states)


class Trigger(models.TextChoices):
    CRON = "cron"
    MANUAL = "manual"
    RETRY = "retry"
    CATCH_UP = "catch_up"
    DEPENDENCY = "dependency"
    API = "api"
    # Created by a backfill over a past range (`Execution.backfill` names it).
    BACKFILL = "backfill"


# A schedule's definition: what it is and how it runs.
class Kind(models.TextChoices):
    CRON = "cron"
    ONCE = "once"


class Priority(models.TextChoices):
    HIGH = "high"
    DEFAULT = "default"
    LOW = "low"


class DurationClass(models.TextChoices):
    SHORT = "short"
    LONG = "long"


class Overlap(models.TextChoices):
    FORBID = "forbid"
    ALLOW = "allow"
    REPLACE = "replace"


class Misfire(models.TextChoices):
    SKIP = "skip"
    RUN_ONCE = "run_once"
    CATCH_UP = "catch_up"


class EventKind(models.TextChoices):
    """Every kind of `ExecutionEvent` the platform writes (Python and SQL alike).

    `ExecutionEvent.kind` stays a plain column (no `choices=`, no migration); this
    is the list the writers and the readers (explainer, console, metrics) share.
    """

    # A comment above kinds describes them up to the next comment or blank line:
    # docs/reference/events.md is generated from these comments.

    # Schedule lifecycle, written by the services with the audit row they caused
    # (`data.audit_id` names it).
    CREATED = "created"
    UPDATED = "updated"
    DELETED = "deleted"
    PAUSED = "paused"
    PAUSE_UPDATED = "pause_updated"
    RESUMED = "resumed"
    TRIGGERED = "triggered"
    # Reached max_runs (the worker's finish, with the staged occurrences it withdrew),
    # or re-opened by an edit (dispatch/lifecycle.py).
    COMPLETED = "completed"
    REOPENED = "reopened"
    COMPLETED_SKIPPED = "completed_skipped"  # a published occurrence claimed after completion
    # A one-off removed by retention after its delete_after.
    EXPIRED = "expired"
    # The beat's decisions.
    HELD_CONCURRENCY = "held_concurrency"
    HELD_CAPACITY = "held_capacity"
    HELD_KEY = "held_key"
    KEY_SKIPPED = "key_skipped"
    QUOTA_EXHAUSTED = "quota_exhausted"
    MISFIRE_SKIPPED = "misfire_skipped"
    PAUSED_SKIPPED = "paused_skipped"
    # Pre-staged occurrences withdrawn by an edit or a pause before they were
    # published, to be planned again from the schedule's new definition.
    REPLANNED = "replanned"
    # An attempt's life, written by the worker (and the lease sweep).
    CLAIMED = "claimed"
    ATTEMPT_STARTED = "attempt_started"
    ATTEMPT_SUCCEEDED = "attempt_succeeded"
    ATTEMPT_FAILED = "attempt_failed"
    RETRY_SCHEDULED = "retry_scheduled"
    TIMED_OUT = "timed_out"
    DEAD = "dead"
    HELD_RATE_LIMIT = "held_rate_limit"
    CANCELLED = "cancelled"
    CANCELLED_STOP = "cancelled_stop"
    DELIVERY_IGNORED = "delivery_ignored"
    FENCING_REJECTED = "fencing_rejected"
    # Async completion (dispatch/completion.py): the hand-off, the target's heartbeats
    # (one entry per attempt, updated), and a callback refused for a stale attempt.
    AWAITING_COMPLETION = "awaiting_completion"
    TARGET_HEARTBEAT = "target_heartbeat"
    COMPLETION_REJECTED = "completion_rejected"
    # An ended attempt's live log, kept with the execution when the attempt ended
    # (dispatch/services/logs.py): `data.lines` holds [cursor, at, stream, text] per
    # line. Not shown on the timeline; read through the log endpoints.
    ATTEMPT_LOG = "attempt_log"
    # The execution's alerts (dispatch/alerting): sent, given up, or held.
    ALERT_SENT = "alert_sent"
    ALERT_FAILED = "alert_failed"
    ALERT_HELD = "alert_held"  # held by a maintenance window, summarised when it ends
    # Run control (dispatch/services/runs.py, backfills.py, bulk.py): a user's
    # re-run of a final execution starts a new attempt chain of the same row.
    RERUN = "rerun"
    BACKFILLED = "backfilled"


# Held back by a limit at admission or at claim time; not started.
HELD_EVENT_KINDS = frozenset(
    {
        EventKind.HELD_CONCURRENCY,
        EventKind.HELD_CAPACITY,
        EventKind.HELD_KEY,
        EventKind.HELD_RATE_LIMIT,
    }
)
# The end of an attempt, as the timeline records it.
ATTEMPT_END_EVENT_KINDS = frozenset(
    {EventKind.ATTEMPT_SUCCEEDED, EventKind.ATTEMPT_FAILED, EventKind.DEAD, EventKind.TIMED_OUT}
)
# Records kept with an execution's events that are not steps of its timeline (the
# timeline, the explainer and the API's events leave them out).
OFF_TIMELINE_EVENT_KINDS = frozenset({EventKind.ATTEMPT_LOG})
# A run stopped or not started because it was cancelled.
CANCEL_EVENT_KINDS = frozenset({EventKind.CANCELLED, EventKind.CANCELLED_STOP})


def kind_values(kinds: frozenset[EventKind]) -> list[str]:
    """An event-kind set as plain strings, for queries and SQL parameters."""
    return sorted(str(kind.value) for kind in kinds)


class ReasonCode(models.TextChoices):
    """`Execution.reason_code` of the scheduling decisions (why a run was skipped,
    held or cancelled). A failed attempt's code comes from its target and is open
    (`http_503`, `exit_2`, `timeout`, `dns`, ...); those are not listed here."""

    MISFIRE = "misfire"
    PAUSED = "paused"
    OVERLAP_FORBID = "overlap_forbid"
    UPSTREAM = "upstream"
    QUOTA_EXHAUSTED = "quota_exhausted"
    REPLACED = "replaced"
    SCHEDULE_DELETED = "schedule_deleted"
    # A timed occurrence published before its schedule completed (max_runs), claimed after.
    SCHEDULE_COMPLETED = "schedule_completed"

    TENANT_INACTIVE = "tenant_inactive"
    HELD_CONCURRENCY = "held_concurrency"
    HELD_CAPACITY = "held_capacity"
    HELD_RATE_LIMIT = "held_rate_limit"
    # Keyed concurrency (dispatch/concurrency_keys.py): held, skipped, or cancelled to
    # make room ("replaced by ... (key ...)").
    HELD_KEY = "held_key"
    KEY_SKIPPED = "key_skipped"
    KEY_REPLACED = "key_replaced"
    # Cancelled by a user or a bulk operation (who and why: the `cancelled` event).
    CANCELLED_BY_USER = "cancelled_by_user"


class ExplainCode(models.TextChoices):
    """What the explainer answers (`Explanation.code`), with its meaning as the label.

    A service reading only the code can tell every outcome apart; the sentence
    adds the detail. The API documents these as an enum.
    """

    RAN = "ran", "the occurrence ran and succeeded"
    RUNNING = "running", "the occurrence is running now"
    RETRYING = "retrying", "an attempt failed; another attempt is scheduled"
    FAILED = "failed", "the occurrence ran and failed (no retry left for this failure)"
    TIMED_OUT = "timed_out", "the occurrence ran and was stopped at its timeout"
    DEAD = "dead", "the occurrence failed on every allowed attempt"
    PENDING = (
        "pending",
        "not due yet, or due and not yet started (scheduled, queued, beat behind)",
    )
    HELD = (
        "held",
        "held back by a concurrency, capacity or rate limit; not started yet "
        "(once it starts, the code is its outcome and the sentence tells the wait)",
    )
    NOT_AN_OCCURRENCE = "not_an_occurrence", "the schedule has no occurrence at that time"
    DST_SHIFTED = (
        "dst_shifted",
        "that wall time was moved by a DST change; the answer is about the moved run",
    )
    PAUSED = "paused", "the schedule was (or is) paused at that time"
    EXCLUDED_BY_CALENDAR = (
        "excluded_by_calendar",
        "an occurrence of the expression on a date one of the schedule's calendars excludes",
    )
    NOT_CREATED_YET = "not_created_yet", "the schedule did not exist yet"
    ARCHIVED = (
        "archived",
        "that day of history was archived to object storage and left the database",
    )
    DELETED = "deleted", "the schedule had been deleted"
    COMPLETED = (
        "completed",
        "the schedule was completed (reached its max_runs, or its end_at passed): no timed runs",
    )
    SKIPPED_MISFIRE = (
        "skipped_misfire",
        "skipped by the misfire policy (the scheduler reached it too late)",
    )
    SKIPPED_OVERLAP = (
        "skipped_overlap",
        "skipped: the previous run was still active (overlap forbid)",
    )
    SKIPPED_UPSTREAM = "skipped_upstream", "skipped: an upstream schedule did not succeed"
    SKIPPED_KEY = (
        "skipped_key",
        "skipped: its concurrency key already had `limit` active runs (on_conflict skip)",
    )
    SKIPPED_QUOTA = (
        "skipped_quota",
        "skipped: the tenant was over its executions-per-day quota",
    )
    SKIPPED = "skipped", "skipped for another recorded reason (the sentence names it)"
    CANCELLED = "cancelled", "the run was cancelled (replaced, or by the platform)"
    MISSING = (
        "missing",
        "no record at all: the scheduler never fired it (report to operators)",
    )


class AuditAction(models.TextChoices):
    """`AuditEvent.action` of the writes to a schedule or job (object_type "schedule")."""

    SCHEDULE_CREATE = "schedule.create"
    SCHEDULE_UPDATE = "schedule.update"
    SCHEDULE_DELETE = "schedule.delete"
    SCHEDULE_PAUSE = "schedule.pause"
    SCHEDULE_PAUSE_UPDATE = "schedule.pause_update"
    SCHEDULE_RESUME = "schedule.resume"
    SCHEDULE_TRIGGER = "schedule.trigger"
    JOB_CREATE = "job.create"
    JOB_EXPIRE = "job.expire"  # removed by retention after its delete_after
    # Run control (object_type "execution", "backfill", "operation").
    EXECUTION_CANCEL = "execution.cancel"
    EXECUTION_RERUN = "execution.rerun"
    BACKFILL_CREATE = "backfill.create"
    BACKFILL_CANCEL = "backfill.cancel"
    OPERATION_CREATE = "operation.create"
    OPERATION_CANCEL = "operation.cancel"
    # Alert channels (object_type "alert_channel"; admins only).
    ALERT_CHANNEL_CREATE = "alert_channel.create"
    ALERT_CHANNEL_UPDATE = "alert_channel.update"
    ALERT_CHANNEL_DELETE = "alert_channel.delete"
    ALERT_CHANNEL_TEST = "alert_channel.test"
    # Alert policies (object_type "alert_policy": the tenant's default, object_id "default",
    # or a schedule's override, object_id the schedule) and a schedule's alert snooze.
    ALERT_POLICY_SET = "alert_policy.set"
    ALERT_POLICY_DELETE = "alert_policy.delete"
    SCHEDULE_SNOOZE = "schedule.snooze"
    # Maintenance windows (object_type "maintenance_window").
    MAINTENANCE_WINDOW_CREATE = "maintenance_window.create"
    MAINTENANCE_WINDOW_DELETE = "maintenance_window.delete"
    # Calendars (object_type "calendar").
    CALENDAR_CREATE = "calendar.create"
    CALENDAR_UPDATE = "calendar.update"
    CALENDAR_DELETE = "calendar.delete"


class ChannelKind(models.TextChoices):
    """Where an alert channel delivers (dispatch/alerting)."""

    EMAIL = "email"
    SLACK = "slack"  # Slack-compatible incoming webhook: {"text": ...} (Mattermost, Teams too)
    WEBHOOK = "webhook"  # the generic webhook: a JSON event signed with the tenant's key


class AlertKind(models.TextChoices):
    """What an alert (dispatch.models.Alert) says happened."""

    FAILURE = "failure"  # the Nth consecutive dead/timed_out occurrence (or a re-alert)
    RECOVERY = "recovery"  # the first success after a failure alert
    AUTO_PAUSED = "auto_paused"  # the circuit breaker paused the schedule
    LATE = "late"  # not started within late_after_s of its due time, or running past max_duration_s
    # Occurrences found beyond their misfire grace (no beat was firing): one per outage
    MISSED = "missed"


class AlertState(models.TextChoices):
    """An alert in the outbox: waiting for (another) delivery attempt, delivered, given up."""

    PENDING = "pending"
    SENT = "sent"
    FAILED = "failed"


# Who the circuit breaker pauses a schedule as (`paused_by`, written by
# dispatch/sql/alerts.sql): how the console and the health selectors tell an
# auto-pause from a person's.
AUTO_PAUSE_ACTOR = "alerts (auto-pause)"


class EventData:
    """Keys of `ExecutionEvent.data` that link an event to other records by id.

    The writer that knows the fact stores it; readers follow the id, never the
    event's message or a nearby timestamp.
    """

    # The audit row written in the same transaction (pause, resume, trigger, ...).
    AUDIT_ID = "audit_id"
    # The execution this decision was about: the run still active that made an
    # overlap-forbid skip, or the newer run that replaced a cancelled one.
    RELATED_EXECUTION_ID = "related_execution_id"
    # On a manual trigger under overlap `replace`: the active runs it cancelled.
    REPLACED_EXECUTION_IDS = "replaced_execution_ids"
    # Run control: the backfill or bulk operation an item's write belongs to.
    BACKFILL_ID = "backfill_id"
    OPERATION_ID = "operation_id"
    # On a `replanned` event: the staged occurrences (scheduled_for, ISO) withdrawn.
    WITHDRAWN = "withdrawn"


# --- Run control: backfills and bulk operations ------------------------------------


class ControlState(models.TextChoices):
    """A backfill's or a bulk operation's life: running until every item is done,
    or cancelled (items not reached yet are left alone)."""

    RUNNING = "running"
    DONE = "done"
    CANCELLED = "cancelled"


class Reprocess(models.TextChoices):
    """What a backfill does with an occurrence that already has an execution."""

    NONE = "none"  # leave it (skip-existing)
    FAILED = "failed"  # re-run it if it ended dead / skipped / cancelled
    ALL = "all"  # re-run it whatever its final state


class BackfillOrder(models.TextChoices):
    OLDEST = "oldest"
    NEWEST = "newest"


class BackfillAction(models.TextChoices):
    """What a backfill (or its dry run) does with each occurrence of the range."""

    CREATE = "create", "no execution exists: one is created (trigger backfill)"
    SKIP_EXISTING = "skip-existing", "an execution exists and is left as it is"
    RERUN = "rerun", "an execution exists and is re-run"
    SKIP_PAUSED_TIME = "skip-paused-time", "the schedule was paused then; not run"
    SKIP_ACTIVE = "skip-active", "an execution exists and is still active"


class ItemStatus(models.TextChoices):
    """One item of a bulk operation."""

    PENDING = "pending"
    OK = "ok"
    NOT_FOUND = "not_found"  # not this tenant's (or no such id): nothing touched
    CONFLICT = "conflict"  # the object's state does not allow the action
    INVALID = "invalid"
    ERROR = "error"
    CANCELLED = "cancelled"  # the operation was cancelled before this item
