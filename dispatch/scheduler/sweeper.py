"""Rescue of running executions whose worker went away (failure contract C6:
docs/explanation/failure-contract.md).

A worker that dies, is paused past its lease, or hangs past its timeout stops
heartbeating (or keeps a run alive too long). The sweeper moves such rows to
their next attempt — or to `dead` once attempts are exhausted — and bumps the
fencing token in the same statement, so whatever the lost worker writes later
matches no row. A job that kills its worker every time therefore ends `dead`
after exactly max_attempts attempts, never in a redelivery loop.

Called by the beat every sweep (`sweep_expired_leases(partitions=[...])`), inside
the transaction that fenced those partitions. Due-ness uses the database clock only.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import socket
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction

from dispatch import completion
from dispatch.alerting import decision
from dispatch.models import ExecutionEvent
from dispatch.scheduler import dependencies, store
from dispatch.services.logs import keep_attempt_log
from dispatch.states import EventKind, ExecutionState
from dispatch.targets.runtime import attempt_label, clip
from dispatch.timing import retry
from dispatch.worker import alerts

log = logging.getLogger("dispatch.sweeper")


def _actor() -> str:
    return f"sweeper:{socket.gethostname()}:{os.getpid()}"


def sweep_expired_leases(*, partitions: list[int] | None, limit: int = 500) -> int:
    """Retry or bury up to `limit` running executions whose lease expired or that overran.

    `partitions` restricts the sweep to those partitions (None = all). Rows
    another sweeper is handling are skipped (SKIP LOCKED). Returns how many
    executions were moved. Inside a caller's transaction (the beat's fenced
    sweep) it joins it, without a savepoint of its own: its writes commit with
    the fence or not at all.
    """
    grace = settings.EXECUTION_BACKSTOP_GRACE_S
    actor = _actor()
    with transaction.atomic(savepoint=False):
        rows = store.sweep_lock_expired(grace_s=grace, partitions=partitions, limit=limit)
        if not rows:
            return 0
        plans: dict[str, dict[str, Any]] = {}
        for run in rows:
            retry_raw, owner, token = run.retry, run.lease_owner, run.fencing_token
            pol = retry.policy(json.loads(retry_raw) if isinstance(retry_raw, str) else retry_raw)
            expired_at, started_at = run.lease_expires_at, run.started_at
            if (
                run.lease_expired
                and (owner or "").startswith(completion.OWNER_PREFIX)
                and expired_at is not None
                and started_at is not None
            ):
                # Held by its target (a callback completion): its end never came, or no
                # heartbeat did in time. The lease never runs past the deadline.
                code, why = (
                    ("completion_timeout", f"the target did not complete within {run.timeout_s} s")
                    if expired_at >= started_at + timedelta(seconds=run.timeout_s)
                    else (
                        "completion_lapsed",
                        f"the target sent no heartbeat or completion by {expired_at:%H:%M:%S} UTC",
                    )
                )
                why += (
                    f" (token {token}, handed off by worker "
                    f"{owner.removeprefix(completion.OWNER_PREFIX)})"
                )
            elif run.lease_expired:
                code = "lease_expired"
                why = (
                    f"lease of worker {owner or '?'} (token {token}) expired at "
                    f"{run.lease_expires_at:%H:%M:%S} UTC without a heartbeat"
                )
            else:
                code = "backstop_timeout"
                why = (
                    f"still running {run.timeout_s} s + {grace} s grace after it started "
                    f"(worker {owner or '?'}, token {token}); treated as hung"
                )
            # The policy counts the current chain's attempts (a re-run starts again at 1).
            n = run.attempt - run.attempt_base
            dead = retry.exhausted(pol, n)
            plans[str(run.id)] = {
                "tenant_id": run.tenant_id,
                "schedule_id": run.schedule_id,
                "attempt": run.attempt,
                "n": n,
                "base": run.attempt_base,
                "token": token,
                "state": ExecutionState.DEAD if dead else ExecutionState.RETRY_SCHEDULED,
                "delay": 0.0 if dead else retry.backoff_s(pol, n),
                "code": code,
                "why": why,
                "max": int(pol["max_attempts"]),
            }
        ids = list(plans)
        swept = store.sweep_apply(
            ids=ids,
            tokens=[plans[i]["token"] for i in ids],
            states=[str(plans[i]["state"]) for i in ids],
            delays=[plans[i]["delay"] for i in ids],
            codes=[plans[i]["code"] for i in ids],
            reasons=[
                f"{attempt_label(plans[i]['attempt'], plans[i]['base'])} timed out: "
                f"{plans[i]['why']}"
                + (" — attempts exhausted" if plans[i]["state"] == ExecutionState.DEAD else "")
                for i in ids
            ],
        )
        applied = {str(row.id): (row.attempt, row.fencing_token) for row in swept}
        events: list[ExecutionEvent] = []
        for execution_id, (attempt_now, token_now) in applied.items():
            plan = plans[execution_id]
            # The attempt ended here: its log is kept, and its worker (if it lives) can
            # add nothing more to it.
            transaction.on_commit(
                functools.partial(keep_attempt_log, execution_id, plan["attempt"], actor=actor)
            )
            base = {
                "tenant_id": plan["tenant_id"],
                "schedule_id": plan["schedule_id"],
                "execution_id": execution_id,
                "actor": actor,
            }
            events.append(
                ExecutionEvent(
                    kind=EventKind.TIMED_OUT,
                    message=clip(
                        f"{attempt_label(plan['attempt'], plan['base'])} timed out: {plan['why']}"
                    ),
                    data={
                        "attempt": plan["attempt"],
                        "reason_code": plan["code"],
                        "old_token": plan["token"],
                        "fencing_token": token_now,
                    },
                    **base,
                )
            )
            if plan["state"] == ExecutionState.DEAD:
                events.append(
                    ExecutionEvent(
                        kind=EventKind.DEAD,
                        message=clip(
                            f"dead after "
                            f"{attempt_label(plan['attempt'], plan['base'], of=plan['max'])}: "
                            f"{plan['why']} — attempts exhausted"
                        ),
                        data={"attempts": plan["n"], "reason_code": plan["code"]},
                        **base,
                    )
                )
                transaction.on_commit(functools.partial(alerts.dead_notice_enqueue, execution_id))
            else:
                events.append(
                    ExecutionEvent(
                        kind=EventKind.RETRY_SCHEDULED,
                        message=f"{attempt_label(attempt_now, plan['base'], of=plan['max'])} "
                        f"in {plan['delay']:.1f} s",
                        data={"next_attempt": attempt_now, "delay_s": round(plan["delay"], 3)},
                        **base,
                    )
                )
        ExecutionEvent.objects.bulk_create(events)
        buried = [eid for eid in applied if plans[eid]["state"] == ExecutionState.DEAD]
        if buried:
            dependencies.propagate(execution_ids=buried)
            # The failure alerts these deaths owe commit with them (the outbox).
            decision.decide(execution_ids=buried)
    if applied:
        log.info("swept %d execution(s) with expired leases or overrun timeouts", len(applied))
    return len(applied)
