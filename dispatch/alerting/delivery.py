"""Sending one message to one alert channel, and saying what happened.

* email: Django's email backend (settings.EMAIL_*), one message to the channel's list;
* slack: a Slack-compatible incoming webhook, body `{"text": ...}` (Mattermost and
  Teams' incoming webhooks take the same shape);
* webhook: the message as a JSON event, signed like an HTTP target's request
  (X-Signature-Timestamp, X-Signature = sha256 HMAC with the tenant's signing key over
  `timestamp.alert_id.body`; X-Alert-Id is the receiver's dedupe key).

Every URL (stored in clear or behind a secret reference) goes through the SSRF guard
on its resolved addresses and is called on exactly those (no re-resolution, no
redirects). A failure is an answer (`Delivery.ok` False with the reason), never an
exception, and never carries a secret's value.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.mail import send_mail

from dispatch.models import AlertChannel
from dispatch.states import ChannelKind
from dispatch.targets import http as http_target
from dispatch.targets import netguard
from dispatch.targets.runtime import SecretError
from dispatch.worker import vault
from tenants.models import Tenant

MAX_RESPONSE = 64 * 1024


@dataclass(frozen=True)
class Message:
    """One alert as every channel kind shows it: a title, a text, and the event's data."""

    event: str  # e.g. "alert.test"
    title: str
    text: str
    data: dict[str, Any] = field(default_factory=dict)
    alert_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    def as_event(self, tenant: Tenant) -> dict[str, Any]:
        return {
            "event": self.event,
            "alert_id": self.alert_id,
            "tenant": tenant.slug,
            "title": self.title,
            "text": self.text,
        } | self.data


@dataclass(frozen=True)
class Delivery:
    ok: bool
    detail: str  # "HTTP 200", "sent to 2 recipients", or why not


def send(channel: AlertChannel, message: Message, *, tenant: Tenant) -> Delivery:
    """Deliver `message` over `channel` (whether or not it is enabled: the caller decides)."""
    try:
        if channel.kind == ChannelKind.EMAIL:
            return _email(channel, message)
        url = _secret_or_value(channel.config["url"], tenant=tenant)
        if channel.kind == ChannelKind.SLACK:
            body = json.dumps({"text": f"*{message.title}*\n{message.text}"}).encode()
            return _status(post_json(url, body, {}, tenant=tenant))
        body = json.dumps(message.as_event(tenant), separators=(",", ":"), default=str).encode()
        headers = {
            name: _secret_or_value(value, tenant=tenant)
            for name, value in channel.config.get("headers", {}).items()
        }
        timestamp = int(time.time())
        headers |= {
            "X-Alert-Id": message.alert_id,
            "X-Signature-Timestamp": str(timestamp),
            "X-Signature": http_target.sign(tenant.signing_key, timestamp, message.alert_id, body),
        }
        return _status(post_json(url, body, headers, tenant=tenant))
    except netguard.Denied as denied:
        return Delivery(False, f"refused by the egress guard: {denied.reason}")
    except SecretError as exc:
        return Delivery(False, f"secret: {exc}")
    except ValueError as exc:
        return Delivery(False, str(exc))
    except OSError as exc:
        # Connection refused, timeout, DNS, SMTP errors (smtplib's are OSErrors).
        return Delivery(False, f"{type(exc).__name__}: {exc}"[:300])


def _status(status: int) -> Delivery:
    return Delivery(200 <= status < 300, f"HTTP {status}")


def _secret_or_value(value: Any, *, tenant: Tenant) -> str:
    if isinstance(value, dict):
        return vault.resolve(value["secret"], tenant_slug=tenant.slug)
    return str(value)


def _email(channel: AlertChannel, message: Message) -> Delivery:
    recipients = list(channel.config.get("to", []))
    body = f"{message.text}\n\n{json.dumps(message.data, indent=2, default=str)}\n"
    send_mail(
        subject=f"[scheduler] {message.title}",
        message=body,
        from_email=settings.ALERT_EMAIL_FROM,
        recipient_list=recipients,
    )
    return Delivery(True, f"sent to {len(recipients)} recipient{'s' * (len(recipients) != 1)}")


def post_json(url: str, body: bytes, headers: dict[str, str], *, tenant: Tenant) -> int:
    """POST `body` to a tenant-supplied URL through the SSRF guard; the response status.

    Resolved once, every address checked, connected only to those (a DNS answer
    that changes in between cannot reach loopback); no redirect is followed; the
    whole call, answer included, ends within ALERT_WEBHOOK_TIMEOUT_S.
    Raises netguard.Denied, OSError (TimeoutError past the deadline), or ValueError
    for a URL that is not http(s).
    """
    answer = http_target.bounded_request(
        "POST",
        url,
        allow=netguard.AllowList.parse(tenant.egress_allow),
        deadline_s=float(settings.ALERT_WEBHOOK_TIMEOUT_S),
        max_bytes=MAX_RESPONSE,
        body=body,
        headers={"Content-Type": "application/json"} | headers,
    )
    return answer.status
