"""A run's workload identity token, minted by the worker for each attempt whose
target asks for one (`"auth": {"type": "oidc", "audience": ...}`).

The token is a JWT signed ES256 by the key ring's current key, with `kid` in its
header, verifiable by any OIDC/JOSE library against the platform's JWKS
(/.well-known/jwks.json, found through /.well-known/openid-configuration):

- `iss` PLATFORM_URL, `aud` the target's audience, `sub` "tenant:<slug>:schedule:<id>";
- `iat`, `nbf` and `exp`: it lives as long as the attempt's timeout, at most an hour;
- the attempt it was made for: `execution_id`, `scheduled_for`, `attempt`, `run`,
  `fencing_token`, with `tenant` and `schedule_id`; `jti` is
  "<execution_id>:<attempt>:<fencing_token>", unique per attempt.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import UTC
from typing import TYPE_CHECKING, Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec
from django.conf import settings

from dispatch.identity import keys
from dispatch.selectors.identity import MAX_TOKEN_LIFETIME_S, SIGNER_CACHE_S
from dispatch.services.identity import key_ensure

if TYPE_CHECKING:
    from dispatch.targets.runtime import RunContext


@dataclass(frozen=True)
class _Signer:
    kid: str
    private: ec.EllipticCurvePrivateKey
    looked_up: float  # time.monotonic()


_lock = threading.Lock()
_signer: _Signer | None = None


def issuer() -> str:
    return str(settings.PLATFORM_URL).rstrip("/")


def subject(tenant_slug: str, schedule_id: str) -> str:
    return f"tenant:{tenant_slug}:schedule:{schedule_id}"


def lifetime_s(timeout_s: float) -> int:
    """At most the attempt's timeout (rounded up to a whole second) and an hour."""
    return max(1, min(int(-(-timeout_s // 1)), MAX_TOKEN_LIFETIME_S))


# Every claim a token carries (the discovery document lists them).
CLAIMS = (
    "iss",
    "aud",
    "sub",
    "iat",
    "nbf",
    "exp",
    "jti",
    "tenant",
    "schedule_id",
    "execution_id",
    "scheduled_for",
    "attempt",
    "run",
    "fencing_token",
)


def claims_for(ctx: RunContext, audience: str, *, now: int) -> dict[str, Any]:
    return {
        "iss": issuer(),
        "aud": audience,
        "sub": subject(ctx.tenant_slug, ctx.schedule_id),
        "iat": now,
        "nbf": now,
        "exp": now + lifetime_s(ctx.timeout_s),
        "jti": f"{ctx.execution_id}:{ctx.attempt}:{ctx.fencing_token}",
        "tenant": ctx.tenant_slug,
        "schedule_id": ctx.schedule_id,
        "execution_id": ctx.execution_id,
        "scheduled_for": ctx.scheduled_for.astimezone(UTC).isoformat().replace("+00:00", "Z"),
        "attempt": ctx.attempt,
        "run": ctx.run,
        "fencing_token": ctx.fencing_token,
    }


def mint(ctx: RunContext, audience: str) -> str:
    """The signed token for this attempt and audience. Raises keys.KeyUnavailable."""
    signer = _current_signer()
    claims = claims_for(ctx, audience, now=int(time.time()))
    return jwt.encode(
        claims, signer.private, algorithm=keys.ALGORITHM, headers={"kid": signer.kid, "typ": "JWT"}
    )


def _current_signer() -> _Signer:
    """The key ring's signing key, looked up at most every SIGNER_CACHE_S (the JWKS
    keeps a retired key that long beyond its tokens' lifetime for this reason)."""
    global _signer
    with _lock:
        cached = _signer
        if cached is not None and time.monotonic() - cached.looked_up < SIGNER_CACHE_S:
            return cached
        key = key_ensure()
        if cached is not None and cached.kid == key.kid:
            private = cached.private
        else:
            private = keys.unseal(key.kid, bytes(key.sealed_private_key))
        _signer = _Signer(kid=key.kid, private=private, looked_up=time.monotonic())
        return _signer


def forget_signer() -> None:
    """Look the signing key up again at the next token. Only tests call it (to see a
    rotation at once); a worker picks a rotation up within SIGNER_CACHE_S."""
    global _signer
    with _lock:
        _signer = None
