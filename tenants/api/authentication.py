"""`Authorization: Bearer <token>` for the REST API."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from tenants import limits, services, tokens
from tenants.roles import Principal
from tenants.selectors import token_authenticate

FAILURE_SCOPE = "api-auth-fail"


def _failed(request: Request, raw: str, message: str) -> exceptions.APIException:
    """Count a failed token authentication against the client address; audit it.

    DRF authenticates before it throttles, so a throttle class never sees these
    requests: the count happens here. Past the limit the address gets 429 with
    Retry-After for every failed attempt. A valid token is still looked up and
    still works from that address, so a flood of bad tokens from a shared
    address (NAT, proxy) does not lock its real users out; tokens carry 190+
    bits, so the limit is about load and noise, not guessing.
    """
    address = limits.client_address(request)
    rate = limits.parse_rate(str(settings.API_AUTH_FAILURES_PER_ADDRESS))
    hit = limits.hit(FAILURE_SCOPE, address, rate)
    prefix = raw[: len("sched_") + 8] if tokens.looks_like_token(raw) else ""
    # Audited up to the limit and once when it is crossed, so a flood cannot
    # grow the (append-only) audit table without bound.
    if hit.count <= hit.limit + 1:
        services.auth_failure_record(
            action="auth.token_throttled" if hit.over else "auth.token_failed",
            address=address,
            surface="api",
            subject=prefix,
            object_type="token",
        )
    if hit.over:
        return exceptions.Throttled(
            wait=hit.retry_after_s, detail="too many failed authentications from this address"
        )
    return exceptions.AuthenticationFailed(message)


class ServiceTokenAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[Principal, Any] | None:
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header:
            return None
        scheme, _, raw = header.partition(" ")
        if scheme.lower() != "bearer" or not raw.strip():
            raise _failed(request, "", "use 'Authorization: Bearer <token>'")
        principal = token_authenticate(raw=raw.strip())
        if principal is None:
            # One message for unknown, revoked and expired: no oracle for token state.
            raise _failed(request, raw.strip(), "invalid, revoked or expired token")
        return principal, None

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="api"'


class ServiceTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    """Documents the bearer scheme in the OpenAPI document."""

    target_class = "tenants.api.authentication.ServiceTokenAuthentication"
    name = "serviceToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "bearerFormat": "sched_<prefix>_<secret>"}
