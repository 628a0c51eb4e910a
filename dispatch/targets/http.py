"""HTTP callback targets.

Definition: {"type": "http", "url", "method", "headers", "body", "timeout_s", "auth",
"completion", "heartbeat_s"}. With `"completion": "callback"` (dispatch/completion.py) a
202 hands the attempt to the tenant's service, which finishes it by calling back.
Header values are strings, or secret references for anything credential-like;
`auth` {"type": "oidc", "audience"} adds the run's workload identity token as
`Authorization: Bearer` (dispatch/identity; the audience defaults to the URL's origin).

At run time (`run`) every request carries X-Execution-Id, X-Scheduled-For,
X-Attempt, X-Fencing-Token and an HMAC signature, goes only to addresses
resolved once and checked by the SSRF guard, follows no redirect, and is
bounded by one total deadline (connect + send + headers + body).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import http.client
import ipaddress
import json
import re
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from config import telemetry
from dispatch import completion
from dispatch.exceptions import InvalidSchedule
from dispatch.targets import netguard
from dispatch.targets.common import (
    clean_auth,
    clean_secret_ref,
    clean_str,
    clean_timeout,
    credential_like,
    require_keys,
)
from dispatch.targets.runtime import Aborted, Outcome, RunContext
from dispatch.timing import retry
from tenants.models import Tenant

KEYS = {
    "type",
    "url",
    "method",
    "headers",
    "body",
    "timeout_s",
    "auth",
    "completion",
    "heartbeat_s",
}
METHODS = {"GET", "POST", "PUT", "PATCH", "DELETE"}
MAX_URL = 2048
MAX_BODY = 16 * 1024
MAX_HEADERS = 32
HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$")

# Set by the platform or by the HTTP layer; a tenant may not supply them.
FORBIDDEN_HEADERS = {
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "proxy-connection",
    "expect",
    "x-execution-id",
    "x-scheduled-for",
    "x-attempt",
    "x-fencing-token",
    "x-completion-url",
    "x-completion-token",
    "x-signature",
    "x-signature-timestamp",
    "traceparent",
    "tracestate",
}


def header_value_problem(value: str) -> str | None:
    """Why `value` cannot go out as an HTTP header value, or None if it can: the one
    rule for header values, at save time and for values resolved from secrets when
    sending (HTTP targets, alert webhooks).

    The reason says what is wrong and never quotes the value, which may be a secret:
    http.client's own refusal quotes it whole (`Invalid header value b'...'`), and
    its encoding error names the character and its position.

    A value ending in a line break is refused like any other with one, not trimmed:
    secrets are used as stored (dispatch/worker/vault.py changes none), and the
    reason tells the owner what to fix.
    """
    if value.endswith("\n") and not any(c in value.rstrip("\r\n") for c in "\r\n\x00"):
        return (
            "ends in a line break (as a value read from a file often does): "
            "store it without the trailing newline"
        )
    if any(c in value for c in "\r\n\x00"):
        return "contains a line break or NUL"
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        return (
            "has characters HTTP headers cannot carry (header values are Latin-1: "
            "percent- or base64-encode other characters)"
        )
    return None


# URLs one request already accepted, by (url, the tenant's allow-list, field), while
# `urls_checked_once()` is open: the 1,000 targets of a POST /v1/jobs:batch mostly share
# a URL, and its verdict (shape, then the save-time SSRF guard, which resolves no name)
# depends on nothing else. Per request only: the guard's settings are read afresh by
# the next one. A refused URL is not kept: each item naming it is refused on its own.
_ACCEPTED: ContextVar[set[tuple[str, str, str]] | None] = ContextVar("urls_accepted", default=None)


@contextlib.contextmanager
def urls_checked_once() -> Iterator[None]:
    token = _ACCEPTED.set(set())
    try:
        yield
    finally:
        _ACCEPTED.reset(token)


def clean_url(url: str, *, tenant: Tenant, field: str = "target.url") -> str:
    """A tenant-supplied http(s) URL checked for shape and by the save-time SSRF guard
    (targets, and the alert channels' webhooks); `field` names it in errors."""
    accepted = _ACCEPTED.get()
    if accepted is None:
        return _check_url(url, tenant=tenant, field=field)
    key = (url, json.dumps(tenant.egress_allow), field)
    if key not in accepted:
        _check_url(url, tenant=tenant, field=field)
        accepted.add(key)
    return url


def _check_url(url: str, *, tenant: Tenant, field: str) -> str:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidSchedule.field(field, f"is not a valid URL ({exc})") from None
    if parts.scheme not in {"http", "https"}:
        raise InvalidSchedule.field(field, "scheme must be http or https")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise InvalidSchedule.field(
            field, "must not carry credentials; put them in a header as a secret reference"
        )
    host = parts.hostname or ""
    if not host:
        raise InvalidSchedule.field(field, "has no host")
    if any(c in url for c in "\r\n\t ") or any(ord(c) < 32 for c in url):
        raise InvalidSchedule.field(field, "contains whitespace or control characters")
    if not (parts.path + parts.query).isascii():
        # http.client sends the request line as ASCII: percent-encode the rest.
        raise InvalidSchedule.field(
            field, "path and query must be ASCII (percent-encode other characters)"
        )
    for name, _ in parse_qsl(parts.query, keep_blank_values=True):
        if credential_like(name, query=True):
            raise InvalidSchedule.field(
                field,
                f"query parameter {name!r} looks like a credential; use a header with a secret reference",
            )
    try:
        default_port = 443 if parts.scheme == "https" else 80
        netguard.check_host_at_save(
            host, allow=netguard.AllowList.parse(tenant.egress_allow), port=port or default_port
        )
    except netguard.Denied as denied:
        raise InvalidSchedule.field(field, denied.reason) from None
    if port is not None and not 1 <= port <= 65535:
        raise InvalidSchedule.field(field, "port out of range")
    return url


def clean_headers(
    headers_in: Any, *, tenant: Tenant, field: str = "target.headers"
) -> dict[str, Any]:
    """Header name → string, or a secret reference for anything credential-like."""
    if not isinstance(headers_in, dict):
        raise InvalidSchedule.field(field, "must be an object of header name to value")
    if len(headers_in) > MAX_HEADERS:
        raise InvalidSchedule.field(field, f"at most {MAX_HEADERS} headers")
    headers: dict[str, Any] = {}
    for name, value in headers_in.items():
        where = f"{field}.{name}"
        if not HEADER_NAME.match(name):
            raise InvalidSchedule.field(where, "is not a valid header name")
        if name.lower() in FORBIDDEN_HEADERS:
            raise InvalidSchedule.field(where, "is set by the platform and may not be supplied")
        if isinstance(value, dict):
            headers[name] = clean_secret_ref(value, field=where, tenant=tenant)
        elif isinstance(value, str):
            # Credential-bearing headers must be secret references, never literal values.
            if credential_like(name):
                raise InvalidSchedule.field(
                    where,
                    'carries a credential: give a secret reference {"secret": "vault:..."}, not the value',
                )
            if len(value) > 4096:
                raise InvalidSchedule.field(where, "must be at most 4096 characters")
            # Refused now rather than accepted here and then failing every single run.
            problem = header_value_problem(value)
            if problem is not None:
                raise InvalidSchedule.field(where, problem)
            headers[name] = value
        else:
            raise InvalidSchedule.field(where, "must be a string or a secret reference")
    return headers


def clean(config: dict[str, Any], *, tenant: Tenant) -> dict[str, Any]:
    require_keys(config, allowed=KEYS)
    url = clean_url(clean_str(config, "url", required=True, max_len=MAX_URL), tenant=tenant)
    method = clean_str(config, "method", required=False, max_len=8, default="POST").upper()
    if method not in METHODS:
        raise InvalidSchedule.field("target.method", f"must be one of {', '.join(sorted(METHODS))}")
    headers = clean_headers(config.get("headers", {}), tenant=tenant)

    body = config.get("body")
    if body is not None:
        if not isinstance(body, (str, dict, list)):
            raise InvalidSchedule.field("target.body", "must be a string or JSON")
        if len(str(body)) > MAX_BODY:
            raise InvalidSchedule.field("target.body", f"must be at most {MAX_BODY} characters")

    cleaned: dict[str, Any] = {
        "type": "http",
        "url": url,
        "method": method,
        "headers": headers,
        "timeout_s": clean_timeout(config),
    }
    if body is not None:
        cleaned["body"] = body
    cleaned |= completion.clean(config)
    auth = clean_auth(config, default_audience=origin(url))
    if auth is not None:
        cleaned["auth"] = auth
        for name in headers:
            if name.lower() == "authorization":
                raise InvalidSchedule.field(
                    f"target.headers.{name}",
                    "is set by target.auth (the run's identity token); remove one of the two",
                )
    return cleaned


def origin(url: str) -> str:
    """The URL's origin (RFC 6454: scheme, host, and the port unless the scheme's
    default), the audience an identity token for it carries by default."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    default_port = 443 if parts.scheme == "https" else 80
    port = f":{parts.port}" if parts.port not in (None, default_port) else ""
    return f"{parts.scheme}://{host}{port}"


# --- Execution (workers) ---------------------------------------------------

STREAM_CHUNK = 64 * 1024
USER_AGENT = "scheduler-platform/1 (+at-least-once; dedupe on X-Execution-Id)"
RETRYABLE_STATUS = {408, 425, 429}


def sign(key: str, timestamp: int, execution_id: str, body: bytes) -> str:
    """X-Signature: HMAC-SHA256 over `timestamp.execution_id.body` with the tenant's key.

    The timestamp is inside the MAC so a captured request cannot be replayed
    later with a fresh timestamp; receivers should also reject old timestamps.
    """
    message = f"{timestamp}.{execution_id}.".encode() + body
    return "sha256=" + hmac.new(key.encode(), message, hashlib.sha256).hexdigest()


def rate_key(config: dict[str, Any]) -> str | None:
    parts = urlsplit(config["url"])
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"http:{(parts.hostname or '').lower()}:{port}"


def encode_body(body: Any) -> tuple[bytes, str | None]:
    if body is None:
        return b"", None
    if isinstance(body, str):
        return body.encode(), "text/plain; charset=utf-8"
    return json.dumps(body, separators=(",", ":")).encode(), "application/json"


def resolve_checked(
    host: str, port: int, *, allow: netguard.AllowList, timeout: float
) -> list[tuple[socket.AddressFamily, str]]:
    """Resolve `host` once and check EVERY address; the caller connects only to these.

    Checking one address and letting the HTTP library resolve again would let
    a DNS answer that changes between the two (rebinding) reach loopback.
    Raises netguard.Denied, or OSError when the name does not resolve in time.
    """
    literal = netguard.parse_ip_literal(host)
    if literal is not None:
        ips: list[netguard.IPAddress] = [literal]
    else:
        name = host.lower().rstrip(".")
        if name == "localhost" or name.endswith(".localhost"):
            raise netguard.Denied(f"{host} is a loopback name")
        infra_hosts, _ = netguard.infrastructure()
        if name in infra_hosts:
            raise netguard.Denied(f"{host} is the platform's own infrastructure")
        ips = []
        for info in _getaddrinfo(host, port, timeout=timeout):
            ip = ipaddress.ip_address(str(info[4][0]).split("%")[0])
            if ip not in ips:
                ips.append(ip)
        if not ips:
            raise OSError(f"{host} has no addresses")
        if allow.allows_host(host):
            # The operator allowed this name: its private addresses are fine,
            # the always-denied ranges still are not (check_ip decides those first).
            nets = tuple(ipaddress.ip_network(ip) for ip in ips)
            allow = netguard.AllowList(allow.networks + nets, allow.host_patterns)
    for ip in ips:
        netguard.check_ip(ip, allow=allow, port=port)
    return [(socket.AF_INET6 if ip.version == 6 else socket.AF_INET, str(ip)) for ip in ips]


def _getaddrinfo(host: str, port: int, *, timeout: float) -> list[Any]:
    # getaddrinfo has no timeout of its own; run it aside so a slow resolver
    # cannot outlive the attempt's deadline.
    result: dict[str, Any] = {}

    def work() -> None:
        try:
            result["infos"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            result["error"] = exc

    thread = threading.Thread(target=work, name="resolve", daemon=True)
    thread.start()
    thread.join(max(0.0, timeout))
    if thread.is_alive():
        raise TimeoutError(f"resolving {host} took longer than the timeout")
    if "error" in result:
        raise result["error"]
    infos: list[Any] = result["infos"]
    return infos


class PinnedConnection(http.client.HTTPConnection):
    """An HTTP(S) connection to addresses already resolved and checked (never re-resolved).

    The Host header and TLS SNI / certificate check use the URL's name; the
    TCP connection goes to the pinned address.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        addresses: list[tuple[socket.AddressFamily, str]],
        tls: bool,
        timeout: float,
    ) -> None:
        super().__init__(host, port, timeout=timeout)
        self.addresses = addresses
        self.tls = tls
        self.default_port = 443 if tls else 80
        self.connected_ip = ""

    def connect(self) -> None:
        last: OSError | None = None
        for family, ip in self.addresses:
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            try:
                sock.connect((ip, self.port))
            except OSError as exc:
                sock.close()
                last = exc
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.tls:
                context = ssl.create_default_context()
                sock = context.wrap_socket(sock, server_hostname=self.host)
            self.sock = sock
            self.connected_ip = ip
            return
        raise last or OSError("no address to connect to")

    def abort(self) -> None:
        sock = self.sock
        if sock is not None:
            # Shut down the raw socket (not SSLSocket.shutdown, which unwraps):
            # a read blocked in another thread returns at once.
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes  # at most `max_bytes` + 1 bytes: one more tells the caller it was cut


def bounded_request(
    method: str,
    url: str,
    *,
    allow: netguard.AllowList,
    deadline_s: float,
    max_bytes: int,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> Answer:
    """One call to a tenant-supplied URL from the platform's own control work (alert
    sends, calendar feeds): through the SSRF guard, pinned to the checked addresses,
    no redirect followed, and bounded by ONE total deadline for resolve, connect,
    send and the whole answer.

    A per-read timeout alone is not a bound: a peer that dribbles a byte every few
    seconds never trips it, and would hold the calling thread (and with it every
    other tenant's control work) for as long as it likes. Raises netguard.Denied,
    ValueError for a URL that is not http(s), TimeoutError past the deadline, or
    another OSError / http.client.HTTPException.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("not an http(s) URL")
    tls = parts.scheme == "https"
    port = parts.port or (443 if tls else 80)
    ends = time.monotonic() + deadline_s

    def left() -> float:
        remaining = ends - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no complete answer within {deadline_s:g} s")
        return remaining

    addresses = resolve_checked(parts.hostname, port, allow=allow, timeout=left())
    conn = PinnedConnection(parts.hostname, port, addresses=addresses, tls=tls, timeout=left())
    # The timer cuts a read that is still waiting at the deadline; between reads
    # `left()` says so.
    timer = threading.Timer(left(), conn.abort)
    timer.daemon = True
    timer.start()
    try:
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn.request(method, path, body=body, headers={"User-Agent": USER_AGENT} | (headers or {}))
        response = conn.getresponse()
        got = bytearray()
        while len(got) <= max_bytes:
            left()
            chunk = response.read(min(STREAM_CHUNK, max_bytes + 1 - len(got)))
            if not chunk:
                break
            got += chunk
        left()
        return Answer(int(response.status), bytes(got))
    except (OSError, http.client.HTTPException):
        left()  # past the deadline, say so rather than "connection reset"
        raise
    finally:
        timer.cancel()
        conn.close()


def classify(status: int) -> tuple[bool, bool]:
    """(ok, retryable) for an HTTP status."""
    if 200 <= status < 300:
        return True, False
    if status >= 500 or status in RETRYABLE_STATUS:
        return False, True
    return False, False


# Bodies of these media types are lines worth a live log; any other (an image, an
# archive, compressed bytes) is kept only as the excerpt.
LIVE_LOG_QUIET_S = 1.0
_TEXT_TYPES = re.compile(
    r"^(text/[\w.+-]+|application/([\w.-]+\+)?(json|xml|x-ndjson|jsonl?))\s*(;|$)"
)


def is_text(content_type: str | None) -> bool:
    if not content_type:
        return False
    return _TEXT_TYPES.match(content_type.strip().lower()) is not None


def run(ctx: RunContext) -> Outcome:
    """Call the tenant's URL once: signed, pinned to checked addresses, bounded by the deadline."""
    cfg = ctx.target
    parts = urlsplit(cfg["url"])
    tls = parts.scheme == "https"
    host = parts.hostname or ""
    port = parts.port or (443 if tls else 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    method = str(cfg.get("method") or "POST")
    body, content_type = encode_body(cfg.get("body"))

    headers: dict[str, str] = {}
    for name, value in (cfg.get("headers") or {}).items():
        resolved = ctx.secret(value["secret"]) if isinstance(value, dict) else str(value)
        problem = header_value_problem(resolved)
        if problem is not None:
            return Outcome.failure(
                f"the value of header {name} {problem}",
                retryable=False,
                reason_code="bad_header",
            )
        headers[name] = resolved
    token = ctx.identity_token()
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    timestamp = int(time.time())
    if content_type and not any(k.lower() == "content-type" for k in headers):
        headers["Content-Type"] = content_type
    headers.setdefault("User-Agent", USER_AGENT)
    headers.update(
        {
            "X-Execution-Id": ctx.execution_id,
            "X-Scheduled-For": ctx.scheduled_for.astimezone(UTC).isoformat().replace("+00:00", "Z"),
            "X-Attempt": str(ctx.attempt),
            "X-Run": str(ctx.run),
            "X-Fencing-Token": str(ctx.fencing_token),
            "X-Signature-Timestamp": str(timestamp),
            "X-Signature": sign(ctx.signing_key, timestamp, ctx.execution_id, body),
        }
    )
    if ctx.completion_token is not None:
        headers["X-Completion-URL"] = str(ctx.completion_url)
        headers["X-Completion-Token"] = ctx.completion_token
    # The target joins the execution's trace (W3C traceparent).
    telemetry.inject(headers)

    try:
        addresses = resolve_checked(
            host, port, allow=netguard.AllowList.parse(ctx.egress_allow), timeout=ctx.remaining()
        )
    except netguard.Denied as denied:
        return Outcome.failure(
            f"not called: {denied.reason}", retryable=False, reason_code="ssrf_denied"
        )
    except OSError as exc:
        return Outcome.failure(
            f"cannot resolve {host}: {exc}",
            retryable=True,
            reason_code="dns",
            latency_ms=ctx.elapsed_ms(),
        )

    conn = PinnedConnection(
        host, port, addresses=addresses, tls=tls, timeout=max(0.001, ctx.remaining())
    )
    ctx.on_abort(conn.abort)
    status: int | None = None
    capture = ctx.capture()
    try:
        if ctx.aborted:
            raise Aborted(ctx.abort_reason)
        conn.request(method, path, body=body or None, headers=headers)
        response = conn.getresponse()
        status = response.status
        retry_after = response.getheader("Retry-After")
        location = response.getheader("Location") or ""
        # A text body that streams for longer than LIVE_LOG_QUIET_S is also the
        # attempt's live log, line by line as it arrives (a long response that reports
        # its progress is followed while it runs); one complete sooner costs nothing.
        live = (
            ctx.live_log(quiet_s=LIVE_LOG_QUIET_S)
            if is_text(response.getheader("Content-Type"))
            else None
        )
        # Stream and discard: only the excerpt (and the live log's cap) is kept,
        # whatever the body's size.
        while True:
            # read1: what has arrived (up to a chunk), not a full chunk's wait.
            chunk = response.read1(STREAM_CHUNK)
            if not chunk:
                break
            capture.feed(chunk)
            if live is not None:
                live.feed(chunk)
        if live is not None:
            live.close()
        if ctx.aborted:
            raise Aborted(ctx.abort_reason)
    except (OSError, http.client.HTTPException, Aborted) as exc:
        excerpt = capture.text(ctx.redact_bytes)
        if ctx.aborted and ctx.abort_reason == "deadline":
            return Outcome.failure(
                f"no complete response within the {ctx.timeout_s:g} s timeout"
                + (f" (status {status}, {capture.total} body bytes so far)" if status else ""),
                retryable=True,
                reason_code="timeout",
                status_code=status,
                excerpt=excerpt,
                latency_ms=ctx.elapsed_ms(),
            )
        if ctx.aborted:
            raise Aborted(ctx.abort_reason) from None
        what = "connection refused" if isinstance(exc, ConnectionRefusedError) else str(exc)
        return Outcome.failure(
            ctx.redact(f"{type(exc).__name__}: {what}"),
            retryable=True,
            reason_code="timeout" if isinstance(exc, TimeoutError) else "connection",
            status_code=status,
            excerpt=excerpt,
            latency_ms=ctx.elapsed_ms(),
        )
    finally:
        conn.close()

    excerpt = capture.text(ctx.redact_bytes)
    data = {"connected_ip": conn.connected_ip, "body_bytes": capture.total}
    ok, retryable = classify(status)
    if ok:
        # 202 with a callback completion: handed off (any other 2xx finished the run
        # within the request, and ends it here as without one).
        return Outcome.success(
            status_code=status,
            excerpt=excerpt,
            latency_ms=ctx.elapsed_ms(),
            data=data,
            awaiting=status == 202 and completion.by_callback(cfg),
        )
    if 300 <= status < 400:
        error = f"HTTP {status}: redirects are not followed" + (
            f" (to {location})" if location else ""
        )
        reason_code = "redirect"
    else:
        error = f"HTTP {status}"
        reason_code = f"http_{status}"
    return Outcome.failure(
        ctx.redact(error),
        retryable=retryable,
        reason_code=reason_code,
        status_code=status,
        excerpt=excerpt,
        retry_after_s=retry.parse_retry_after(retry_after) if status in (429, 503) else None,
        latency_ms=ctx.elapsed_ms(),
        data=data,
    )
