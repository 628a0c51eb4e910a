"""Token management over the API (admin role)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from core.api.views import StrictQueryView
from dispatch.api.serializers import InstantField, StrictSerializer, iso_z
from tenants import selectors, services
from tenants.models import ServiceToken
from tenants.roles import Principal, Role


class TokenInSerializer(StrictSerializer):
    read_only_names = {"id", "prefix", "created_at", "last_used_at", "revoked_at", "token"}
    name = serializers.CharField(max_length=100)
    role = serializers.ChoiceField(choices=[r.label for r in Role])
    expires_at = InstantField(
        required=False, allow_null=True, help_text="in the future; absent or null: never expires"
    )


class TokenOutDoc(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    name = serializers.CharField()
    role = serializers.CharField()
    prefix = serializers.CharField()
    created_at = serializers.DateTimeField()
    created_by = serializers.CharField()
    expires_at = serializers.DateTimeField(allow_null=True)
    last_used_at = serializers.DateTimeField(allow_null=True)
    revoked_at = serializers.DateTimeField(allow_null=True)


class TokenCreatedDoc(TokenOutDoc):
    token = serializers.CharField(help_text="the secret; shown in this response only")


class TokenListDoc(serializers.Serializer[Any]):
    results = TokenOutDoc(many=True)


def token_out(t: ServiceToken) -> dict[str, Any]:
    return {
        "id": t.pk,
        "name": t.name,
        "role": t.role,
        "prefix": t.prefix,
        "created_at": iso_z(t.created_at),
        "created_by": t.created_by,
        "expires_at": iso_z(t.expires_at),
        "last_used_at": iso_z(t.last_used_at),
        "revoked_at": iso_z(t.revoked_at),
    }


def _principal(request: Request) -> Principal:
    assert isinstance(request.user, Principal)  # noqa: S101
    return request.user


class TokenListView(StrictQueryView):
    read_role = Role.ADMIN
    write_role = Role.ADMIN

    @extend_schema(responses={200: TokenListDoc})
    def get(self, request: Request) -> Response:
        tokens = selectors.token_list(tenant=_principal(request).tenant)
        return Response({"results": [token_out(t) for t in tokens]})

    @extend_schema(request=TokenInSerializer, responses={201: TokenCreatedDoc})
    def post(self, request: Request) -> Response:
        ser = TokenInSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        actor = _principal(request)
        token, raw = services.token_issue(
            tenant=actor.tenant,
            name=ser.validated_data["name"],
            role=Role.parse(ser.validated_data["role"]),
            expires_at=ser.validated_data.get("expires_at"),
            actor=actor,
        )
        # The only time the secret is ever shown.
        return Response(token_out(token) | {"token": raw}, status=status.HTTP_201_CREATED)


class TokenDetailView(StrictQueryView):
    read_role = Role.ADMIN
    write_role = Role.ADMIN

    @extend_schema(responses={204: None})
    def delete(self, request: Request, pk: int) -> Response:
        actor = _principal(request)
        services.token_revoke(tenant=actor.tenant, token_id=pk, actor=actor)
        return Response(status=status.HTTP_204_NO_CONTENT)


class SigningKeyDoc(serializers.Serializer[Any]):
    signing_key = serializers.CharField()
    algorithm = serializers.CharField()
    signed = serializers.CharField()


def _signing_key_body(key: str) -> dict[str, str]:
    return {
        "signing_key": key,
        "algorithm": "HMAC-SHA256",
        "signed": "{X-Signature-Timestamp}.{X-Execution-Id}.{body}",
    }


class SigningKeyView(StrictQueryView):
    """The tenant's callback signing key (admin): how receivers verify X-Signature."""

    read_role = Role.ADMIN
    write_role = Role.ADMIN

    @extend_schema(responses={200: SigningKeyDoc})
    def get(self, request: Request) -> Response:
        return Response(_signing_key_body(_principal(request).tenant.signing_key))


class SigningKeyRotateView(StrictQueryView):
    """`POST /v1/signing-key:rotate`, and only that path: a new key, the old one stops verifying."""

    read_role = Role.ADMIN
    write_role = Role.ADMIN

    @extend_schema(request=None, responses={200: SigningKeyDoc})
    def post(self, request: Request) -> Response:
        actor = _principal(request)
        key = services.signing_key_rotate(tenant=actor.tenant, actor=actor)
        return Response(_signing_key_body(key))
