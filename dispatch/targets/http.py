"""HTTP callback targets.

Definition: {"type": "http", "url", "method", "headers", "body", "timeout_s"}.
Header values are strings, or secret references for anything credential-like.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from dispatch import netguard
from dispatch.exceptions import InvalidSchedule
from dispatch.targets.common import clean_secret_ref, clean_str, clean_timeout, require_keys
from tenants.models import Tenant

KEYS = {"type", "url", "method", "headers", "body", "timeout_s"}
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
    "x-signature",
    "x-signature-timestamp",
    "traceparent",
    "tracestate",
}
# Credential-bearing headers must be secret references, never literal values.
SENSITIVE_HEADER = re.compile(
    r"authorization|cookie|token|secret|password|passwd|api[-_]?key|credential|session", re.I
)
SENSITIVE_PARAM = re.compile(
    r"^(.*token|.*secret|.*password|passwd|api[-_]?key|apikey|key|sig|signature|auth|access[-_]?key)$",
    re.I,
)


def clean(config: dict[str, Any], *, tenant: Tenant) -> dict[str, Any]:
    require_keys(config, allowed=KEYS)
    url = clean_str(config, "url", required=True, max_len=MAX_URL)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidSchedule.field("target.url", f"is not a valid URL ({exc})") from None
    if parts.scheme not in {"http", "https"}:
        raise InvalidSchedule.field("target.url", "scheme must be http or https")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise InvalidSchedule.field(
            "target.url", "must not carry credentials; put them in a header as a secret reference"
        )
    host = parts.hostname or ""
    if not host:
        raise InvalidSchedule.field("target.url", "has no host")
    if any(c in url for c in "\r\n\t ") or any(ord(c) < 32 for c in url):
        raise InvalidSchedule.field("target.url", "contains whitespace or control characters")
    for name, _ in parse_qsl(parts.query, keep_blank_values=True):
        if SENSITIVE_PARAM.match(name):
            raise InvalidSchedule.field(
                "target.url",
                f"query parameter {name!r} looks like a credential; use a header with a secret reference",
            )
    try:
        netguard.check_host_at_save(host, allow=netguard.AllowList.parse(tenant.egress_allow))
    except netguard.Denied as denied:
        raise InvalidSchedule.field("target.url", denied.reason) from None
    if port is not None and not 1 <= port <= 65535:
        raise InvalidSchedule.field("target.url", "port out of range")

    method = clean_str(config, "method", required=False, max_len=8, default="POST").upper()
    if method not in METHODS:
        raise InvalidSchedule.field("target.method", f"must be one of {', '.join(sorted(METHODS))}")

    headers_in = config.get("headers", {})
    if not isinstance(headers_in, dict):
        raise InvalidSchedule.field("target.headers", "must be an object of header name to value")
    if len(headers_in) > MAX_HEADERS:
        raise InvalidSchedule.field("target.headers", f"at most {MAX_HEADERS} headers")
    headers: dict[str, Any] = {}
    for name, value in headers_in.items():
        field = f"target.headers.{name}"
        if not HEADER_NAME.match(name):
            raise InvalidSchedule.field(field, "is not a valid header name")
        if name.lower() in FORBIDDEN_HEADERS:
            raise InvalidSchedule.field(field, "is set by the platform and may not be supplied")
        if isinstance(value, dict):
            headers[name] = clean_secret_ref(value, field=field, tenant=tenant)
        elif isinstance(value, str):
            if SENSITIVE_HEADER.search(name):
                raise InvalidSchedule.field(
                    field,
                    'carries a credential: give a secret reference {"secret": "vault:..."}, not the value',
                )
            if len(value) > 4096 or any(c in value for c in "\r\n\x00"):
                raise InvalidSchedule.field(
                    field, "must be at most 4096 characters without line breaks"
                )
            headers[name] = value
        else:
            raise InvalidSchedule.field(field, "must be a string or a secret reference")

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
    return cleaned
