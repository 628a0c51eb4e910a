"""The schedule form's target editor: structured fields per target kind (an HTTP
call's method, URL, headers and body; a queue's broker, exchange and routing key; a
managed command's name, arguments and environment) beside the target as JSON.

One rule (`source`) says which of the two a submission means; `from_fields` builds
the target from the fields. Either way the result goes through the same validation
as the API's (dispatch/targets, via the services), so errors name the same fields
(`target.url`, `target.headers.X-Api-Key`, ...). Only shape is read here.

Keys the fields do not cover (`auth`, `completion`, `heartbeat_s`, and any later
one) are taken from the JSON as shown, so an edit through the fields keeps them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.api import inputs
from dispatch.targets import KINDS, http

FIELDS = "fields"
JSON = "json"

# The target kinds, in the validator's order (http, queue, command).
TYPES = tuple(KINDS)
METHODS = tuple(sorted(http.METHODS))
# Keys each kind's fields decide; anything else is kept from the JSON (same kind only).
COVERED = {
    "http": frozenset({"type", "url", "method", "headers", "body"}),
    "queue": frozenset({"type", "broker", "exchange", "routing_key", "body"}),
    "command": frozenset({"type", "command", "args", "env"}),
}
# Each kind's keys that are one form field (`target_<key>`) each.
SINGLE_FIELDS = {
    "http": ("url", "method"),
    "queue": ("broker", "exchange", "routing_key"),
    "command": ("command",),
}
TEXT, SECRET = "text", "secret"
BODY_JSON, BODY_TEXT = "json", "text"
# Header rows read from a submission: one past the validator's limit, so a 33rd
# header is refused by it ("at most 32") rather than dropped unseen.
MAX_HEADER_ROWS = http.MAX_HEADERS + 1


def fingerprint(text: str) -> str:
    """What the JSON box held, ignoring layout (a browser sends CRLF line breaks; a
    re-indented object is the same target): the hidden `target_shown` carries this
    for the text the server rendered, so a submission tells whether it was edited."""
    try:
        canonical = json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
    except (ValueError, RecursionError):
        canonical = text.replace("\r\n", "\n").strip()
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def source(data: Mapping[str, Any]) -> str:
    """The one rule: which part of a submitted schedule form is the target.

    JSON when the JSON box was edited (it differs from the text the page showed,
    `target_shown`), or when the submission has no structured fields at all (a client
    that knows only the JSON box). Otherwise the structured fields; an empty JSON box
    is not an edit. No script is needed: the browser sends both, this picks one."""
    if "target_type" not in data:
        return JSON
    text = str(data.get("target") or "").strip()
    if text and fingerprint(text) != str(data.get("target_shown") or ""):
        return JSON
    return FIELDS


class Problems(Exception):
    """Shape errors of the structured fields: form field name -> message (naming the
    target's field, like the validator's)."""

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__("; ".join(errors.values()))
        self.errors = errors


@dataclass(frozen=True)
class HeaderRow:
    name: str
    kind: str  # TEXT | SECRET
    value: str


def from_fields(values: Mapping[str, Any], rows: list[HeaderRow], *, base: Any) -> dict[str, Any]:
    """The target the structured fields describe, over `base` (the JSON as shown):
    its keys the fields do not cover are kept when it is of the same kind."""
    kind = str(values.get("target_type") or "")
    covered = COVERED.get(kind, frozenset({"type"}))
    target: dict[str, Any] = {}
    if isinstance(base, dict) and base.get("type") == kind:
        target = {k: v for k, v in base.items() if k not in covered}
    target["type"] = kind
    errors: dict[str, str] = {}
    # An empty field is left out: the validator then says the key "is required"
    # (or takes its default), rather than judging an empty string.
    for key in SINGLE_FIELDS.get(kind, ()):
        if values.get(f"target_{key}"):
            target[key] = values[f"target_{key}"]
    if kind == "http":
        target["headers"] = _headers(rows, errors)
    elif kind == "command":
        target["args"] = _lines(values.get("target_args"), "target_args", "args", errors)
        env = _lines(values.get("target_env"), "target_env", "env", errors)
        if env:
            target["env"] = {name: {"secret": ref} for name, ref in env.items()}
    if kind in ("http", "queue"):
        body = _body(values, errors)
        if body is not None:
            target["body"] = body
    if errors:
        raise Problems(errors)
    return target


def _headers(rows: list[HeaderRow], errors: dict[str, str]) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    for index, row in enumerate(rows):
        if not row.name:
            if row.value:
                errors[f"target_header_name_{index}"] = (
                    f"target.headers: row {index + 1} has a value but no header name"
                )
            continue
        if row.name in headers:
            errors[f"target_header_name_{index}"] = f"target.headers.{row.name}: is given twice"
            continue
        # A secret reference is stored as the API's {"secret": "vault:..."}: never a value.
        headers[row.name] = {"secret": row.value} if row.kind == SECRET else row.value
    return headers


def _lines(raw: Any, field: str, key: str, errors: dict[str, str]) -> dict[str, str]:
    """`name=value` lines (blank lines skipped) as an object."""
    out: dict[str, str] = {}
    for number, line in enumerate(str(raw or "").splitlines(), start=1):
        if not line.strip():
            continue
        name, sep, value = line.partition("=")
        name = name.strip()
        if not sep or not name:
            errors[field] = f"target.{key}: line {number} is not name=value"
        elif name in out:
            errors[field] = f"target.{key}.{name}: is given twice"
        else:
            out[name] = value.strip()
    return out


def _body(values: Mapping[str, Any], errors: dict[str, str]) -> Any:
    """The body textarea: empty is no body; JSON (the API's rules) or text, as chosen.
    A browser sends a textarea's line breaks as CRLF: kept as LF, as they were shown."""
    raw = str(values.get("target_body") or "").replace("\r\n", "\n")
    if not raw.strip():
        return None
    if values.get("target_body_format") == BODY_TEXT:
        return raw
    try:
        return inputs.loads_json(raw, "target.body")
    except inputs.InvalidInput as exc:
        errors["target_body"] = f"{exc.message}; choose 'text' to send it as written"
        return None


def initial(target: Any) -> tuple[dict[str, Any], list[HeaderRow]]:
    """The structured fields' values for a stored (or proposed) target, and its header rows."""
    t = target if isinstance(target, dict) else {}
    kind = t.get("type") if t.get("type") in TYPES else TYPES[0]
    values: dict[str, Any] = {
        "target_type": kind,
        "target_method": t.get("method") or "POST",
        "target_url": t.get("url") or "",
        "target_broker": t.get("broker") or "",
        "target_exchange": t.get("exchange") or "",
        "target_routing_key": t.get("routing_key") or "",
        "target_command": t.get("command") or "",
        "target_args": "\n".join(f"{k}={v}" for k, v in (t.get("args") or {}).items()),
        "target_env": "\n".join(
            f"{k}={v.get('secret', '') if isinstance(v, dict) else v}"
            for k, v in (t.get("env") or {}).items()
        ),
        "target_body_format": BODY_JSON,
        "target_body": "",
    }
    body = t.get("body")
    if isinstance(body, str):
        values |= {"target_body_format": BODY_TEXT, "target_body": body}
    elif body is not None:
        values["target_body"] = json.dumps(body, indent=1)
    rows = []
    for name, value in (t.get("headers") or {}).items():
        if isinstance(value, dict):
            rows.append(HeaderRow(str(name), SECRET, str(value.get("secret", ""))))
        else:
            rows.append(HeaderRow(str(name), TEXT, str(value)))
    return values, rows


def error_field(key: str, rows: list[HeaderRow]) -> str | None:
    """The structured field that shows the validator's error `key` (None: not one of
    theirs, e.g. target.auth, shown on the JSON box)."""
    simple = {
        "target.type": "target_type",
        "target.url": "target_url",
        "target.method": "target_method",
        "target.body": "target_body",
        "target.broker": "target_broker",
        "target.exchange": "target_exchange",
        "target.routing_key": "target_routing_key",
        "target.command": "target_command",
    }
    if key in simple:
        return simple[key]
    if key.startswith("target.body."):  # a JSON body's inner value (NUL, deep nesting)
        return "target_body"
    if key.startswith("target.headers."):
        name = key.removeprefix("target.headers.")
        for index, row in enumerate(rows):
            if row.name == name:
                return f"target_header_value_{index}"
    if key == "target.headers" and rows:
        return "target_header_name_0"
    for part in ("args", "env"):
        if key == f"target.{part}" or key.startswith(f"target.{part}."):
            return f"target_{part}"
    return None
