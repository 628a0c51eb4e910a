"""The platform's vocabulary: execution states, triggers and the state sets.

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
