"""Execution leases: claim, heartbeat, fenced completion (failure contract C2, C3, C6:
docs/explanation/failure-contract.md).

The broker is transport, the database is truth (C7): a message only names an
(execution, attempt); whether it runs is decided here by one conditional
UPDATE. Every later write is conditional on the fencing token the claim
returned, so a worker that lost its lease — swept after a pause, cancelled by
an overlap `replace` — changes nothing; its attempt to is recorded as a
`fencing_rejected` event, never applied.

All statements are named queries in dispatch/sql/worker.sql; each is one
round trip that also writes the matching timeline events. A call shorter than
a third of the lease costs two: the claim (with `claimed` and `attempt_started`)
and the fenced finish (with its events), in autocommit.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, transaction

from dispatch import completion
from dispatch.alerting import decision
from dispatch.history.ids import occurrence_bounds
from dispatch.scheduler import dependencies
from dispatch.sql import sql
from dispatch.states import FINAL_STATES, ExecutionState
from dispatch.targets import KINDS
from dispatch.targets.runtime import clip

log = logging.getLogger("dispatch.worker")


@dataclass(frozen=True)
class Claim:
    """A claimed attempt: everything the runner needs, read in the claim's round trip."""

    execution_id: str
    attempt: int
    fencing_token: int
    scheduled_for: datetime
    schedule_id: str
    schedule_name: str
    target: dict[str, Any]
    retry: dict[str, Any]
    timeout_s: int
    schedule_deleted: bool
    tenant_id: int
    tenant_slug: str
    signing_key: str
    egress_allow: list[str]
    tenant_active: bool
    owner: str
    # The attempt the current chain started after: 0, or the attempt a re-run
    # continued from. Retries count `attempt - attempt_base` against the policy.
    attempt_base: int = 0
    # How many times a person (or a backfill) re-ran this occurrence: the target
    # sees run = reruns + 1 (X-Run), so it can tell a deliberate re-run from a duplicate.
    reruns: int = 0
    # Read at claim time: whether finishing must also fire or skip dependents. A
    # dependent created while this attempt runs takes its first occurrence from
    # the upstream's next run, as it would had it been created a moment later.
    has_dependents: bool = True
    # Read at claim time: the schedule has a failure alert not yet followed by a
    # recovery, so a success must decide one (dispatch/alerting/decision.py).
    alert_failing: bool = False
    # The claim wrote `attempt_started` too (it will be run: schedule live, tenant
    # active, a known target type), so the runner writes no event before the call.
    started: bool = False
    # max_runs (dispatch/lifecycle.py), read at claim time: the schedule counts its
    # successes, this occurrence has been counted already (a re-run of a success), and
    # this timed occurrence was published before the schedule completed (not run).
    counts_runs: bool = False
    counted: bool = False
    schedule_completed: bool = False
    max_runs: int | None = None
    # time.monotonic() just before the claim was sent: the server set the lease
    # after that, so it is certain until claimed_at + lease_s (the lease check's rule).
    claimed_at: float = 0.0


@dataclass(frozen=True)
class Peek:
    """The row a message named, as it is now (for messages that claimed nothing)."""

    state: str
    attempt: int
    fencing_token: int
    lease_owner: str
    due_in_s: float
    tenant_id: int
    schedule_id: str


@dataclass(frozen=True)
class Event:
    kind: str
    message: str
    data: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": clip(self.message), "data": self.data}


def _json(value: Any, default: Any) -> Any:
    # Django's psycopg setup leaves jsonb undecoded (str) outside the ORM.
    if value is None:
        return default
    return json.loads(value) if isinstance(value, (str, bytes)) else value


def worker_id() -> str:
    """This process's name in leases and events: WORKER_ID (default hostname) + pid.

    The pid is read per call: prefork pool children share the parent's
    settings, and each child holds its own leases.
    """
    return f"{settings.WORKER_ID or socket.gethostname()}:{os.getpid()}"


# The target types this worker can run: the claim writes `attempt_started` only for these.
KNOWN_KINDS = sorted(KINDS)


def execution_claim(*, execution_id: str, attempt: int, owner: str, lease_s: float) -> Claim | None:
    """Claim `attempt` of an execution for `owner`, or None when that attempt is not claimable.

    Claimable means: state scheduled/queued/retry_scheduled, the row's attempt is
    the message's, and it is due by the database clock. The row becomes
    `running` with a lease and a bumped fencing token; `claimed` is recorded, and
    `attempt_started` when the attempt will be run (`Claim.started`).
    """
    sent = time.monotonic()
    # Every execution id is made from its scheduled_for (dispatch/history/ids.py); one
    # from before that (a random id) is looked for in every partition.
    row = sql.one(
        "claim_execution",
        {
            "id": execution_id,
            "attempt": attempt,
            "owner": owner,
            "lease_s": lease_s,
            "kinds": KNOWN_KINDS,
        }
        | occurrence_bounds(execution_id),
    )
    if row is None:
        return None
    return claim_from_row(row, owner=owner, claimed_at=sent)


def claim_from_row(row: Any, *, owner: str, claimed_at: float = 0.0) -> Claim:
    """A Claim from a row with the claim's columns (claim_execution's, and
    completion_attempt's for a completion callback, which finishes as a claim would)."""
    return Claim(
        execution_id=str(row.execution_id),
        attempt=row.attempt,
        fencing_token=row.fencing_token,
        scheduled_for=row.scheduled_for,
        schedule_id=str(row.schedule_id),
        schedule_name=row.schedule_name,
        target=_json(row.target, {}),
        retry=_json(row.retry, {}),
        timeout_s=row.timeout_s,
        schedule_deleted=row.schedule_deleted,
        tenant_id=row.tenant_id,
        tenant_slug=row.tenant_slug,
        signing_key=row.signing_key,
        egress_allow=list(_json(row.egress_allow, [])),
        tenant_active=row.tenant_active,
        owner=owner,
        attempt_base=row.attempt_base,
        reruns=row.reruns,
        has_dependents=row.has_dependents,
        alert_failing=row.alert_failing,
        started=row.started,
        counts_runs=row.counts_runs,
        counted=row.counted,
        schedule_completed=row.schedule_completed,
        max_runs=row.max_runs,
        claimed_at=claimed_at,
    )


def execution_peek(*, execution_id: str) -> Peek | None:
    """The current row of an execution (None when it does not exist)."""
    row = sql.one("peek_execution", {"id": execution_id})
    if row is None:
        return None
    return Peek(
        state=row.state,
        attempt=row.attempt,
        fencing_token=row.fencing_token,
        lease_owner=row.lease_owner,
        due_in_s=float(row.due_in_s or 0.0),
        tenant_id=row.tenant_id,
        schedule_id=str(row.schedule_id),
    )


def lease_heartbeat(*, claim: Claim, lease_s: float) -> bool:
    """Extend the lease; False means the token is no longer current: stop, record nothing."""
    extended = sql.one(
        "heartbeat",
        {
            "id": claim.execution_id,
            "scheduled_for": claim.scheduled_for,
            "token": claim.fencing_token,
            "lease_s": lease_s,
        },
    )
    return extended is not None


def event_add(
    *,
    execution_id: str,
    tenant_id: int,
    schedule_id: str,
    kind: str,
    message: str,
    data: dict[str, Any] | None = None,
    actor: str,
) -> None:
    """Append one event to an execution's timeline."""
    sql.one(
        "insert_event",
        {
            "id": execution_id,
            "tenant_id": tenant_id,
            "schedule_id": schedule_id,
            "kind": kind,
            "message": clip(message),
            "data": json.dumps(data or {}, default=str),
            "actor": actor,
        },
    )


def attempt_finish(
    *,
    claim: Claim,
    state: str,
    events: Sequence[Event],
    attempt_inc: int = 0,
    delay_s: float = 0.0,
    status_code: int | None = None,
    exit_code: int | None = None,
    error: str = "",
    log_excerpt: str = "",
    reason_code: str = "",
    reason: str = "",
    output: Any = None,
    after_commit: Callable[[], None] | None = None,
) -> bool:
    """End the claimed attempt in `state` with its events, only under the claim's token.

    Returns False (and changes nothing) when the token is no longer current;
    the caller records that with `fencing_rejected`. `after_commit` runs only
    if the change was applied and committed (e.g. the dead-execution notice).
    """
    propagate = claim.has_dependents and state in FINAL_STATES
    # A death may owe a failure alert, a success after a failure alert a recovery:
    # the decision commits with the state change (the alert outbox).
    alerting = state == ExecutionState.DEAD or (
        state == ExecutionState.SUCCEEDED and claim.alert_failing
    )
    # One statement in autocommit when nothing else must commit with it (the
    # common case): no BEGIN/COMMIT round trips on the worker's hot path.
    with transaction.atomic() if propagate or alerting else contextlib.nullcontext():
        done = sql.one(
            "finish_attempt",
            {
                "id": claim.execution_id,
                "scheduled_for": claim.scheduled_for,
                "token": claim.fencing_token,
                "state": state,
                "attempt_inc": attempt_inc,
                "delay_s": max(0.0, delay_s),
                "status_code": status_code,
                "exit_code": exit_code,
                "error": error.replace("\x00", ""),
                "log_excerpt": log_excerpt.replace("\x00", ""),
                "output": None if output is None else json.dumps(output, default=str),
                "reason_code": reason_code[:40],
                "reason": clip(reason, 500),
                "events": json.dumps([e.as_json() for e in events], default=str),
                "actor": claim.owner,
                # Only schedules with a max_runs pay for counting (issue 19's budget).
                "count": (
                    state == ExecutionState.SUCCEEDED and claim.counts_runs and not claim.counted
                ),
            },
        )
        applied = done is not None
        if applied and propagate:
            # Same transaction: a dependent's occurrence exists iff the upstream's outcome does.
            dependencies.propagate(execution_ids=[claim.execution_id])
        if applied and alerting:
            decision.decide(execution_ids=[claim.execution_id])
        if applied and after_commit is not None:
            # In autocommit on_commit runs at once: the statement has committed.
            transaction.on_commit(after_commit)
    return applied


def attempt_await(
    *, claim: Claim, heartbeat_s: int, status_code: int | None, log_excerpt: str, event: Event
) -> bool:
    """Leave the claimed attempt running, held by its target until it calls back
    (dispatch/completion.py); False when the token is no longer current."""
    held = sql.one(
        "await_completion",
        {
            "id": claim.execution_id,
            "scheduled_for": claim.scheduled_for,
            "token": claim.fencing_token,
            "owner": f"{completion.OWNER_PREFIX}{claim.owner}",
            "heartbeat_s": heartbeat_s,
            "timeout_s": claim.timeout_s,
            "status_code": status_code,
            "log_excerpt": log_excerpt.replace("\x00", ""),
            "message": clip(event.message),
            "data": json.dumps(event.data, default=str),
            "actor": claim.owner,
        },
    )
    return held is not None


def rate_limit_hold(*, claim: Claim, delay_s: float, message: str, data: dict[str, Any]) -> bool:
    """Hand the claimed attempt back until its rate-limit slot, not consumed.

    One statement: the row goes back to retry_scheduled at the slot, and the
    execution's single `held_rate_limit` timeline entry is written or has its
    count bumped. False when the token is no longer current.
    """
    held = sql.one(
        "hold_rate_limit",
        {
            "id": claim.execution_id,
            "scheduled_for": claim.scheduled_for,
            "token": claim.fencing_token,
            "delay_s": max(0.0, delay_s),
            "attempt": claim.attempt,
            "reason": clip(message, 500),
            "message": message,
            "data": json.dumps(data, default=str),
            "actor": claim.owner,
        },
    )
    return held is not None


def fencing_rejected(
    *, claim: Claim, what: str, data: dict[str, Any] | None = None, kind: str = "fencing_rejected"
) -> tuple[int, str] | None:
    """Record that this worker's `what` (heartbeat / completion) was refused by the token check.

    Returns the row's current (token, state), or None if the row is gone.
    """
    payload = {"worker": claim.owner, "token": claim.fencing_token, "attempt": claim.attempt}
    row = sql.one(
        "record_fencing_rejected",
        {
            "id": claim.execution_id,
            "scheduled_for": claim.scheduled_for,
            "kind": kind,
            "owner": claim.owner,
            "what": what,
            "token": claim.fencing_token,
            "data": json.dumps(payload | (data or {}), default=str),
        },
    )
    return (int(row.current_token), str(row.current_state)) if row else None


# The connection failed, not the statement (Django's wrapped errors, and psycopg's
# own from the named-statement runner): a fresh connection may well succeed.
CONNECTION_ERRORS = (
    OperationalError,
    InterfaceError,
    psycopg.OperationalError,
    psycopg.InterfaceError,
)
FINISH_RETRY_PAUSE_S = (0.2, 2.0)  # first pause between tries, longest pause


def lease_fresh(*, since: float, lease_s: float) -> bool:
    """Whether a lease set by a statement sent at `since` (monotonic) still has a third
    of its term left: the server set it between sending and the reply, so it is
    certain only until since + lease_s. Past two thirds of that, too little is left
    to cover the call's connect and send, and the sweeper may be about to take the
    execution over (a reply held up by a stalled link: the chaos suite's black hole).
    """
    return time.monotonic() - since < lease_s * 2 / 3


def lease_check(*, claim: Claim, lease_s: float) -> bool:
    """Right before the call: True when the claim's lease is still ours for long enough.

    The claim is the check when its reply came back in time (`lease_fresh` from
    `claimed_at`): it set the lease itself, and nobody else can take an unexpired
    lease, so no round trip is spent (issue 19: a fast call costs the claim and the
    finish only). A cancel that lands in between — at most a rate-limit wait in
    place, min(RATE_LIMIT_INLINE_S, lease/3), and one Redis reply — is not seen
    here: the call is made and its completion refused by the token check, recorded
    as `fencing_rejected`, as for a cancel during the call
    (docs/explanation/delivery-contract.md, "No call under a revoked lease, but for
    one window"). Checking only after a wait would let a job that did not wait
    overtake one that did by that round trip, and the host's slots are first come,
    first served.

    Otherwise one statement confirms the token is current and the lease unexpired
    by the database clock, renewing it for a full term, and its reply must obey
    the same two-thirds rule. False means another claim or the sweeper has taken
    the execution over (or is about to): the call must not be made.
    """
    if lease_fresh(since=claim.claimed_at, lease_s=lease_s):
        return True
    sent = time.monotonic()
    renewed = (
        sql.execute(
            "lease_check",
            {
                "id": claim.execution_id,
                "scheduled_for": claim.scheduled_for,
                "token": claim.fencing_token,
                "lease_s": lease_s,
            },
        )
        == 1
    )
    return renewed and lease_fresh(since=sent, lease_s=lease_s)


def attempt_finish_retrying(
    *,
    claim: Claim,
    state: str,
    attempt_inc: int = 0,
    after_commit: Callable[[], None] | None = None,
    **fields: Any,
) -> bool:
    """`attempt_finish`, retried on a fresh connection for up to FINISH_RETRY_S.

    A completion lost to a database blip would otherwise leave the row
    `running` until its lease lapses, and the job would run again. Retrying is
    safe: the write is conditional on the claim's token. A try whose reply was
    lost may have committed, so when a retry matches no row, the row as it is
    now tells the two cases apart (`finish_landed`).
    """
    deadline = time.monotonic() + float(settings.FINISH_RETRY_S)
    pause, longest = FINISH_RETRY_PAUSE_S
    uncertain = False
    while True:
        try:
            applied = attempt_finish(
                claim=claim,
                state=state,
                attempt_inc=attempt_inc,
                after_commit=after_commit,
                **fields,
            )
        except CONNECTION_ERRORS as exc:
            if time.monotonic() + pause > deadline:
                log.error(
                    "execution %s: recording %s failed for %s s, giving up: %s",
                    claim.execution_id,
                    state,
                    settings.FINISH_RETRY_S,
                    exc,
                )
                raise
            log.warning(
                "execution %s: recording %s failed (%s); retrying on a fresh connection",
                claim.execution_id,
                state,
                exc,
            )
            uncertain = True
            connection.close()
            time.sleep(pause)
            pause = min(pause * 2, longest)
            continue
        if applied or not uncertain:
            return applied
        return finish_landed(
            claim=claim, state=state, attempt_inc=attempt_inc, after_commit=after_commit
        )


def finish_landed(
    *,
    claim: Claim,
    state: str,
    attempt_inc: int,
    after_commit: Callable[[], None] | None = None,
) -> bool:
    """Whether an earlier try of this finish committed although its reply was lost.

    Only this finish leaves the row in `state` at `attempt + attempt_inc` with the
    claim's token unchanged: the sweeper and cancellations bump the token.
    `after_commit` then runs here, its try having never reached it.
    """
    peek = execution_peek(execution_id=claim.execution_id)
    landed = (
        peek is not None
        and peek.fencing_token == claim.fencing_token
        and peek.state == state
        and peek.attempt == claim.attempt + attempt_inc
    )
    if landed and after_commit is not None:
        after_commit()
    return landed
