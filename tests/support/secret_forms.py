"""How a careless target may echo a credential: encoded, escaped, re-cased, embedded.
Shared by the secret tests of the excerpt and of the live log; importable by a
command the tests run (plain standard library)."""

from __future__ import annotations

import base64
import json
from urllib.parse import quote, quote_plus


def transformed(value: str) -> list[str]:
    raw = value.encode()
    return [
        base64.b64encode(raw).decode(),
        base64.b64encode(raw).decode().rstrip("="),
        base64.urlsafe_b64encode(raw).decode(),
        base64.b64encode(b"user:" + raw).decode(),  # Basic auth built around it
        base64.b64encode(b"xy:" + raw + b":z").decode(),
        quote(value, safe=""),
        quote(value, safe="").lower(),
        quote_plus(value),
        value.upper(),
        value.lower(),
        raw.hex(),
        raw.hex().upper(),
        json.dumps(value)[1:-1],
    ]
