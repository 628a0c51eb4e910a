"""Pieces every target kind's validation shares: secret references, known keys, timeouts."""

from __future__ import annotations

import re
from typing import Any

from dispatch.exceptions import InvalidSchedule
from tenants.models import Tenant

# vault:<mount>/<tenant>/<path>#<key>  or  env:<NAME> (the embedded default's backend)
SECRET_REF = re.compile(
    r"^(vault):([A-Za-z0-9_-]+)/([A-Za-z0-9_.-]+)/([A-Za-z0-9_./-]+)#([A-Za-z0-9_.-]+)$|^(env):([A-Z][A-Z0-9_]{0,63})$"
)
MAX_TIMEOUT_S = 24 * 3600


def require_keys(config: dict[str, Any], *, allowed: set[str], prefix: str = "target") -> None:
    unknown = sorted(set(config) - allowed)
    if unknown:
        raise InvalidSchedule.field(f"{prefix}.{unknown[0]}", "unknown field")


def clean_secret_ref(value: Any, *, field: str, tenant: Tenant) -> dict[str, str]:
    """A secret reference `{"secret": "vault:kv/<tenant>/path#key"}`; never a secret value.

    Vault paths must live under the tenant's own folder, so one tenant can never
    name another tenant's secret.
    """
    if (
        not isinstance(value, dict)
        or set(value) != {"secret"}
        or not isinstance(value["secret"], str)
    ):
        raise InvalidSchedule.field(
            field, 'a secret must be a reference: {"secret": "vault:kv/<tenant>/path#key"}'
        )
    ref = value["secret"]
    match = SECRET_REF.match(ref)
    if not match:
        raise InvalidSchedule.field(
            field, "secret reference must look like 'vault:kv/<tenant>/path#key' or 'env:NAME'"
        )
    if match.group(1) == "vault" and match.group(3) != tenant.slug:
        raise InvalidSchedule.field(
            field, f"vault secrets of this tenant live under '<mount>/{tenant.slug}/'"
        )
    return {"secret": ref}


def clean_timeout(config: dict[str, Any], *, default: int = 300) -> int:
    value = config.get("timeout_s", default)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TIMEOUT_S:
        raise InvalidSchedule.field(
            "target.timeout_s", f"must be a whole number of seconds, 1..{MAX_TIMEOUT_S}"
        )
    return int(value)


def clean_str(
    config: dict[str, Any], key: str, *, required: bool, max_len: int, default: str = ""
) -> str:
    value = config.get(key)
    if value is None:
        if required:
            raise InvalidSchedule.field(f"target.{key}", "is required")
        return default
    if not isinstance(value, str):
        raise InvalidSchedule.field(f"target.{key}", "must be a string")
    if len(value) > max_len:
        raise InvalidSchedule.field(f"target.{key}", f"must be at most {max_len} characters")
    return value
