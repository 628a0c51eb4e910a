"""The completion callbacks of a handed-off attempt (dispatch/completion.py):
`:heartbeat`, `:succeed` and `:fail`, each under the attempt's capability.

A callback for an attempt that is no longer current (cancelled, timed out, swept,
re-run: its fencing token moved on) changes nothing: it is refused with 409 and
recorded on the execution's timeline as `completion_rejected`, as a stale worker's
finish is recorded as `fencing_rejected`. An ending is recorded by the worker's own
rule (runner.record_outcome): the retry policy, dependents, alerts and max_runs
counting apply to it exactly as to a worker's finish.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from core.db import db_now
from dispatch import completion, logs
from dispatch.exceptions import StateConflict
from dispatch.history.ids import occurrence_bounds
from dispatch.sql import sql
from dispatch.states import EventKind, ExecutionState
from dispatch.targets.runtime import Outcome, clip
from dispatch.worker import leases, runner
from dispatch.worker.leases import Claim

# The actor of the timeline entries a callback writes.
ACTOR = "target callback"


@dataclass(frozen=True)
class Beat:
    lease_expires_at: datetime
    deadline: datetime


def _current(cap: completion.Capability) -> tuple[Claim, Any]:
    """The capability's attempt as a Claim (what recording its end needs), if it is
    still the running attempt at the capability's token; else StateConflict (409),
    recorded. Also 409 when the row is gone (completion.verify vouched for the id, so
    it existed: its day has been archived since)."""
    row = sql.one(
        "completion_attempt", {"id": cap.execution_id} | occurrence_bounds(cap.execution_id)
    )
    if row is None:
        raise StateConflict("the execution is no longer in the database; nothing to complete")
    if (
        row.state != ExecutionState.RUNNING
        or row.attempt != cap.attempt
        or row.fencing_token != cap.fencing_token
    ):
        message = (
            f"attempt {cap.attempt} (token {cap.fencing_token}) is no longer current: the "
            f"execution is at attempt {row.attempt}, token {row.fencing_token} ({row.state})"
        )
        leases.event_add(
            execution_id=cap.execution_id,
            tenant_id=row.tenant_id,
            schedule_id=str(row.schedule_id),
            kind=EventKind.COMPLETION_REJECTED,
            message=f"a completion callback was refused: {message}",
            data={
                "attempt": cap.attempt,
                "token": cap.fencing_token,
                "current_attempt": row.attempt,
                "current_token": row.fencing_token,
                "current_state": row.state,
            },
            actor=ACTOR,
        )
        raise StateConflict(message)
    return leases.claim_from_row(row, owner=ACTOR), row


def completion_heartbeat(
    *, cap: completion.Capability, progress: float | None, message: str, lines: list[str]
) -> Beat:
    """The lease runs the target's heartbeat_s more (never past the deadline); `lines`
    go to the attempt's live log (dispatch/logs.py)."""
    claim, row = _current(cap)
    data: dict[str, Any] = {"attempt": cap.attempt}
    if progress is not None:
        data["progress"] = progress
    if message:
        data["last_message"] = message
    shown = f"the target is working on attempt {cap.attempt - claim.attempt_base}"
    if progress is not None:
        shown += f" ({progress:g} %)"
    beat = sql.one(
        "completion_heartbeat",
        {
            "id": cap.execution_id,
            "scheduled_for": claim.scheduled_for,
            "attempt": cap.attempt,
            "token": cap.fencing_token,
            "heartbeat_s": completion.heartbeat_s(claim.target),
            "timeout_s": claim.timeout_s,
            "since": row.started_at or "-infinity",
            "message": clip(f"{shown}: {message}" if message else shown),
            "data": json.dumps(data),
            "actor": ACTOR,
        },
    )
    if beat is None:  # it ended or moved on between the read and the update
        raise StateConflict("the attempt ended while its heartbeat was recorded")
    logs.append(cap.execution_id, cap.attempt, "target", lines, fencing_token=cap.fencing_token)
    # A running row has its start (the claim set it); the deadline counts from it.
    started = row.started_at or beat.lease_expires_at
    return Beat(
        lease_expires_at=beat.lease_expires_at,
        deadline=started + timedelta(seconds=claim.timeout_s),
    )


def completion_finish(
    *, cap: completion.Capability, ok: bool, output: Any, message: str, retryable: bool
) -> str:
    """End the attempt as the target says: succeeded (with its output value), or
    failed (retried by the schedule's policy when `retryable`). The state it is in now."""
    claim, row = _current(cap)
    excerpt = message or ("" if output is None else json.dumps(output, default=str))
    latency_ms = int((db_now() - (row.started_at or db_now())).total_seconds() * 1000)
    data: dict[str, Any] = {"completed_by": "callback"}
    if output is not None:
        data["output"] = output
    outcome = (
        Outcome.success(excerpt=excerpt, latency_ms=latency_ms, data=data, output=output)
        if ok
        else Outcome.failure(
            message,
            retryable=retryable,
            reason_code="target_failed",
            latency_ms=latency_ms,
            data=data,
            output=output,
        )
    )
    result = runner.record_outcome(claim, None, outcome)
    if result == "fenced":
        # It ended or moved on between the read and the finish (recorded there as
        # fencing_rejected, as a stale worker's finish is).
        raise StateConflict("the attempt ended while its completion was recorded")
    return result
