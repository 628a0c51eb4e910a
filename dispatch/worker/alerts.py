"""The notice a tenant gets when one of its executions ends `dead` — the tenant's
own `alert_webhook_url` / `alert_email`, for a tenant with no alert channel (one
with channels is told by the alert outbox, dispatch/alerting/, instead).

Sent after the commit that made it dead (a rolled-back transaction must not
alert), by a separate Celery task, so neither a worker slot nor a beat cycle
waits on a tenant's slow webhook. The webhook URL is tenant-supplied, so it
goes through the same SSRF guard and pinned connection as HTTP targets, and
is signed with the tenant's key. At-least-once: an `alert_sent` event makes a
redelivered notice task a no-op.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime
from typing import Any

from dispatch.models import AlertChannel, Execution, ExecutionEvent
from dispatch.queues import queue_name
from dispatch.states import EventKind, ExecutionState
from dispatch.targets import http as http_target
from dispatch.targets import netguard

log = logging.getLogger("dispatch.alerts")

NOTICE_TASK = "dispatch.send_dead_notice"
NOTICE_QUEUE = queue_name("low", "short")


def dead_notice_enqueue(execution_id: str) -> None:
    """Queue the dead-execution notice (call from transaction.on_commit)."""
    from config.celery_app import app

    try:
        app.send_task(NOTICE_TASK, args=[str(execution_id)], queue=NOTICE_QUEUE)
    except Exception as exc:
        # The execution is dead and its timeline says so; only the push is lost.
        log.error("could not queue the dead notice for %s: %s", execution_id, exc)


def _iso(value: datetime | None) -> str | None:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z") if value else None


def notice_payload(execution: Execution) -> dict[str, Any]:
    return {
        "event": "execution.dead",
        "tenant": execution.tenant.slug,
        "schedule_id": str(execution.schedule_id),
        "schedule_name": execution.schedule.name,
        "execution_id": str(execution.id),
        "scheduled_for": _iso(execution.scheduled_for),
        # Attempts of the chain that died (a re-run's chain counts from its base).
        "attempts": execution.attempt - execution.attempt_base,
        "attempt": execution.attempt,
        "reruns": execution.reruns,
        "reason_code": execution.reason_code,
        "reason": execution.reason,
        "finished_at": _iso(execution.finished_at),
    }


def send_dead_notice(*, execution_id: str) -> list[str]:
    """Send the notice over the tenant's configured channels; returns the channels that worked."""
    execution = (
        Execution.objects.select_related("tenant", "schedule").filter(pk=execution_id).first()
    )
    if execution is None or execution.state != ExecutionState.DEAD:
        return []
    # One notice per death: a re-run that dies again (a later attempt) is a new one.
    if ExecutionEvent.objects.filter(
        execution=execution, kind=EventKind.ALERT_SENT, data__attempt=execution.attempt
    ).exists():
        return []
    tenant = execution.tenant
    # A tenant with an enabled alert channel is told through the alert outbox
    # (dispatch/alerting/: failure alert, its policy, retries); this older notice
    # to the tenant's own webhook / address would say the same thing twice.
    if AlertChannel.objects.filter(tenant=tenant, enabled=True).exists():
        return []
    from dispatch.alerting.delivery import send_email

    payload = notice_payload(execution)
    sent: list[str] = []
    failed: list[str] = []
    if tenant.alert_webhook_url:
        try:
            status = _post_webhook(tenant.alert_webhook_url, payload, tenant=tenant)
            (sent if 200 <= status < 300 else failed).append(f"webhook (HTTP {status})")
        except (OSError, netguard.Denied, ValueError) as exc:
            failed.append(f"webhook ({getattr(exc, 'reason', None) or type(exc).__name__})")
    if tenant.alert_email:
        try:
            send_email(
                subject=f"[scheduler] {execution.schedule.name}: execution dead",
                body=json.dumps(payload, indent=2),
                recipients=[tenant.alert_email],
            )
            sent.append("email")
        except Exception as exc:
            failed.append(f"email ({type(exc).__name__})")
    if sent or failed:
        ExecutionEvent.objects.create(
            tenant=tenant,
            schedule_id=execution.schedule_id,
            execution=execution,
            kind=EventKind.ALERT_SENT if sent else EventKind.ALERT_FAILED,
            message=(
                f"tenant notified: {', '.join(sent)}"
                if sent
                else f"notice failed: {', '.join(failed)}"
            ),
            data={"sent": sent, "failed": failed, "attempt": execution.attempt},
            actor="alerts",
        )
    return sent


def _post_webhook(url: str, payload: dict[str, Any], *, tenant: Any) -> int:
    from dispatch.alerting.delivery import post_json

    body = json.dumps(payload, separators=(",", ":")).encode()
    timestamp = int(time.time())
    headers = {
        "X-Execution-Id": payload["execution_id"],
        "X-Signature-Timestamp": str(timestamp),
        "X-Signature": http_target.sign(
            tenant.signing_key, timestamp, payload["execution_id"], body
        ),
    }
    return post_json(url, body, headers, tenant=tenant)
