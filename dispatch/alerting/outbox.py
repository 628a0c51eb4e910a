"""The alert sender: delivers the outbox (dispatch_alert) with retries and backoff.

Where it runs: a step of the control pump (dispatch/scheduler/control.py), on a
thread of its own in every beat process, so alerts go out while any beat is up and
no firing cycle ever waits on a tenant's slow webhook. Several beats share the work
with `FOR UPDATE SKIP LOCKED`.

Fairness: a claim takes at most PER_TENANT alerts of each tenant, from the tenants
whose oldest due alert is oldest, and never a tenant whose alerts this process is
still sending. Each tenant's alerts go out on a thread of their own (at most
ALERT_SEND_THREADS at once), one after another; the step does not wait for them.
So a tenant whose channel answers slowly holds only its own alerts: another
tenant's are claimed at the pump's next round and sent at once on another thread.

Guarantee: the decision row is committed with the execution's state change
(decision.py); a claim commits `attempts + 1` and pushes `next_attempt_at` out by a
lease before anything is sent, so a sender that dies mid-batch leaves its alerts to
be taken up again after that lease — nothing is lost, and a channel that took a
message before the crash may see it once more (receivers dedupe on `alert_id`). The
lease outlasts the worst case of what the claim took (ALERT_SEND_LEASE_S for the
sender's own work, plus one ALERT_WEBHOOK_TIMEOUT_S per send: the tenant's claimed
alerts times its enabled channels), so a slow send is never taken up a second time
while it is still going. Channels that took an alert are recorded (`delivered`), so
a retry after a partial failure goes only to the others. Each attempt is an
`alert_sent` / `alert_failed` event on the execution's timeline.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import defaultdict
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from dispatch import explain
from dispatch.alerting import delivery, maintenance
from dispatch.models import AlertChannel, AlertPolicy, Execution, ExecutionEvent, Schedule
from dispatch.selectors.alerts import policy_channels
from dispatch.sql import sql
from dispatch.states import AlertKind, AlertState, EventKind
from tenants.models import Tenant

log = logging.getLogger("dispatch.alerts")
# Alerts of one tenant per claim: sent one after another on the tenant's thread, so
# with the tenant's channels they bound how long the claim may take (its lease).
PER_TENANT = 5
ACTOR = "alerts"


def backoff_s(attempts: int) -> float:
    """Seconds before the next try after `attempts` failed ones: exponential, capped."""
    first = float(settings.ALERT_RETRY_INITIAL_S)
    return float(min(first * 2 ** max(0, attempts - 1), float(settings.ALERT_RETRY_MAX_S)))


def message_for(kind: str, payload: dict[str, Any]) -> delivery.Message:
    name = payload.get("schedule_name", "?")
    when = payload.get("scheduled_for", "")
    if kind == AlertKind.RECOVERY:
        return delivery.Message(
            event="schedule.recovered",
            title=f"{name}: recovered",
            text=f"{name} succeeded again (occurrence {when}) after failing.",
            data=payload,
        )
    if kind == AlertKind.LATE:
        limit = payload.get("limit_s")
        what = (
            f"has not started {limit} s after its due time"
            if payload.get("late") == "not_started"
            else f"is still running {limit} s after it started"
        )
        return delivery.Message(
            event="schedule.late",
            title=f"{name}: late",
            text=f"{name}'s occurrence {when} {what}. Why: {payload.get('why', 'unknown')}",
            data=payload,
        )
    if kind == AlertKind.MISSED:
        count, skipped, caught_up = (payload.get(k) for k in ("missed", "skipped", "caught_up"))
        plural = "s" * (count != 1)
        span = (
            f"at {payload.get('first')}"
            if payload.get("first") == payload.get("last")
            else f"from {payload.get('first')} to {payload.get('last')}"
        )
        return delivery.Message(
            event="schedule.missed",
            title=f"{name}: missed {count} occurrence{plural}",
            text=(
                f"{name} missed {count} occurrence{plural} {span} while the scheduler was not "
                f"firing (misfire policy {payload.get('misfire')}): {skipped} recorded skipped, "
                f"{caught_up} run late. Why: {payload.get('why', 'unknown')}"
            ),
            data=payload,
        )
    if kind == AlertKind.AUTO_PAUSED:
        return delivery.Message(
            event="schedule.auto_paused",
            title=f"{name}: auto-paused",
            text=(
                f"{name} was paused by the platform: {payload.get('pause_note')}. "
                "It stays paused until someone resumes it."
            ),
            data=payload,
        )
    streak = payload.get("consecutive_failures")
    times = f"{streak} consecutive failures" if streak and streak > 1 else "failed"
    return delivery.Message(
        event="schedule.failing",
        title=f"{name}: {times}",
        text=(
            f"{name} ended {payload.get('state')} for occurrence {when}"
            f"{f' ({streak} in a row)' if streak and streak > 1 else ''}: "
            f"{payload.get('reason') or payload.get('reason_code') or 'no reason recorded'}"
        ),
        data=payload,
    )


def _channels(tenant_id: int, schedule_id: str) -> list[AlertChannel]:
    """The policy's channels (the schedule's override, else the tenant default), else
    every enabled channel of the tenant; disabled ones never."""
    policy = (
        AlertPolicy.objects.filter(tenant_id=tenant_id, schedule_id=schedule_id).first()
        or AlertPolicy.objects.filter(tenant_id=tenant_id, schedule__isnull=True).first()
    )
    enabled = list(AlertChannel.objects.filter(tenant_id=tenant_id, enabled=True))
    return policy_channels(policy, enabled)


def _json(value: Any) -> Any:
    # Named statements leave jsonb undecoded (str) outside the ORM.
    return json.loads(value) if isinstance(value, (str, bytes)) else value


def _explained(row: Any, at: datetime | None = None) -> str:
    """The explainer's answer for the alert's occurrence (or the one `at`), as of now."""
    schedule = Schedule.objects.filter(pk=row.schedule_id).first()
    execution = Execution.objects.filter(pk=row.execution_id).first()
    if schedule is None or execution is None:
        return "the occurrence is gone"
    return explain.explain(schedule=schedule, at=at or execution.scheduled_for).sentence


def _row_message(row: Any) -> delivery.Message:
    payload = _json(row.payload)
    if row.kind == AlertKind.LATE and "why" not in payload:
        payload["why"] = _explained(row)
    if row.kind == AlertKind.MISSED and "why" not in payload:
        # The outage's first occurrence: recorded skipped, or one of the older ones
        # the misfire event summarises — the explainer names the misfire either way.
        payload["why"] = _explained(row, datetime.fromisoformat(payload["first"]))
    message = message_for(row.kind, payload)
    # The alert's own id: the same on every retry, so receivers can dedupe on it.
    return delivery.Message(
        event=message.event,
        title=message.title,
        text=message.text,
        data=payload,
        alert_id=str(row.id),
    )


def summary_message(rows: list[Any], window: str) -> delivery.Message:
    """One message for the alerts a maintenance window held, sent when it is over."""
    titles = [_row_message(row).title for row in rows]
    return delivery.Message(
        event="alerts.summary",
        title=f"{len(rows)} alert{'s' * (len(rows) != 1)} held during maintenance window {window}",
        text="Held while the window was open:\n" + "\n".join(f"- {t}" for t in titles),
        data={"window": window, "alerts": [{"alert_id": str(r.id), "kind": r.kind} for r in rows]},
        # Stable for this set of alerts: a retried summary dedupes like one alert.
        alert_id=str(rows[0].id),
    )


def _deliver(rows: list[Any], message: delivery.Message) -> None:
    """Send `message` for `rows` (one alert, or a window's summary of several) over
    their channels, each channel once, skipping those that already took all of them;
    then record the attempt on every row and its execution's timeline."""
    tenant = Tenant.objects.get(pk=rows[0].tenant_id)
    delivered = [set(_json(row.delivered)) for row in rows]
    channels: dict[str, AlertChannel] = {}
    for row in rows:
        for channel in _channels(row.tenant_id, str(row.schedule_id)):
            channels.setdefault(str(channel.id), channel)
    sent: list[str] = []
    failed: list[str] = []
    for cid, channel in channels.items():
        if all(cid in done for done in delivered):
            continue
        result = delivery.send(channel, message, tenant=tenant)
        label = f"{channel.kind} {channel.name} ({result.detail})"
        if result.ok:
            for done in delivered:
                done.add(cid)
            sent.append(label)
        else:
            failed.append(label)
    with transaction.atomic():
        for row, done in zip(rows, delivered, strict=True):
            if failed and row.attempts < int(settings.ALERT_MAX_ATTEMPTS):
                state, retry_s = AlertState.PENDING, backoff_s(row.attempts)
            else:
                state, retry_s = (AlertState.FAILED if failed else AlertState.SENT), 0.0
            sql.execute(
                "alert_result",
                {
                    "id": str(row.id),
                    "state": str(state),
                    "retry_s": retry_s,
                    "delivered": json.dumps(sorted(done)),
                    "error": "; ".join(failed),
                },
            )
            if row.execution_id is not None:
                ExecutionEvent.objects.create(
                    tenant_id=row.tenant_id,
                    schedule_id=row.schedule_id,
                    execution_id=row.execution_id,
                    kind=EventKind.ALERT_FAILED if failed else EventKind.ALERT_SENT,
                    message=_event_message(row, sent, failed, state, retry_s)
                    + (f" (in the summary of {len(rows)})" if len(rows) > 1 else ""),
                    data={
                        "alert_id": str(row.id),
                        "alert_kind": row.kind,
                        "try": row.attempts,
                        "sent": sent,
                        "failed": failed,
                    },
                    actor=ACTOR,
                )


def _event_message(row: Any, sent: list[str], failed: list[str], state: str, retry_s: float) -> str:
    what = f"{row.kind} alert"
    if not failed:
        return f"{what} sent: {', '.join(sent) or 'no channel to send to'}"
    after = (
        f"; next try in {retry_s:.0f} s"
        if state == AlertState.PENDING
        else f"; gave up after {row.attempts} tries"
    )
    return f"{what} try {row.attempts} failed: {', '.join(failed)}{after}"[:1000]


def _hold(row: Any, window: maintenance.Open) -> None:
    with transaction.atomic():
        sql.execute(
            "alert_hold",
            {"id": str(row.id), "until": window.ends_at, "window": window.name},
        )
        if row.execution_id is not None:
            ExecutionEvent.objects.create(
                tenant_id=row.tenant_id,
                schedule_id=row.schedule_id,
                execution_id=row.execution_id,
                kind=EventKind.ALERT_HELD,
                message=f"{row.kind} alert held by maintenance window {window.name} until "
                f"{window.ends_at.isoformat()}; a summary is sent when it ends",
                data={"alert_id": str(row.id), "alert_kind": row.kind, "window": window.name},
                actor=ACTOR,
            )


def _deliver_tenant(rows: list[Any]) -> None:
    """Deliver one tenant's claimed alerts, one after another: held while the tenant is
    in a maintenance window, summarised once the window is over."""
    windows = maintenance.open_now(tenant_ids={row.tenant_id for row in rows})
    summaries: dict[tuple[int, str], list[Any]] = {}
    for row in rows:
        try:
            window = windows.get(row.tenant_id)
            if window is not None:
                _hold(row, window)
            elif row.held_by:
                summaries.setdefault((row.tenant_id, row.held_by), []).append(row)
            else:
                _deliver([row], _row_message(row))
        except Exception as exc:
            _given_up(row, exc)
    for (_, window_name), held in summaries.items():
        try:
            _deliver(held, summary_message(held, window_name))
        except Exception as exc:
            for row in held:
                _given_up(row, exc)


def _tenant_thread(rows: list[Any]) -> None:
    try:
        _deliver_tenant(rows)
    except Exception as exc:
        # The claims stand: these alerts are taken up again when their lease lapses.
        log.warning(
            "alerts of tenant %s: delivery failed (%s)", rows[0].tenant_id, type(exc).__name__
        )
    finally:
        connection.close()


class Sender:
    """The alert deliveries in flight in this process: one thread per tenant, at most
    ALERT_SEND_THREADS at once. Claims skip the tenants still being sent to here, so a
    tenant never has two threads and its alerts keep their order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[int, threading.Thread] = {}

    def start(self) -> tuple[int, list[threading.Thread]]:
        """Claim a fair round of due alerts and start their tenants' threads: how many
        alerts were claimed, and the threads started."""
        with self._lock:
            self._running = {t: th for t, th in self._running.items() if th.is_alive()}
            free = int(settings.ALERT_SEND_THREADS) - len(self._running)
            if free <= 0:
                return 0, []
            with transaction.atomic():
                rows = sql.rows(
                    "alert_claim",
                    {
                        "busy": list(self._running),
                        "tenants": free,
                        "per_tenant": PER_TENANT,
                        "lease_s": float(settings.ALERT_SEND_LEASE_S),
                        "send_s": float(settings.ALERT_WEBHOOK_TIMEOUT_S),
                    },
                )
            by_tenant: dict[int, list[Any]] = defaultdict(list)
            for row in rows:
                by_tenant[row.tenant_id].append(row)
            started = []
            for tenant_id, tenant_rows in by_tenant.items():
                thread = threading.Thread(
                    target=_tenant_thread,
                    args=(tenant_rows,),
                    name=f"alerts-tenant-{tenant_id}",
                    daemon=True,
                )
                self._running[tenant_id] = thread
                thread.start()
                started.append(thread)
            return len(rows), started

    def drain(self, timeout: float | None = None) -> bool:
        """Wait for the deliveries in flight (up to `timeout` seconds); whether all ended."""
        with self._lock:
            threads = list(self._running.values())
        ends = None if timeout is None else time.monotonic() + timeout
        for thread in threads:
            thread.join(None if ends is None else max(0.0, ends - time.monotonic()))
        return not any(thread.is_alive() for thread in threads)


SENDER = Sender()


def pump_step() -> int:
    """The control pump's step: claim a fair round and start its tenants' deliveries,
    without waiting for them; how many alerts it claimed."""
    claimed, _ = SENDER.start()
    return claimed


def pump_once() -> int:
    """Claim a fair round and deliver it, waiting for its deliveries (tests call this)."""
    claimed, threads = SENDER.start()
    for thread in threads:
        thread.join()
    return claimed


def drain(timeout: float | None = None) -> bool:
    """Wait for this process's alert deliveries in flight; whether all ended in time."""
    return SENDER.drain(timeout)


def _given_up(row: Any, exc: Exception) -> None:
    # The claim stands: the alert is taken up again when its lease lapses, unless that
    # was its last try. Only the exception's type is written: its text may quote
    # anything the failing call had in hand, a secret header value included.
    log.warning("alert %s: delivery attempt failed (%s)", row.id, type(exc).__name__)
    if row.attempts >= int(settings.ALERT_MAX_ATTEMPTS):
        sql.execute(
            "alert_result",
            {
                "id": str(row.id),
                "state": str(AlertState.FAILED),
                "retry_s": 0.0,
                "delivered": json.dumps(list(_json(row.delivered))),
                "error": f"{type(exc).__name__}: the delivery attempt failed unexpectedly",
            },
        )
