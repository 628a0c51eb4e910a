"""`Authorization: Bearer <token>` for the REST API."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from tenants.roles import Principal
from tenants.selectors import token_authenticate


class ServiceTokenAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[Principal, Any] | None:
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header:
            return None
        scheme, _, raw = header.partition(" ")
        if scheme.lower() != "bearer" or not raw.strip():
            raise exceptions.AuthenticationFailed("use 'Authorization: Bearer <token>'")
        principal = token_authenticate(raw=raw.strip())
        if principal is None:
            # One message for unknown, revoked and expired: no oracle for token state.
            raise exceptions.AuthenticationFailed("invalid, revoked or expired token")
        return principal, None

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="api"'


class ServiceTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    """Documents the bearer scheme in the OpenAPI document."""

    target_class = "tenants.api.authentication.ServiceTokenAuthentication"
    name = "serviceToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "bearerFormat": "sched_<prefix>_<secret>"}
