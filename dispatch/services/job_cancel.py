"""Cancel a one-off job that has not started (DELETE /v1/jobs/{id}).

"Not started" means no attempt can have reached the target: the beat has not
made its execution yet, or made it and it is `scheduled` (waiting for its due
time) or `queued` (published, not claimed by a worker; the cancel bumps its
fencing token, so a worker that takes the message finds nothing to claim).
Running, waiting for a retry (an attempt already ran) or finished is a 409
naming the state: a running job is stopped with the execution's own cancel.
"""

from __future__ import annotations

import uuid

from django.db import transaction

from dispatch.exceptions import NotFound, StateConflict
from dispatch.models import Execution, ExecutionState, Kind, Schedule
from dispatch.services.common import live_schedule
from dispatch.services.schedules import schedule_delete
from tenants.roles import Principal

NOT_STARTED = frozenset({ExecutionState.SCHEDULED, ExecutionState.QUEUED})


@transaction.atomic
def job_cancel(
    *, actor: Principal, job_id: uuid.UUID | str, reason: str = ""
) -> tuple[Schedule, Execution | None]:
    """Delete the job and cancel its execution if it has one; (job, its latest execution)."""
    # The job's row lock keeps the beat from firing it meanwhile (it claims due
    # one-offs FOR UPDATE SKIP LOCKED): what is checked below is what is cancelled.
    job = live_schedule(actor, job_id)
    if job.kind != Kind.ONCE:
        raise NotFound("job not found")
    executions = list(Execution.objects.filter(schedule=job).order_by("-scheduled_for", "-id"))
    for execution in executions:
        if execution.state not in NOT_STARTED:
            raise StateConflict(
                f"job's execution is {execution.state}; only a job that has not started "
                "(no execution yet, or scheduled or queued) can be cancelled",
                detail={"state": [str(execution.state)]},
            )
    # Imported here: runs imports the scheduler's dependencies module, which imports the
    # services package (half-initialised while it imports this module).
    from dispatch.services.runs import execution_cancel

    why = reason or "job cancelled"
    for execution in executions:
        execution_cancel(actor=actor, execution_id=execution.id, reason=why)
    schedule_delete(actor=actor, schedule_id=job.id)
    job.refresh_from_db()
    latest = executions[0] if executions else None
    if latest is not None:
        latest.refresh_from_db()
    return job, latest
