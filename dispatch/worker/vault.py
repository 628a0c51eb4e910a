"""Secret backends: resolve a secret reference to its value at run time.

References are stored in definitions; values never are. Two backends, with the
grammar of dispatch.targets.common.parse_secret_ref (docs/explanation/security.md,
"Secret references"):

* `vault:<VAULT_MOUNT>/<tenant>/<path>#<key>` — HashiCorp Vault KV v2 through hvac
  (`read_secret_version`), with the platform's token, on the platform's mount;
* `env:<NAME>` — the worker's environment variable
  `SCHED_SECRET_<TENANT>__<NAME>` (the embedded default; TENANT is the slug
  upper-cased, `-` as `_`), so one tenant can never name another tenant's variable.

Which backends a platform accepts is `settings.SECRETS_BACKEND`. Errors say
whether a later attempt may succeed (Vault down / 5xx / timeout) or not
(forbidden, missing path or key, malformed reference), and never carry a value.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from django.conf import settings

from dispatch.targets.common import BadSecretRef, parse_secret_ref
from dispatch.targets.runtime import SecretError
from tenants.naming import ENV_PREFIX, ENV_SEPARATOR, slug_env_key

log = logging.getLogger("dispatch.vault")  # its name before the move to dispatch/worker/
_local = threading.local()


def env_name(tenant_slug: str, name: str) -> str:
    """The environment variable behind `env:NAME` for a tenant.

    Injective: the tenant part never holds "__" (tenants.naming.slug_problem) and
    NAME never does and starts with a letter (the grammar), so `alpha` + `EU_X`
    (SCHED_SECRET_ALPHA__EU_X) and `alpha-eu` + `X` (SCHED_SECRET_ALPHA_EU__X) differ.
    """
    return f"{ENV_PREFIX}{slug_env_key(tenant_slug)}{ENV_SEPARATOR}{name}"


def resolve(ref: str, *, tenant_slug: str) -> str:
    """The value of secret reference `ref` for tenant `tenant_slug`, or SecretError.

    Parsed again here with the save-time grammar: definitions outlive renames and
    settings changes, and rows can be edited outside the API.
    """
    try:
        parsed = parse_secret_ref(ref)
    except BadSecretRef as bad:
        # Not quoted: a malformed "reference" may be a value pasted in its place.
        raise SecretError(f"malformed secret reference: {bad.message}", retryable=False) from None
    if parsed.backend not in settings.SECRETS_BACKEND:
        raise SecretError(
            f"secret backend {parsed.backend!r} is not enabled on this platform "
            f"(enabled: {', '.join(settings.SECRETS_BACKEND) or 'none'})",
            retryable=False,
        )
    if parsed.backend == "env":
        return _from_env(parsed.name, tenant_slug=tenant_slug)
    mount = settings.VAULT_MOUNT.strip("/")
    if parsed.tenant != tenant_slug:
        raise SecretError(
            f"secret {ref!r} is outside this tenant's vault folder '{mount}/{tenant_slug}/'",
            retryable=False,
        )
    # Built from the tenant's own folder, never from the reference's text.
    path = "/".join((tenant_slug, *parsed.path))
    if any(seg in {"", ".", ".."} for seg in path.split("/")) or "%" in path:
        # Unreachable through the grammar; kept so a grammar change cannot reopen traversal.
        raise SecretError(
            f"secret {ref!r} has a path outside this tenant's folder", retryable=False
        )
    return _from_vault(mount, path, parsed.key, ref=ref)


def _from_env(name: str, *, tenant_slug: str) -> str:
    var = env_name(tenant_slug, name)
    value = os.environ.get(var)
    if value is None:
        raise SecretError(
            f"secret env:{name} is not configured for tenant {tenant_slug} (no {var} on the worker)",
            retryable=False,
        )
    return value


def _client() -> Any:
    import hvac

    # One client (one HTTP session, kept-alive connections) per worker thread.
    client = getattr(_local, "client", None)
    if client is None:
        if not settings.VAULT_ADDR:
            raise SecretError("VAULT_ADDR is not configured on this platform", retryable=False)
        client = hvac.Client(
            url=settings.VAULT_ADDR, token=settings.VAULT_TOKEN, timeout=settings.VAULT_TIMEOUT_S
        )
        _local.client = client
    return client


def _from_vault(mount: str, path: str, key: str, *, ref: str) -> str:
    import hvac.exceptions as hv
    import requests

    try:
        response = _client().secrets.kv.v2.read_secret_version(
            path=path, mount_point=mount, raise_on_deleted_version=True
        )
    except hv.Forbidden:
        raise SecretError(f"vault denied access to {ref!r} (403)", retryable=False) from None
    except hv.Unauthorized:
        raise SecretError(
            f"vault rejected the platform's token reading {ref!r} (401)", retryable=False
        ) from None
    except hv.InvalidPath:
        raise SecretError(f"vault has no secret at {ref!r} (404)", retryable=False) from None
    except hv.InvalidRequest as exc:  # 400: the reference itself is wrong
        raise SecretError(
            f"vault refused the request for {ref!r} ({type(exc).__name__})", retryable=False
        ) from None
    except (hv.VaultError, requests.RequestException) as exc:
        # 5xx, sealed, rate-limited, timeouts, refused connections: Vault may recover.
        raise SecretError(
            f"vault unavailable reading {ref!r} ({type(exc).__name__})",
            retryable=True,
        ) from None
    data = ((response or {}).get("data") or {}).get("data") or {}
    if key not in data:
        raise SecretError(f"vault secret {ref!r} has no key {key!r}", retryable=False)
    value = data[key]
    if not isinstance(value, str):
        raise SecretError(f"vault secret {ref!r} key {key!r} is not a string", retryable=False)
    return value
