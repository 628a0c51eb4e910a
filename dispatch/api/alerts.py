"""Alert channels (`/v1/alert-channels`), admins only: list, create, read, edit,
delete, and `:test` (send a test message now and answer what happened).

A channel's config holds addresses and secret references, never a secret value
(dispatch/alerting/channel_config.py); webhook URLs are checked by the SSRF guard
when saved and again, on their resolved addresses, when a message is sent.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from core.api.views import StrictQueryView
from dispatch import selectors, services
from dispatch.api import views
from dispatch.api.serializers import EmptySerializer, StrictSerializer, iso_z
from dispatch.models import AlertChannel
from dispatch.states import ChannelKind
from tenants.roles import Role

CHANNEL_ID = OpenApiParameter("id", OpenApiTypes.UUID, OpenApiParameter.PATH)
CONFIG_HELP = (
    'email: {"to": ["ops@example.com"]}; slack: {"url": "https://hooks..." or '
    '{"secret": "<ref>"}}; webhook: {"url": ..., "headers": {name: string or '
    '{"secret": "<ref>"}}}. Secret references only, never a secret value.'
)


def channel_out(channel: AlertChannel) -> dict[str, Any]:
    return {
        "id": str(channel.id),
        "name": channel.name,
        "kind": channel.kind,
        "config": channel.config,
        "enabled": channel.enabled,
        "created_at": iso_z(channel.created_at),
        "updated_at": iso_z(channel.updated_at),
    }


class ChannelInSerializer(StrictSerializer):
    name = serializers.CharField(max_length=100)
    kind = serializers.ChoiceField(choices=ChannelKind.choices)
    config = serializers.JSONField(help_text=CONFIG_HELP)
    enabled = serializers.BooleanField(required=False, default=True)


class ChannelPatchSerializer(StrictSerializer):
    name = serializers.CharField(max_length=100, required=False)
    kind = serializers.ChoiceField(
        choices=ChannelKind.choices, required=False, help_text="cannot change (400 if it differs)"
    )
    config = serializers.JSONField(required=False, help_text=CONFIG_HELP)
    enabled = serializers.BooleanField(required=False)


class ChannelOutDoc(serializers.Serializer[Any]):
    id = serializers.UUIDField()
    name = serializers.CharField()
    kind = serializers.ChoiceField(choices=ChannelKind.choices)
    config = serializers.JSONField(help_text=CONFIG_HELP)
    enabled = serializers.BooleanField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class ChannelListDoc(serializers.Serializer[Any]):
    results = ChannelOutDoc(many=True)


class ChannelTestDoc(serializers.Serializer[Any]):
    ok = serializers.BooleanField(help_text="whether the channel accepted the message")
    detail = serializers.CharField(
        help_text='what happened: "HTTP 200", "sent to 2 recipients", or why it failed'
    )


class AdminOnly(StrictQueryView):
    # Channels name where a tenant's alerts go (and which secrets): admins only, reads too.
    read_role = Role.ADMIN
    write_role = Role.ADMIN


class AlertChannelListView(AdminOnly):
    @extend_schema(operation_id="alert_channels_list", responses={200: ChannelListDoc})
    def get(self, request: Request) -> Response:
        channels = selectors.alert_channel_list(tenant=views.principal(request).tenant)
        return Response({"results": [channel_out(c) for c in channels]})

    @extend_schema(
        operation_id="alert_channels_create",
        request=ChannelInSerializer,
        responses={201: ChannelOutDoc},
    )
    def post(self, request: Request) -> Response:
        data = views._validated(ChannelInSerializer, request)
        channel = services.alert_channel_create(actor=views.principal(request), data=data)
        response = Response(channel_out(channel), status=status.HTTP_201_CREATED)
        response["Location"] = f"/v1/alert-channels/{channel.id}"
        return response


class AlertChannelDetailView(AdminOnly):
    @extend_schema(
        operation_id="alert_channels_get", parameters=[CHANNEL_ID], responses={200: ChannelOutDoc}
    )
    def get(self, request: Request, pk: str) -> Response:
        tenant = views.principal(request).tenant
        return Response(channel_out(selectors.alert_channel_get(tenant=tenant, channel_id=pk)))

    @extend_schema(
        operation_id="alert_channels_update",
        parameters=[CHANNEL_ID],
        request=ChannelPatchSerializer,
        responses={200: ChannelOutDoc},
    )
    def patch(self, request: Request, pk: str) -> Response:
        data = views._validated(ChannelPatchSerializer, request)
        channel = services.alert_channel_update(
            actor=views.principal(request), channel_id=pk, data=data
        )
        return Response(channel_out(channel))

    @extend_schema(
        operation_id="alert_channels_delete", parameters=[CHANNEL_ID], responses={204: None}
    )
    def delete(self, request: Request, pk: str) -> Response:
        services.alert_channel_delete(actor=views.principal(request), channel_id=pk)
        return Response(status=status.HTTP_204_NO_CONTENT)


class AlertChannelTestView(AdminOnly):
    @extend_schema(
        operation_id="alert_channels_test",
        parameters=[CHANNEL_ID],
        request=None,
        responses={200: ChannelTestDoc},
        description="Send a test message over the channel now (enabled or not). Answers 200 "
        "with `ok` and what happened either way: a refused or unreachable destination is "
        "the test's result, not an API error.",
    )
    def post(self, request: Request, pk: str) -> Response:
        if request.data:
            views._validated(EmptySerializer, request)
        result = services.alert_channel_test(actor=views.principal(request), channel_id=pk)
        return Response({"ok": result.ok, "detail": result.detail})
