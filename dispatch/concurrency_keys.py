"""Keyed concurrency: "never more than `limit` runs of one key at once", across every
schedule and job of a tenant (issue 20, item 5).

A definition carries `concurrency_key = {"key": "<template>", "limit": 1,
"on_conflict": "queue" | "skip" | "replace"}`. The template's `{fields}` are dotted
paths into the definition — `{target.body.customer_id}`, `{args.customer}` (short for
`{target.args.customer}`, a managed command's arguments), `{name}` — filled with
scalars only (text, numbers, booleans).

The key is rendered when the definition is saved, not when an occurrence is
admitted: everything it may name is part of the definition, which is what the beat
admits from, so the two renderings are the same string — and an unknown field or a
key that renders too long is a 400 naming `concurrency_key.key`, never an occurrence
that fails at 03:00 for a typo. The rendered key is stored with the definition
(`Schedule.concurrency_key["rendered"]`) and, at admission, on the execution row
(`Execution.concurrency_key`), which is what holders are counted by.

Only named fields: no positional fields, conversions or format specs (str.format's
mini-language would let a template reach into objects), as in
dispatch/targets/command_spec.py.
"""

from __future__ import annotations

import hashlib
import re
import string
from typing import Any

from django.db import models

from dispatch.exceptions import InvalidSchedule

FIELD = "concurrency_key"
KEYS = {"key", "limit", "on_conflict"}
MAX_TEMPLATE = 200
MAX_KEY = 200
MAX_LIMIT = 1000
PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}(\.[A-Za-z0-9_-]{1,64}){0,7}$")
ROOTS = ("target", "args", "name")


class OnConflict(models.TextChoices):
    """What an occurrence does when its key already has `limit` active holders."""

    QUEUE = "queue"  # held: stays due, tried again at the next batch
    SKIP = "skip"  # recorded as skipped, naming the key and a holder
    REPLACE = "replace"  # the oldest holders are cancelled (fenced), then it runs


def _err(part: str, reason: str) -> InvalidSchedule:
    return InvalidSchedule.field(f"{FIELD}.{part}", reason)


def fields_of(template: str) -> list[str]:
    """The template's field paths, in order; InvalidSchedule naming `concurrency_key.key`."""
    try:
        pieces = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise _err("key", f"{exc} (write a literal brace as {{{{ or }}}})") from None
    found: list[str] = []
    for _, name, spec, conversion in pieces:
        if name is None:
            continue
        if spec or conversion or not PATH.match(name):
            raise _err(
                "key",
                f"{{{name}}} must be a dotted field path such as {{target.body.customer_id}}",
            )
        if name.split(".")[0] not in ROOTS:
            raise _err("key", f"unknown field {{{name}}}: fields start with target., args. or name")
        found.append(name)
    return found


def _lookup(path: str, definition: dict[str, Any]) -> str:
    parts = path.split(".")
    if parts[0] == "args":
        parts = ["target", *parts]
    value: Any = definition
    for i, part in enumerate(parts):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            where = ".".join(parts[: i + 1])
            raise _err("key", f"unknown field {{{path}}}: the definition has no {where}")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    raise _err("key", f"{{{path}}} is not a text or a number")


def render(template: str, definition: dict[str, Any]) -> str:
    """The key of `definition` (its `name` and cleaned `target`)."""
    out = []
    for literal, name, _, _ in string.Formatter().parse(template):
        out.append(literal)
        if name is not None:
            out.append(_lookup(name, definition))
    key = "".join(out)
    if not key.strip():
        raise _err("key", "renders to an empty key")
    if len(key) > MAX_KEY:
        raise _err("key", f"renders to {len(key)} characters; at most {MAX_KEY}")
    if any(ord(c) < 32 or ord(c) == 127 for c in key):
        raise _err("key", "renders to a key with control characters")
    return key


def clean(value: Any, *, name: str, target: dict[str, Any]) -> dict[str, Any] | None:
    """The stored form: {"key", "limit", "on_conflict", "rendered"}, or None (no key)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidSchedule.field(FIELD, 'must be an object {"key", "limit", "on_conflict"}')
    unknown = sorted(set(value) - KEYS)
    if unknown:
        raise _err(unknown[0], "unknown field")
    template = value.get("key")
    if not isinstance(template, str) or not template.strip():
        raise _err("key", "is required: a template such as customer-{target.body.customer_id}")
    if len(template) > MAX_TEMPLATE:
        raise _err("key", f"must be at most {MAX_TEMPLATE} characters")
    fields_of(template)
    limit = value.get("limit", 1)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise _err("limit", f"must be a whole number in 1..{MAX_LIMIT}")
    on_conflict = value.get("on_conflict", OnConflict.QUEUE)
    if on_conflict not in OnConflict.values:
        raise _err("on_conflict", f"must be one of {', '.join(OnConflict.values)}")
    rendered = render(template, {"name": name, "target": target})
    return {"key": template, "limit": limit, "on_conflict": str(on_conflict), "rendered": rendered}


def definition(stored: dict[str, Any] | None) -> dict[str, Any] | None:
    """The definition's view of the stored form (what the API shows and apply compares)."""
    if not stored:
        return None
    return {k: stored[k] for k in ("key", "limit", "on_conflict")}


def lock_id(tenant_id: int, key: str) -> int:
    """The transaction-scoped advisory lock of (tenant, key): a signed 64-bit hash.
    A collision only makes two keys take turns."""
    digest = hashlib.blake2b(f"{tenant_id}\x00{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)
