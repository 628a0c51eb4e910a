"""Sending one message to one alert channel, and saying what happened.

* email: Django's email backend (settings.EMAIL_*), one message to the channel's list;
* slack: a Slack-compatible incoming webhook, body `{"text": ...}` (Mattermost and
  Teams' incoming webhooks take the same shape);
* webhook: the message as a JSON event, signed like an HTTP target's request
  (X-Signature-Timestamp, X-Signature = sha256 HMAC with the tenant's signing key over
  `timestamp.alert_id.body`; X-Alert-Id is the receiver's dedupe key).

Every URL (stored in clear or behind a secret reference) goes through the SSRF guard
on its resolved addresses and is called on exactly those (no re-resolution, no
redirects). Every send, email included, ends within ALERT_WEBHOOK_TIMEOUT_S. A
failure is an answer (`Delivery.ok` False with the reason), never an exception, and
never carries a secret's value: a header value HTTP cannot carry is refused naming
the header, and a failed call is told by the exception's type and a fixed reason,
never by its text (which may quote what the call had in hand).
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import json
import os
import smtplib
import socket
import ssl
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.mail import get_connection, send_mail
from django.core.mail.backends.base import BaseEmailBackend
from django.core.mail.backends.smtp import EmailBackend as SMTPBackend

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
            # Slack's markup, kept for the title's bold; the texts themselves (a
            # schedule's name, a target's answer) cannot mention @channel or mask a link.
            text = f"*{slack_escaped(message.title)}*\n{slack_escaped(message.text)}"
            return _status(post_json(url, json.dumps({"text": text}).encode(), {}, tenant=tenant))
        body = json.dumps(message.as_event(tenant), separators=(",", ":"), default=str).encode()
        headers: dict[str, str] = {}
        for name, value in channel.config.get("headers", {}).items():
            resolved = _secret_or_value(value, tenant=tenant)
            problem = http_target.header_value_problem(resolved)
            if problem is not None:
                return Delivery(False, f"not sent: the value of header {name} {problem}")
            headers[name] = resolved
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
        # Its messages name the reference and the backend's answer, never a value.
        return Delivery(False, f"secret: {exc}")
    except (ValueError, OSError, http.client.HTTPException) as exc:
        return Delivery(False, f"{type(exc).__name__}: {failure_reason(exc)}")


def failure_reason(exc: BaseException) -> str:
    """A fixed sentence for a failed send, by the exception's type; never its text.

    The text of a library's exception may quote what the call had in hand: http.client
    quotes a refused header value whole, a URL parser the URL (a Slack-style URL is a
    credential), an SMTP server's answer whatever the server chose to echo.
    """
    if isinstance(exc, TimeoutError):
        return f"no complete answer within {float(settings.ALERT_WEBHOOK_TIMEOUT_S):g} s"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, socket.gaierror):
        return "the host name does not resolve"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return "the server's TLS certificate is not trusted"
    if isinstance(exc, ssl.SSLError):
        return "the TLS handshake failed"
    if isinstance(exc, smtplib.SMTPResponseException):
        return f"the mail server answered {exc.smtp_code}"
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        return "the mail server refused every recipient"
    if isinstance(exc, smtplib.SMTPException):
        return "the mail server ended the conversation"
    if isinstance(exc, http.client.HTTPException):
        return "the answer is not valid HTTP"
    if isinstance(exc, ValueError):
        return "the channel's URL or message cannot be sent as given"
    if isinstance(exc, OSError) and exc.errno:
        return os.strerror(exc.errno).lower()
    return "the connection failed"


def slack_escaped(text: str) -> str:
    """`text` with Slack's control characters escaped (&, <, >: its markup for links and
    mentions such as <!channel> or <http://x|click>), so it shows as written."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _status(status: int) -> Delivery:
    return Delivery(200 <= status < 300, f"HTTP {status}")


def _secret_or_value(value: Any, *, tenant: Tenant) -> str:
    if isinstance(value, dict):
        return vault.resolve(value["secret"], tenant_slug=tenant.slug)
    return str(value)


def _email(channel: AlertChannel, message: Message) -> Delivery:
    recipients = list(channel.config.get("to", []))
    body = f"{message.text}\n\n{json.dumps(message.data, indent=2, default=str)}\n"
    send_email(subject=f"[scheduler] {message.title}", body=body, recipients=recipients)
    return Delivery(True, f"sent to {len(recipients)} recipient{'s' * (len(recipients) != 1)}")


def send_email(*, subject: str, body: str, recipients: list[str]) -> None:
    """Send one email through the configured backend, the whole SMTP conversation
    (connect, greeting, TLS, login, every command and the message) within
    ALERT_WEBHOOK_TIMEOUT_S: EMAIL_TIMEOUT bounds each socket operation only, and a
    relay that dribbles its greeting a line at a time never trips it.

    With Django's SMTP backend the socket is shut down at the deadline (the call then
    raises TimeoutError); another backend (console, a provider's API) is called as
    configured. Name resolution of EMAIL_HOST, the operator's relay, is not bounded.
    """
    deadline_s = float(settings.ALERT_WEBHOOK_TIMEOUT_S)
    deadline = _Deadline()
    backend: BaseEmailBackend
    if settings.EMAIL_BACKEND == "django.core.mail.backends.smtp.EmailBackend":
        backend = _BoundedSMTPBackend(
            deadline=deadline, timeout=min(float(settings.EMAIL_TIMEOUT or deadline_s), deadline_s)
        )
    else:
        backend = get_connection()
    timer = threading.Timer(deadline_s, deadline.cut)
    timer.daemon = True
    timer.start()
    try:
        send_mail(
            subject=subject,
            message=body,
            from_email=settings.ALERT_EMAIL_FROM,
            recipient_list=recipients,
            connection=backend,
        )
    except OSError:
        if deadline.passed:
            raise TimeoutError(f"no complete answer within {deadline_s:g} s") from None
        raise
    finally:
        timer.cancel()


class _Deadline:
    """The SMTP conversation's socket, shut down once the send's deadline has passed
    (a read or write blocked on it returns at once, as for HTTP's PinnedConnection)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self.passed = False

    def watch(self, sock: socket.socket | None) -> None:
        with self._lock:
            self._sock = sock
            if self.passed:
                self._shut()

    def cut(self) -> None:
        with self._lock:
            self.passed = True
            self._shut()

    def _shut(self) -> None:
        if self._sock is not None:
            # The raw socket's shutdown (not SSLSocket's, which would unwrap).
            with contextlib.suppress(OSError):
                socket.socket.shutdown(self._sock, socket.SHUT_RDWR)


class _Watched(smtplib.SMTP):
    """smtplib's client that hands its socket to the deadline before every reply it
    waits for: the first is the greeting, read inside the constructor, and STARTTLS
    replaces the socket."""

    def __init__(self, *args: Any, deadline: _Deadline, **kwargs: Any) -> None:
        self.deadline = deadline
        super().__init__(*args, **kwargs)

    def getreply(self) -> tuple[int, bytes]:
        self.deadline.watch(getattr(self, "sock", None))
        return super().getreply()


class _WatchedSSL(_Watched, smtplib.SMTP_SSL):
    pass


class _BoundedSMTPBackend(SMTPBackend):
    def __init__(self, *, deadline: _Deadline, **kwargs: Any) -> None:
        super().__init__(fail_silently=False, **kwargs)
        self.deadline = deadline

    @property
    def connection_class(self) -> Any:
        return functools.partial(_WatchedSSL if self.use_ssl else _Watched, deadline=self.deadline)


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
