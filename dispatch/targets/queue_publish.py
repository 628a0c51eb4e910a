"""Message targets: publish to a tenant-owned exchange/queue on a configured broker.

Definition: {"type": "queue", "broker": "default", "exchange": "<tenant>.x", "routing_key",
"body", "timeout_s", "auth"}; `auth` {"type": "oidc", "audience"} adds the run's workload
identity token as the message header `authorization: Bearer <token>` (dispatch/identity).
Every message carries the attempt's trace context (`traceparent`, `tracestate`) as headers.
(Named queue_publish.py: a module named `queue` would shadow the standard library.)
"""

from __future__ import annotations

import re
from datetime import UTC
from typing import Any

from django.conf import settings

from config import telemetry
from dispatch import completion
from dispatch.exceptions import InvalidSchedule
from dispatch.targets.common import clean_auth, clean_str, clean_timeout, require_keys
from dispatch.targets.runtime import Aborted, Outcome, RunContext
from tenants.models import Tenant
from tenants.naming import RESERVED_SLUGS

KEYS = {
    "type",
    "broker",
    "exchange",
    "routing_key",
    "body",
    "timeout_s",
    "auth",
    "completion",
    "heartbeat_s",
}
NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,200}$")


def clean(config: dict[str, Any], *, tenant: Tenant) -> dict[str, Any]:
    require_keys(config, allowed=KEYS)
    broker = clean_str(config, "broker", required=False, max_len=64, default="default")
    known = getattr(settings, "TARGET_BROKERS", {"default": None})
    if broker not in known:
        raise InvalidSchedule.field(
            "target.broker", f"unknown broker; configured: {', '.join(sorted(known))}"
        )
    exchange = clean_str(config, "exchange", required=False, max_len=200, default="")
    routing_key = clean_str(config, "routing_key", required=True, max_len=200)
    for key, value in (("exchange", exchange), ("routing_key", routing_key)):
        if value and not NAME.match(value):
            raise InvalidSchedule.field(
                f"target.{key}", "may hold letters, digits and _ . : - only"
            )
    problem = namespace_problem(exchange, routing_key, tenant_slug=tenant.slug)
    if problem:
        raise InvalidSchedule.field(*problem)
    body = config.get("body", {})
    if not isinstance(body, (dict, list, str)):
        raise InvalidSchedule.field("target.body", "must be a string or JSON")
    cleaned = {
        "type": "queue",
        "broker": broker,
        "exchange": exchange,
        "routing_key": routing_key,
        "body": body,
        "timeout_s": clean_timeout(config, default=30),
    }
    cleaned |= completion.clean(config)
    auth = clean_auth(config, default_audience=None)
    if auth is not None:
        cleaned["auth"] = auth
    return cleaned


def namespace_problem(
    exchange: str, routing_key: str, *, tenant_slug: str
) -> tuple[str, str] | None:
    """(field, message) if a publish would leave the tenant's namespace, else None.

    Checked at save and again at run time: a row edited outside the API (or a
    tenant created before its slug was reserved) must not reach another
    tenant's exchange or the platform's own Celery queues.
    """
    if tenant_slug in RESERVED_SLUGS:
        return (
            "target.exchange" if exchange else "target.routing_key",
            f"tenant '{tenant_slug}' has a slug reserved for the platform's queues; "
            "queue targets are disabled for it",
        )
    owned_prefix = f"{tenant_slug}."
    # Tenants publish only into their own namespace: with the default exchange the
    # routing key is the queue name, so it must carry the prefix too.
    if exchange and not exchange.startswith(owned_prefix):
        return "target.exchange", f"must start with '{owned_prefix}' (the tenant's namespace)"
    if not exchange and not routing_key.startswith(owned_prefix):
        return (
            "target.routing_key",
            f"must start with '{owned_prefix}' when publishing to the default exchange",
        )
    return None


# --- Execution (workers) ---------------------------------------------------


def rate_key(config: dict[str, Any]) -> str | None:
    return f"queue:{config.get('broker') or 'default'}"


def message_for(ctx: RunContext) -> dict[str, Any]:
    """The published message: the attempt's ids (for deduplication) and the tenant's body."""
    return {
        "execution_id": ctx.execution_id,
        "scheduled_for": ctx.scheduled_for.astimezone(UTC).isoformat().replace("+00:00", "Z"),
        "attempt": ctx.attempt,
        "run": ctx.run,
        "fencing_token": ctx.fencing_token,
        "body": ctx.target.get("body", {}),
    }


def run(ctx: RunContext) -> Outcome:
    """Publish one message to the tenant's exchange / routing key, with publisher confirms.

    With RabbitMQ the publish is `mandatory`: a message no queue would receive
    is an error, not a silent drop. (Redis has no such signal.)
    """
    from amqp import exceptions as amqp_errors
    from kombu import Connection

    cfg = ctx.target
    broker = cfg.get("broker") or "default"
    url = settings.TARGET_BROKERS.get(broker)
    if not url:
        return Outcome.failure(
            f"broker {broker!r} is not configured on this platform",
            retryable=False,
            reason_code="unknown_broker",
        )
    problem = namespace_problem(
        str(cfg.get("exchange") or ""),
        str(cfg.get("routing_key") or ""),
        tenant_slug=ctx.tenant_slug,
    )
    if problem:
        return Outcome.failure(
            f"not published: {problem[0]} {problem[1]}", retryable=False, reason_code="namespace"
        )
    message = message_for(ctx)
    headers: dict[str, Any] = {
        "execution_id": ctx.execution_id,
        "attempt": ctx.attempt,
        "run": ctx.run,
        "fencing_token": ctx.fencing_token,
    }
    token = ctx.identity_token()
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    if ctx.completion_token is not None:
        headers["completion_url"] = ctx.completion_url
        headers["completion_token"] = ctx.completion_token
    # The consumer joins the execution's trace (W3C traceparent / tracestate).
    telemetry.inject(headers)
    timeout = max(0.5, ctx.remaining())
    try:
        with Connection(
            url,
            connect_timeout=timeout,
            transport_options={"confirm_publish": True, "socket_timeout": timeout},
        ) as conn:
            conn.ensure_connection(max_retries=1, timeout=max(1, int(timeout)))
            ctx.on_abort(conn.release)
            producer = conn.Producer(serializer="json")
            producer.publish(
                message,
                exchange=cfg.get("exchange") or "",
                routing_key=cfg["routing_key"],
                headers=headers,
                delivery_mode=2,
                mandatory=conn.transport_cls in ("amqp", "pyamqp", "amqps"),
                retry=False,
                timeout=timeout,
                confirm_timeout=timeout,
                message_id=f"{ctx.execution_id}:{ctx.attempt}:{ctx.fencing_token}",
            )
    except amqp_errors.NotFound as exc:
        return Outcome.failure(
            f"broker refused the publish: {exc}",
            retryable=False,
            reason_code="exchange_not_found",
            latency_ms=ctx.elapsed_ms(),
        )
    except Exception as exc:
        if ctx.aborted:
            raise Aborted(ctx.abort_reason) from None
        # Connection errors, confirms not received, unroutable (NO_ROUTE: the
        # tenant's queue may not be declared yet): all worth another attempt.
        return Outcome.failure(
            ctx.redact(f"publish failed: {type(exc).__name__}: {exc}"),
            retryable=True,
            reason_code="publish_failed",
            latency_ms=ctx.elapsed_ms(),
        )
    target = f"{cfg.get('exchange') or '(default exchange)'} / {cfg['routing_key']}"
    return Outcome.success(
        excerpt=f"published to {target} on broker {broker}",
        latency_ms=ctx.elapsed_ms(),
        data={"broker": broker, "routing_key": cfg["routing_key"]},
        awaiting=completion.by_callback(cfg),
    )
