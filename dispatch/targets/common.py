"""Pieces every target kind's validation shares: secret references, known keys, timeouts."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from dispatch.exceptions import InvalidSchedule
from tenants.models import Tenant

MAX_TIMEOUT_S = 24 * 3600

# The secret reference grammar (docs/explanation/security.md, "Secret references"):
#   vault:<VAULT_MOUNT>/<tenant>/<segment>[/<segment>…]#<key>
#   env:<NAME>
# A segment is ASCII letters, digits, _ - and dots, never starting or ending with
# a dot: so no ".", "..", empty or %-encoded segment ever reaches a Vault URL,
# where an HTTP library would resolve "alpha/../beta" to another tenant's folder.
_SEGMENT = r"[A-Za-z0-9_-](?:[A-Za-z0-9_.-]{0,126}[A-Za-z0-9_-])?"
_VAULT_REST = re.compile(
    rf"(?P<tenant>[A-Za-z0-9_-]{{1,63}})/(?P<path>{_SEGMENT}(?:/{_SEGMENT}){{0,15}})"
    r"#(?P<key>[A-Za-z0-9_.-]{1,128})"
)
# Starts with a letter and has no "__": the separator of SCHED_SECRET_<TENANT>__<NAME>.
_ENV_NAME = re.compile(r"[A-Z](?:_?[A-Z0-9])*_?")
MAX_ENV_NAME = 64
MAX_REF = 512


class BadSecretRef(ValueError):
    """A reference that does not follow the grammar; `message` says which part and why."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class SecretRef:
    backend: str  # "vault" | "env"
    tenant: str = ""  # vault: the owner folder named in the reference
    path: tuple[str, ...] = ()  # vault: segments below the owner folder
    key: str = ""  # vault: the key inside the secret
    name: str = ""  # env: NAME


def parse_secret_ref(ref: Any) -> SecretRef:
    """Parse strictly; BadSecretRef otherwise. The mount is the platform's, never the tenant's."""
    if not isinstance(ref, str) or not ref or len(ref) > MAX_REF:
        raise BadSecretRef(f"must be a string of 1..{MAX_REF} characters")
    if ref.startswith("env:"):
        name = ref[4:]
        if len(name) > MAX_ENV_NAME or not _ENV_NAME.fullmatch(name):
            raise BadSecretRef(
                "env:NAME takes upper-case letters, digits and single underscores, "
                "starting with a letter (at most 64)"
            )
        return SecretRef(backend="env", name=name)
    if not ref.startswith("vault:"):
        raise BadSecretRef(
            "secret reference must look like 'vault:kv/<tenant>/path#key' or 'env:NAME'"
        )
    mount = settings.VAULT_MOUNT.strip("/")
    prefix = f"vault:{mount}/"
    if not ref.startswith(prefix):
        raise BadSecretRef(
            f"vault references use this platform's mount: 'vault:{mount}/<tenant>/path#key'"
        )
    rest = ref[len(prefix) :]
    match = _VAULT_REST.fullmatch(rest)
    if not match:
        before_key = rest.split("#", 1)[0]
        segments = before_key.split("/")
        if any(
            seg in {"", ".", ".."} or seg.startswith(".") or seg.endswith(".") for seg in segments
        ):
            raise BadSecretRef(
                "vault path segments may not be empty, '.', '..' or start or end with a dot"
            )
        if any(c in rest for c in "%\\?"):
            raise BadSecretRef("vault paths may not hold '%', '\\' or '?' (no encoded segments)")
        raise BadSecretRef(
            f"must look like 'vault:{mount}/<tenant>/path#key': path segments of letters, "
            "digits, _ - . (at most 16), a key of letters, digits, _ - ."
        )
    return SecretRef(
        backend="vault",
        tenant=match.group("tenant"),
        path=tuple(match.group("path").split("/")),
        key=match.group("key"),
    )


# Credential-looking names (headers and query parameters): their values must be
# secret references. Matched on the name's words (split on anything not a letter
# or digit) and on the words run together, so X-Auth, X-Hub-Signature, privateKey
# and X-Amz-Signature are all caught.
_CREDENTIAL_PARTS = (
    "authoriz",
    "token",
    "secret",
    "passw",
    "passphrase",
    "credential",
    "signature",
    "apikey",
    "privatekey",
    "accesskey",
    "secretkey",
    "signingkey",
    "clientkey",
    "session",
    "cookie",
    "bearer",
    "jwt",
    "hmac",
)
_CREDENTIAL_WORDS = {"auth", "key", "sig", "pwd", "pass", "otp", "sas", "saml"}
# Words that make "key" a credential in a query parameter (sort_key is not one).
_KEY_QUALIFIERS = {
    "private",
    "secret",
    "access",
    "api",
    "auth",
    "signing",
    "client",
    "master",
    "subscription",
    "app",
    "license",
    "encryption",
    "ssh",
}
# Header names that carry "key" but no credential.
_NOT_CREDENTIAL_HEADERS = {"idempotency-key", "x-idempotency-key"}


def credential_like(name: str, *, query: bool = False) -> bool:
    """Whether a header (or, with `query`, a URL query parameter) name suggests a credential."""
    lowered = name.lower()
    words = [w for w in re.split(r"[^a-z0-9]+", lowered) if w]
    joined = "".join(words)
    if any(part in joined for part in _CREDENTIAL_PARTS):
        return True
    hits = set(words) & _CREDENTIAL_WORDS
    if not hits:
        return False
    if not query:
        return lowered not in _NOT_CREDENTIAL_HEADERS
    if hits != {"key"}:
        return True
    return words == ["key"] or bool(set(words) & _KEY_QUALIFIERS)


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
    try:
        parsed = parse_secret_ref(ref)
    except BadSecretRef as bad:
        raise InvalidSchedule.field(field, bad.message) from None
    if parsed.backend == "vault" and parsed.tenant != tenant.slug:
        raise InvalidSchedule.field(
            field,
            f"vault secrets of this tenant live under '{settings.VAULT_MOUNT.strip('/')}/{tenant.slug}/'",
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


AUTH_TYPES = ("oidc",)
MAX_AUDIENCE = 512


def clean_auth(config: dict[str, Any], *, default_audience: str | None) -> dict[str, str] | None:
    """`target.auth`: `{"type": "oidc", "audience": ...}` asks for a workload identity
    token per attempt (dispatch/identity). The audience defaults to `default_audience`
    (an HTTP target's origin); kinds without one must name it. Stored resolved, so
    the definition shows the audience every token will carry."""
    auth = config.get("auth")
    if auth is None:
        return None
    if not isinstance(auth, dict):
        raise InvalidSchedule.field("target.auth", 'must be an object: {"type": "oidc"}')
    require_keys(auth, allowed={"type", "audience"}, prefix="target.auth")
    if auth.get("type") not in AUTH_TYPES:
        raise InvalidSchedule.field("target.auth.type", f"must be one of {', '.join(AUTH_TYPES)}")
    audience = auth.get("audience", default_audience)
    if audience is None:
        raise InvalidSchedule.field(
            "target.auth.audience", "is required for this target type (it has no URL to default to)"
        )
    if not isinstance(audience, str) or not audience.strip():
        raise InvalidSchedule.field("target.auth.audience", "must be a non-empty string")
    if len(audience) > MAX_AUDIENCE or any(ord(c) < 32 or ord(c) == 127 for c in audience):
        raise InvalidSchedule.field(
            "target.auth.audience",
            f"must be at most {MAX_AUDIENCE} characters, with no control characters",
        )
    return {"type": "oidc", "audience": audience}
