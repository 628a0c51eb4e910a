"""Target kinds: one module each, same shape — `clean(config, tenant=...) -> dict`
validates and normalises a target definition at save time (raising InvalidSchedule
naming the field); the execution path adds `run(...)` per kind."""

from __future__ import annotations

from typing import Any

from core.api import inputs
from dispatch.exceptions import InvalidSchedule
from dispatch.targets import command, http, queue_publish
from tenants.models import Tenant

KINDS = {"http": http, "queue": queue_publish, "command": command}


def clean_target(config: Any, *, tenant: Tenant) -> dict[str, Any]:
    if not isinstance(config, dict):
        raise InvalidSchedule.field("target", "must be an object with a 'type'")
    # Whoever the caller (the API's parser has checked JSON text; a form or a script
    # may hand over any Python value), refuse what jsonb cannot store (NaN, Infinity,
    # NUL, lone surrogates, runaway nesting) as a 400 naming the field, not a
    # DataError at the INSERT, before anything else walks it.
    problem = inputs.json_value_problem(config, "target")
    if problem:
        raise InvalidSchedule.field(*problem)
    kind = config.get("type")
    module = KINDS.get(kind) if isinstance(kind, str) else None
    if module is None:
        raise InvalidSchedule.field("target.type", f"must be one of {', '.join(sorted(KINDS))}")
    cleaned: dict[str, Any] = module.clean(config, tenant=tenant)
    return cleaned
