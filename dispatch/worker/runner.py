"""Runs one execution named by a broker message: claim, heartbeat, call, record.

The message is never trusted over the row (failure contract C7:
docs/explanation/failure-contract.md): it only names
(execution_id, attempt). The claim decides; a message that claims nothing
(duplicate, stale, early, orphan) is counted, logged and acknowledged.

Round trips (issue 19): the claim (writing `claimed` and `attempt_started`) and
the fenced finish (with its events) — two for a call shorter than a third of
the lease. The claim doubles as the lease check before the call when its reply
came back within two thirds of the lease (leases.lease_check).

While the target runs, a heartbeat thread extends the lease every third of it
(counted from the claim) and enforces the attempt's deadline. If a heartbeat finds the token gone
(the sweeper took the execution over, or an overlap `replace` cancelled it),
the attempt is stopped at once — HTTP socket shut, process group killed —
and its result is never applied, only recorded as rejected.

A user's cancel (dispatch/services/runs.py) is such a token bump. Stop bound:
a cancelled attempt is stopped within EXECUTION_LEASE_S / 3 (the heartbeat
interval; 10 s at the default 30 s lease) plus one heartbeat round trip plus,
for a command that ignores SIGTERM, command.KILL_GRACE_S before SIGKILL. Its
end is recorded as `cancelled_stop`; a completion that raced the cancel and
arrived before the heartbeat noticed is refused by the token check and
recorded as `fencing_rejected` (completion). Either way the call may already
have reached the target.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from types import ModuleType
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection

from config import telemetry
from config.logs import log_context
from core import faults
from core.db import unavailable_reason, wait_for_writable
from dispatch import completion, logs
from dispatch.identity import tokens as identity_tokens
from dispatch.identity.keys import KeyUnavailable
from dispatch.services import logs as attempt_logs
from dispatch.states import CLAIMABLE_STATES, FINAL_STATES, EventKind, ExecutionState, ReasonCode
from dispatch.targets import KINDS
from dispatch.targets.runtime import (
    Aborted,
    Outcome,
    RunContext,
    SecretError,
    attempt_label,
    clip,
    describe_exception,
    result_label,
)
from dispatch.timing import retry
from dispatch.worker import alerts, leases, ratelimit, vault
from dispatch.worker.leases import Claim, Event, Peek
from dispatch.worker.precall import lease_held, rate_limit

log = logging.getLogger("dispatch.worker")

# A message that arrives this little before its row is due (a beat whose
# clock runs slightly ahead) waits instead of being dropped.
EARLY_WAIT_S = 2.0
# Events carry a short response excerpt; the row keeps the full (bounded) one.
EVENT_EXCERPT_CHARS = 512


def run_execution(*, execution_id: str, attempt: int) -> str:
    """Claim and run `attempt` of an execution; returns a one-word result for the task log."""
    owner = leases.worker_id()
    lease_s = float(settings.EXECUTION_LEASE_S)
    claim = claim_waiting(execution_id=execution_id, attempt=attempt, owner=owner, lease_s=lease_s)
    if claim is None:
        peek = leases.execution_peek(execution_id=execution_id)
        if (
            peek is not None
            and peek.state in CLAIMABLE_STATES
            and peek.attempt == attempt
            and 0 < peek.due_in_s <= EARLY_WAIT_S
        ):
            time.sleep(peek.due_in_s + 0.01)
            claim = leases.execution_claim(
                execution_id=execution_id, attempt=attempt, owner=owner, lease_s=lease_s
            )
            if claim is None:
                peek = leases.execution_peek(execution_id=execution_id)
        if claim is None:
            return _ignore(execution_id=execution_id, attempt=attempt, owner=owner, peek=peek)
    return _run_claimed(claim, lease_s=lease_s)


def claim_waiting(*, execution_id: str, attempt: int, owner: str, lease_s: float) -> Claim | None:
    """The claim; when the database is away (a restart, a fail-over) it waits for a
    writable one (WORKER_DB_WAIT_S) and claims then.

    Acknowledged as a database error instead, the delivery's run waited for the beat's
    re-publish (QUEUED_REPUBLISH_S), and a worker draining a burst's backlog during a
    3 s outage dropped thousands (measured: a 36 s firing gap). Waiting holds this pool
    slot, so the worker stops taking messages it could not run. Only the claim waits:
    it is fenced (it takes only a queued row at this attempt), so a claim that did
    commit before the connection died is found running and the delivery ignored, while
    a failure after the claim (the finish) has its own bound (FINISH_RETRY_S) and the
    lease's rescue behind it — re-running the whole delivery there would only record a
    misleading duplicate."""
    try:
        return leases.execution_claim(
            execution_id=execution_id, attempt=attempt, owner=owner, lease_s=lease_s
        )
    except DatabaseError as exc:
        reason = unavailable_reason(exc)
        if reason is None or not reason.reconnect:
            raise
        log.warning(
            "execution %s attempt %s: %s; waiting up to %.0f s for it",
            execution_id,
            attempt,
            reason.sentence,
            settings.WORKER_DB_WAIT_S,
        )
        if not wait_for_writable(settings.WORKER_DB_WAIT_S):
            raise
    return leases.execution_claim(
        execution_id=execution_id, attempt=attempt, owner=owner, lease_s=lease_s
    )


def _ignore(*, execution_id: str, attempt: int, owner: str, peek: Peek | None) -> str:
    if peek is None:
        ratelimit.count_delivery("orphan")
        log.warning(
            "message for unknown execution %s (attempt %s) dropped: nothing to run",
            execution_id,
            attempt,
        )
        return "orphan"
    if peek.attempt > attempt:
        kind, why = "stale", f"the execution is already at attempt {peek.attempt} ({peek.state})"
    elif peek.attempt < attempt:
        kind, why = "ahead", f"the execution is only at attempt {peek.attempt} ({peek.state})"
    elif peek.state == ExecutionState.RUNNING:
        kind, why = (
            "duplicate",
            f"attempt {attempt} is already running (token {peek.fencing_token}, worker {peek.lease_owner})",
        )
    elif peek.state == ExecutionState.CANCELLED:
        # Cancelled (by a user, a replace, a deleted schedule) while its message was in
        # the broker, or a redelivery after: nothing to run, and not a duplicate run.
        kind, why = "cancelled", f"attempt {attempt} was cancelled"
    elif peek.state in FINAL_STATES:
        kind, why = "duplicate", f"attempt {attempt} already ended ({peek.state})"
    elif peek.state in CLAIMABLE_STATES and peek.due_in_s > 0:
        kind, why = (
            "early",
            f"it is not due for another {peek.due_in_s:.1f} s; it will be re-published",
        )
    else:
        kind, why = "unclaimable", f"the execution is {peek.state}"
    ratelimit.count_delivery(kind)
    log.info("%s delivery of execution %s attempt %s ignored: %s", kind, execution_id, attempt, why)
    leases.event_add(
        execution_id=execution_id,
        tenant_id=peek.tenant_id,
        schedule_id=peek.schedule_id,
        kind=EventKind.DELIVERY_IGNORED,
        message=f"{kind} message for attempt {attempt} ignored by {owner}: {why}",
        data={
            "delivery": kind,
            "message_attempt": attempt,
            "state": peek.state,
            "attempt": peek.attempt,
            "fencing_token": peek.fencing_token,
        },
        actor=owner,
    )
    return kind


class Heartbeat(threading.Thread):
    """Extends the lease every lease/3 and aborts the attempt at its deadline or on lease loss.

    A cancel is seen as a lease loss at the next beat: the stop bound of the module
    docstring (lease/3 + a round trip + the command's kill grace).

        After the deadline plus one lease it stops extending: a target that ignores
        the abort (stuck in a system call) then loses its lease to the sweeper
        instead of holding the execution forever.
    """

    def __init__(self, claim: Claim, ctx: RunContext, lease_s: float) -> None:
        super().__init__(name=f"heartbeat-{claim.execution_id[:8]}", daemon=True)
        self.claim = claim
        self.ctx = ctx
        self.lease_s = lease_s
        self.lost = False
        self._done = threading.Event()

    def run(self) -> None:
        interval = max(0.2, self.lease_s / 3)
        # Counted from the claim, which set the lease: a call shorter than a third of
        # the lease (counting any rate-limit wait) makes no heartbeat at all.
        next_beat = (self.claim.claimed_at or time.monotonic()) + interval
        give_up = self.ctx.deadline + self.lease_s
        try:
            while True:
                wake = next_beat if self.ctx.aborted else min(next_beat, self.ctx.deadline)
                if self._done.wait(max(0.0, wake - time.monotonic())):
                    return
                now = time.monotonic()
                if now >= self.ctx.deadline and not self.ctx.aborted:
                    self.ctx.abort("deadline")
                if now < next_beat:
                    continue
                next_beat = now + interval
                if now > give_up:
                    log.error(
                        "execution %s ignored its deadline; no longer extending its lease",
                        self.claim.execution_id,
                    )
                    return
                try:
                    ok = leases.lease_heartbeat(claim=self.claim, lease_s=self.lease_s)
                except DatabaseError as exc:
                    # Keep trying: if the database stays away past the lease, the
                    # sweeper takes over and the next heartbeat finds 0 rows.
                    log.warning("heartbeat of %s failed: %s", self.claim.execution_id, exc)
                    connection.close()
                    continue
                if not ok:
                    self.lost = True
                    self.ctx.abort("lease lost")
                    return
        finally:
            connection.close()

    def finish(self) -> None:
        self._done.set()
        self.join(timeout=10)


def _context(claim: Claim) -> RunContext:
    callback = completion.by_callback(claim.target)
    return RunContext(
        execution_id=claim.execution_id,
        scheduled_for=claim.scheduled_for,
        attempt=claim.attempt,
        run=claim.reruns + 1,
        schedule_id=str(claim.schedule_id),
        mint_identity=identity_tokens.mint,
        fencing_token=claim.fencing_token,
        tenant_id=claim.tenant_id,
        tenant_slug=claim.tenant_slug,
        signing_key=claim.signing_key,
        egress_allow=claim.egress_allow,
        target=claim.target,
        # A callback's run may take all of timeout_s; its hand-off must not.
        timeout_s=float(
            min(claim.timeout_s, completion.HANDOFF_TIMEOUT_S) if callback else claim.timeout_s
        ),
        completion_url=completion.base_url(claim.execution_id) if callback else None,
        completion_token=completion.issue(
            execution_id=claim.execution_id,
            attempt=claim.attempt,
            fencing_token=claim.fencing_token,
        )
        if callback
        else None,
        excerpt_bytes=settings.RESPONSE_EXCERPT_BYTES,
        resolve_secret=lambda ref: vault.resolve(ref, tenant_slug=claim.tenant_slug),
    )


def _hand_off(claim: Claim, outcome: Outcome, *, excerpt: str) -> str:
    """The target accepted the attempt and will call back: leave it running, held by
    the target until its first heartbeat is due (dispatch/completion.py)."""
    beat = completion.heartbeat_s(claim.target)
    shown = result_label(outcome.status_code, outcome.exit_code)
    label = attempt_label(claim.attempt, claim.attempt_base)
    event = Event(
        EventKind.AWAITING_COMPLETION,
        f"{label} handed off to the target{' (' + shown + ')' if shown else ''} in "
        f"{outcome.latency_ms} ms: waiting for its completion, a heartbeat at least every "
        f"{beat} s, within the {claim.timeout_s} s timeout",
        {
            "attempt": claim.attempt,
            "fencing_token": claim.fencing_token,
            "status_code": outcome.status_code,
            "latency_ms": outcome.latency_ms,
            "heartbeat_s": beat,
            "timeout_s": claim.timeout_s,
        }
        | outcome.data,
    )
    held = leases.attempt_await(
        claim=claim,
        heartbeat_s=beat,
        status_code=outcome.status_code,
        log_excerpt=excerpt,
        event=event,
    )
    if held:
        log.info("execution %s %s: handed off to its target", claim.execution_id, label)
        return "awaiting"
    peek = leases.execution_peek(execution_id=claim.execution_id)
    if peek is not None and peek.fencing_token == claim.fencing_token:
        # The target called back before the hand-off was recorded (a fast service:
        # its :succeed or :fail already finished the attempt under this token).
        return str(peek.state)
    leases.fencing_rejected(claim=claim, what="hand-off", data={"discarded": "awaiting"})
    return "fenced"


def _run_claimed(claim: Claim, *, lease_s: float) -> str:
    # One span per attempt (child of Celery's task span, itself continuing the
    # beat's publish span from the message headers), and every log line of the
    # attempt carries its ids.
    with (
        telemetry.tracer.start_as_current_span("execution.attempt") as span,
        log_context(
            execution_id=claim.execution_id, schedule_id=claim.schedule_id, tenant=claim.tenant_slug
        ),
    ):
        span.set_attribute("scheduler.execution_id", claim.execution_id)
        span.set_attribute("scheduler.schedule_id", str(claim.schedule_id))
        span.set_attribute("scheduler.tenant", claim.tenant_slug)
        span.set_attribute("scheduler.attempt", claim.attempt)
        span.set_attribute("scheduler.fencing_token", claim.fencing_token)
        result = _run_claimed_attempt(claim, lease_s=lease_s)
        span.set_attribute("scheduler.result", result)
        return result


def _run_claimed_attempt(claim: Claim, *, lease_s: float) -> str:
    if claim.schedule_completed and not claim.schedule_deleted:
        why = f"not run: the schedule completed (reached max_runs {claim.max_runs})"
        applied = leases.attempt_finish_retrying(
            claim=claim,
            state=ExecutionState.SKIPPED,
            events=[Event(EventKind.COMPLETED_SKIPPED, why, {"attempt": claim.attempt})],
            reason_code=ReasonCode.SCHEDULE_COMPLETED,
            reason=why,
        )
        if not applied:
            leases.fencing_rejected(claim=claim, what="skip")
        return "skipped"
    if claim.schedule_deleted or not claim.tenant_active:
        why = "its schedule was deleted" if claim.schedule_deleted else "its tenant is deactivated"
        applied = leases.attempt_finish_retrying(
            claim=claim,
            state=ExecutionState.CANCELLED,
            events=[Event(EventKind.CANCELLED, f"not run: {why}", {"attempt": claim.attempt})],
            reason_code=(
                ReasonCode.SCHEDULE_DELETED
                if claim.schedule_deleted
                else ReasonCode.TENANT_INACTIVE
            ),
            reason=f"not run: {why}",
        )
        if not applied:
            leases.fencing_rejected(claim=claim, what="cancellation")
        return "cancelled"

    module = KINDS.get(str(claim.target.get("type")))
    if module is None:
        return record_outcome(
            claim,
            None,
            Outcome.failure(
                f"unknown target type {claim.target.get('type')!r}",
                retryable=False,
                reason_code="bad_target",
            ),
        )
    held, waited = rate_limit(claim, module, lease_s=lease_s)
    if held:
        return "held"

    ctx = _context(claim)
    # `attempt_started` was written by the claim (Claim.started): no round trip here.
    heartbeat = Heartbeat(claim, ctx, lease_s)
    heartbeat.start()
    faults.crash_at("worker_after_claim", claim.execution_id)
    try:
        if not lease_held(claim, lease_s=lease_s):
            return "fenced"
        with telemetry.tracer.start_as_current_span("target.call") as call_span:
            call_span.set_attribute("scheduler.target", str(claim.target.get("type")))
            outcome = _call(module, ctx)
    finally:
        heartbeat.finish()
    faults.crash_at("worker_before_complete", claim.execution_id)
    if heartbeat.lost:
        result = _lost(claim, outcome)
        if ctx.live_logged:  # whoever moved the token on sealed it first, normally
            attempt_logs.keep_attempt_log(claim.execution_id, claim.attempt, actor=claim.owner)
        return result
    return record_outcome(claim, ctx, outcome, waited_s=waited)


def _call(module: ModuleType, ctx: RunContext) -> Outcome:
    try:
        outcome: Outcome = module.run(ctx)
        return outcome
    except SecretError as exc:
        return Outcome.failure(
            ctx.redact(exc.message),
            retryable=exc.retryable,
            reason_code="secret",
            latency_ms=ctx.elapsed_ms(),
        )
    except KeyUnavailable as exc:
        return Outcome.failure(
            f"no workload identity token: {exc}",
            retryable=True,
            reason_code="identity_unavailable",
            latency_ms=ctx.elapsed_ms(),
        )
    except Aborted:
        if ctx.abort_reason == "deadline":
            return Outcome.failure(
                f"stopped at its {ctx.timeout_s:g} s timeout",
                retryable=True,
                reason_code="timeout",
                latency_ms=ctx.elapsed_ms(),
            )
        return Outcome.failure(
            f"stopped: {ctx.abort_reason}",
            retryable=True,
            reason_code="aborted",
            latency_ms=ctx.elapsed_ms(),
        )
    except Exception as exc:
        # Never let a target's exception (whose text may quote a header or an
        # argv element, or one character of a secret it could not encode) reach
        # the logs or the row: the frames, and a description without the data.
        log.error(
            "target %s of execution %s raised:\n%s%s",
            ctx.target.get("type"),
            ctx.execution_id,
            "".join(traceback.format_tb(exc.__traceback__)),
            ctx.redact(describe_exception(exc)),
        )
        return Outcome.failure(
            ctx.redact(f"internal error: {describe_exception(exc)}"),
            retryable=True,
            reason_code="internal",
            latency_ms=ctx.elapsed_ms(),
        )


def _lost(claim: Claim, outcome: Outcome) -> str:
    result = "succeeded" if outcome.ok else "failed"
    peek = leases.execution_peek(execution_id=claim.execution_id)
    if peek is not None and peek.state == ExecutionState.CANCELLED:
        leases.event_add(
            execution_id=claim.execution_id,
            tenant_id=claim.tenant_id,
            schedule_id=claim.schedule_id,
            kind=EventKind.CANCELLED_STOP,
            message=(
                f"worker {claim.owner} stopped attempt {claim.attempt}: the execution was "
                f"cancelled (token {claim.fencing_token} → {peek.fencing_token}); result discarded"
            ),
            data={
                "worker": claim.owner,
                "token": claim.fencing_token,
                "current_token": peek.fencing_token,
                "discarded": result,
            },
            actor=claim.owner,
        )
        log.info("execution %s cancelled while running; stopped", claim.execution_id)
        return "cancelled_stop"
    leases.fencing_rejected(
        claim=claim, what="heartbeat", data={"discarded": result, "latency_ms": outcome.latency_ms}
    )
    log.warning(
        "execution %s: lease lost (token %s no longer current); attempt stopped, result discarded",
        claim.execution_id,
        claim.fencing_token,
    )
    return "fenced"


def record_outcome(
    claim: Claim, ctx: RunContext | None, outcome: Outcome, *, waited_s: float = 0.0
) -> str:
    """How an attempt ended, recorded under the claim's token by the retry policy: the
    worker's finish, and a completion callback's (dispatch/services/completion.py)."""

    def redact(text: str) -> str:
        return ctx.redact(text) if ctx is not None else text

    if outcome.awaiting:
        return _hand_off(claim, outcome, excerpt=redact(outcome.excerpt))

    # The attempt's log is sealed before its end is written, and kept by the same
    # statement (dispatch/services/logs.py); a worker whose target wrote no line has
    # none to seal. A callback's end (no ctx) may carry its heartbeats' lines.
    sealed = (
        logs.seal(claim.execution_id, claim.attempt) if ctx is None or ctx.live_logged else None
    )
    kept = attempt_logs.log_event(claim.attempt, sealed) if sealed is not None else None
    with_log = [kept] if kept is not None else []

    pol = retry.policy(claim.retry)
    # The policy counts the attempts of the current chain: a re-run starts again at 1
    # (`attempt_base` is the attempt it continued from). The row's attempt number —
    # X-Attempt, the event data — keeps counting.
    n, max_attempts = claim.attempt, int(pol["max_attempts"])
    k = n - claim.attempt_base
    label = attempt_label(n, claim.attempt_base)
    excerpt = redact(outcome.excerpt)
    error = redact(outcome.error)
    data: dict[str, Any] = {
        "attempt": n,
        "fencing_token": claim.fencing_token,
        "status_code": outcome.status_code,
        "exit_code": outcome.exit_code,
        "latency_ms": outcome.latency_ms,
        "response": clip(excerpt, EVENT_EXCERPT_CHARS),
    } | outcome.data
    if waited_s:
        # Recorded with the attempt's end: the started event was written by the claim,
        # before the rate limiter was asked.
        data["rate_limit_wait_s"] = round(waited_s, 3)
    shown = result_label(outcome.status_code, outcome.exit_code)
    common: dict[str, Any] = {
        "claim": claim,
        "status_code": outcome.status_code,
        "exit_code": outcome.exit_code,
        "log_excerpt": excerpt,
        "output": outcome.output,
    }
    if outcome.ok:
        state = ExecutionState.SUCCEEDED
        applied = leases.attempt_finish_retrying(
            state=state,
            events=[
                Event(
                    EventKind.ATTEMPT_SUCCEEDED,
                    f"{label} succeeded{' (' + shown + ')' if shown else ''} "
                    f"in {outcome.latency_ms} ms",
                    data,
                ),
                *with_log,
            ],
            **common,
        )
    else:
        failed = Event(
            EventKind.ATTEMPT_FAILED,
            f"{label} failed after {outcome.latency_ms} ms: {error}",
            data
            | {
                "error": clip(error, 500),
                "reason_code": outcome.reason_code,
                "retryable": outcome.retryable,
            },
        )
        if outcome.retryable and not retry.exhausted(pol, k):
            state = ExecutionState.RETRY_SCHEDULED
            delay = retry.backoff_s(pol, k, retry_after_s=outcome.retry_after_s)
            honoured = (
                f", honouring Retry-After {outcome.retry_after_s:g} s"
                if outcome.retry_after_s is not None
                else ""
            )
            applied = leases.attempt_finish_retrying(
                state=state,
                attempt_inc=1,
                delay_s=delay,
                error=error,
                reason_code=outcome.reason_code,
                reason=f"{label} failed: {error}",
                events=[
                    failed,
                    Event(
                        EventKind.RETRY_SCHEDULED,
                        f"{attempt_label(n + 1, claim.attempt_base, of=max_attempts)} "
                        f"in {delay:.1f} s "
                        f"({pol['backoff']} backoff{honoured})",
                        {
                            "next_attempt": n + 1,
                            "delay_s": round(delay, 3),
                            "retry_after_s": outcome.retry_after_s,
                        },
                    ),
                    *with_log,
                ],
                **common,
            )
        else:
            state = ExecutionState.DEAD
            why = (
                "not retryable"
                if not outcome.retryable
                else f"attempts exhausted ({k} of {max_attempts})"
            )
            reason = f"{error} — {why}"
            applied = leases.attempt_finish_retrying(
                state=state,
                error=error,
                reason_code=outcome.reason_code or "failed",
                reason=reason,
                events=[
                    failed,
                    Event(
                        EventKind.DEAD,
                        f"dead after {label}: {reason}",
                        {"attempts": k, "reason_code": outcome.reason_code},
                    ),
                    *with_log,
                ],
                after_commit=lambda: alerts.dead_notice_enqueue(claim.execution_id),
                **common,
            )
    if sealed is not None:
        if applied:
            logs.discard(claim.execution_id, claim.attempt)
        else:  # kept on its own: no one else can, this call sealed it
            attempt_logs.keep_sealed(claim.execution_id, claim.attempt, sealed, actor=claim.owner)
    if not applied:
        leases.fencing_rejected(claim=claim, what="completion", data={"discarded": state})
        log.warning(
            "execution %s: completion (%s) with token %s rejected; not applied",
            claim.execution_id,
            state,
            claim.fencing_token,
        )
        return "fenced"
    log.info(
        "execution %s attempt %s: %s%s in %s ms%s",
        claim.execution_id,
        n,
        state,
        f" ({shown})" if shown else "",
        outcome.latency_ms,
        "" if outcome.ok else f": {clip(error, 300)}",
    )
    return state
