"""Alert channels (`/v1/alert-channels`), admins only: list, create, read, edit,
delete, and `:test` (send a test message now and answer what happened). Alert
policies (`/v1/alert-policy`, the tenant default; `/v1/schedules/{id}/alert-policy`,
a schedule's override) and `/v1/schedules/{id}:snooze`: read by viewers, set by
operators.

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
from dispatch.api.serializers import EmptySerializer, InstantField, StrictSerializer, iso_z
from dispatch.models import AlertChannel, MaintenanceWindow, Schedule
from dispatch.states import ChannelKind
from tenants.roles import Role

CHANNEL_ID = OpenApiParameter("id", OpenApiTypes.UUID, OpenApiParameter.PATH)
CONFIG_HELP = (
    'email: {"to": ["ops@example.com"]}; slack: {"url": "https://hooks..." or '
    '{"secret": "<ref>"}}; webhook: {"url": ..., "headers": {name: string or '
    '{"secret": "<ref>"}}}. Secret references only, never a secret value.'
)


def channels_out(channels: list[AlertChannel]) -> list[dict[str, Any]]:
    """The channels as the API answers them, each with the policies that send to it."""
    if not channels:
        return []
    use = selectors.alert_channel_use(tenant=channels[0].tenant, channels=channels)
    return [
        {
            "id": str(channel.id),
            "name": channel.name,
            "kind": channel.kind,
            "config": channel.config,
            "enabled": channel.enabled,
            "used_by": {
                "default_policy": use[channel.id].default_policy,
                "schedule_policies": use[channel.id].schedule_policies,
            },
            "created_at": iso_z(channel.created_at),
            "updated_at": iso_z(channel.updated_at),
        }
        for channel in channels
    ]


def channel_out(channel: AlertChannel) -> dict[str, Any]:
    return channels_out([channel])[0]


def _as_sent(serializer_cls: type[StrictSerializer], request: Request) -> dict[str, Any]:
    """The body's fields as sent, once the serializer has checked names and shapes:
    DRF would read "5" as 5 and 0 as false, and the services refuse what is not
    really a number or a boolean."""
    validated = views.validate_request(serializer_cls, request)
    return {key: request.data[key] for key in validated if key in request.data}


class ChannelInSerializer(StrictSerializer):
    name = serializers.CharField(max_length=100)
    kind = serializers.ChoiceField(choices=ChannelKind.choices)
    config = serializers.JSONField(help_text=CONFIG_HELP)
    enabled = serializers.BooleanField(required=False, default=True)
    use_in_default_policy = serializers.BooleanField(
        required=False,
        default=True,
        help_text="when the tenant's default policy names its channels, add this one to "
        "them (a policy that names none sends to every enabled channel already)",
    )


class UsedByDoc(serializers.Serializer[Any]):
    default_policy = serializers.BooleanField(
        help_text="the tenant's default policy sends to it (every schedule without its own)"
    )
    schedule_policies = serializers.IntegerField(
        help_text="how many schedules' own policies send to it; with default_policy false "
        "and 0 here, no alert reaches this channel"
    )


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
    used_by = UsedByDoc()
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
        return Response({"results": channels_out(channels)})

    @extend_schema(
        operation_id="alert_channels_create",
        request=ChannelInSerializer,
        responses={201: ChannelOutDoc},
    )
    def post(self, request: Request) -> Response:
        data = _as_sent(ChannelInSerializer, request)
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
        data = _as_sent(ChannelPatchSerializer, request)
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
            views.validate_request(EmptySerializer, request)
        result = services.alert_channel_test(actor=views.principal(request), channel_id=pk)
        return Response({"ok": result.ok, "detail": result.detail})


# --- Alert policies and snooze -------------------------------------------------

POLICY_HELP = {
    "failure_threshold": "alert on the Nth consecutive dead/timed_out occurrence (1..1000)",
    "recovery": "alert on the first success after a failure alert",
    "realert_s": "while still failing, alert again this long after the last failure alert "
    "(0: never)",
    "auto_pause_after": "pause the schedule after this many consecutive failures, until a "
    "person resumes it (0: never)",
    "channels": "alert channel ids; empty: every enabled channel of the tenant",
    "late_after_s": "alert when an occurrence has not started this long after its due time "
    "(0: never)",
    "max_duration_s": "alert when an occurrence is still running this long after it started "
    "(0: never)",
}


class PolicyInSerializer(StrictSerializer):
    """A whole policy: a field left out takes its built-in default."""

    failure_threshold = serializers.IntegerField(
        required=False, min_value=1, max_value=1000, help_text=POLICY_HELP["failure_threshold"]
    )
    recovery = serializers.BooleanField(required=False, help_text=POLICY_HELP["recovery"])
    realert_s = serializers.IntegerField(
        required=False, min_value=0, max_value=30 * 86400, help_text=POLICY_HELP["realert_s"]
    )
    auto_pause_after = serializers.IntegerField(
        required=False, min_value=0, max_value=1000, help_text=POLICY_HELP["auto_pause_after"]
    )
    late_after_s = serializers.IntegerField(
        required=False, min_value=0, max_value=7 * 86400, help_text=POLICY_HELP["late_after_s"]
    )
    max_duration_s = serializers.IntegerField(
        required=False, min_value=0, max_value=7 * 86400, help_text=POLICY_HELP["max_duration_s"]
    )
    channels = serializers.ListField(
        child=serializers.UUIDField(),
        required=False,
        max_length=50,
        help_text=POLICY_HELP["channels"],
    )


class PolicyOutDoc(serializers.Serializer[Any]):
    failure_threshold = serializers.IntegerField(help_text=POLICY_HELP["failure_threshold"])
    recovery = serializers.BooleanField(help_text=POLICY_HELP["recovery"])
    realert_s = serializers.IntegerField(help_text=POLICY_HELP["realert_s"])
    auto_pause_after = serializers.IntegerField(help_text=POLICY_HELP["auto_pause_after"])
    late_after_s = serializers.IntegerField(help_text=POLICY_HELP["late_after_s"])
    max_duration_s = serializers.IntegerField(help_text=POLICY_HELP["max_duration_s"])
    channels = serializers.ListField(
        child=serializers.UUIDField(), help_text=POLICY_HELP["channels"]
    )
    # The metaclass moves declared fields off the class: no clash with Field.source.
    source = serializers.ChoiceField(  # type: ignore[assignment]
        choices=["schedule", "tenant", "built-in"],
        help_text="where it comes from: the schedule's override, the tenant default, or the "
        "built-in default",
    )


class SchedulePolicyOutDoc(PolicyOutDoc):
    snoozed_until = serializers.DateTimeField(
        allow_null=True, help_text="no alert of this schedule is sent before this instant"
    )


class SnoozeInSerializer(StrictSerializer):
    until = InstantField(allow_null=True, help_text="an instant in the future; null ends it")


def policy_out(policy: selectors.EffectivePolicy) -> dict[str, Any]:
    return policy.values | {"channels": policy.channels, "source": policy.source}


def schedule_policy_out(policy: selectors.EffectivePolicy, schedule: Schedule) -> dict[str, Any]:
    snoozed = schedule.alert_snoozed_until
    return policy_out(policy) | {"snoozed_until": iso_z(snoozed) if snoozed else None}


def _policy_data(request: Request) -> dict[str, Any]:
    return _as_sent(PolicyInSerializer, request)


class TenantPolicyView(StrictQueryView):
    @extend_schema(operation_id="alert_policy_get", responses={200: PolicyOutDoc})
    def get(self, request: Request) -> Response:
        tenant = views.principal(request).tenant
        return Response(policy_out(selectors.policy_effective(tenant=tenant)))

    @extend_schema(
        operation_id="alert_policy_set",
        request=PolicyInSerializer,
        responses={200: PolicyOutDoc},
        description="Set the tenant's default alert policy (whole: a field left out takes "
        "its built-in default). Schedules without an override of their own follow it.",
    )
    def put(self, request: Request) -> Response:
        policy = services.alert_policy_set(
            actor=views.principal(request), data=_policy_data(request)
        )
        return Response(policy_out(policy))


class SchedulePolicyView(StrictQueryView):
    @extend_schema(
        operation_id="schedules_alert_policy_get",
        parameters=[views.SCHEDULE_ID],
        responses={200: SchedulePolicyOutDoc},
    )
    def get(self, request: Request, pk: str) -> Response:
        tenant = views.principal(request).tenant
        schedule = selectors.schedule_get(tenant=tenant, schedule_id=pk)
        policy = selectors.policy_effective(tenant=tenant, schedule=schedule)
        return Response(schedule_policy_out(policy, schedule))

    @extend_schema(
        operation_id="schedules_alert_policy_set",
        parameters=[views.SCHEDULE_ID],
        request=PolicyInSerializer,
        responses={200: SchedulePolicyOutDoc},
        description="Give the schedule its own alert policy (whole: it replaces the tenant "
        "default for this schedule).",
    )
    def put(self, request: Request, pk: str) -> Response:
        actor = views.principal(request)
        policy = services.alert_policy_set(actor=actor, data=_policy_data(request), schedule_id=pk)
        schedule = selectors.schedule_get(tenant=actor.tenant, schedule_id=pk)
        return Response(schedule_policy_out(policy, schedule))

    @extend_schema(
        operation_id="schedules_alert_policy_delete",
        parameters=[views.SCHEDULE_ID],
        responses={200: SchedulePolicyOutDoc},
        description="Drop the schedule's own policy; answers the one that applies now.",
    )
    def delete(self, request: Request, pk: str) -> Response:
        actor = views.principal(request)
        policy = services.alert_policy_delete(actor=actor, schedule_id=pk)
        schedule = selectors.schedule_get(tenant=actor.tenant, schedule_id=pk)
        return Response(schedule_policy_out(policy, schedule))


class ScheduleSnoozeView(StrictQueryView):
    @extend_schema(
        operation_id="schedules_snooze",
        parameters=[views.SCHEDULE_ID],
        request=SnoozeInSerializer,
        responses={200: SchedulePolicyOutDoc},
        description="Hold the schedule's alerts until `until` (null ends the snooze). Its "
        "failures still count toward the threshold and the auto-pause; an alert owed "
        "meanwhile is not sent later.",
    )
    def post(self, request: Request, pk: str) -> Response:
        actor = views.principal(request)
        data = views.validate_request(SnoozeInSerializer, request)
        schedule = services.schedule_snooze(actor=actor, schedule_id=pk, until=data["until"])
        policy = selectors.policy_effective(tenant=actor.tenant, schedule=schedule)
        return Response(schedule_policy_out(policy, schedule))


# --- Maintenance windows ---------------------------------------------------------

WINDOW_ID = OpenApiParameter("id", OpenApiTypes.UUID, OpenApiParameter.PATH)


class WindowInSerializer(StrictSerializer):
    name = serializers.CharField(max_length=100)
    starts_at = InstantField(required=False, help_text="a one-off window's start")
    ends_at = InstantField(required=False, help_text="a one-off window's end (in the future)")
    cron = serializers.CharField(
        max_length=200, required=False, help_text="a recurring window: when each one opens"
    )
    timezone = serializers.CharField(max_length=64, required=False, help_text="of the cron")
    duration_s = serializers.IntegerField(
        required=False, min_value=60, max_value=7 * 86400, help_text="how long each stays open"
    )


class WindowOutDoc(serializers.Serializer[Any]):
    id = serializers.UUIDField()
    name = serializers.CharField()
    starts_at = serializers.DateTimeField(allow_null=True)
    ends_at = serializers.DateTimeField(allow_null=True)
    cron = serializers.CharField(allow_null=True)
    timezone = serializers.CharField()
    duration_s = serializers.IntegerField()


class WindowListDoc(serializers.Serializer[Any]):
    results = WindowOutDoc(many=True)


def window_out(window: MaintenanceWindow) -> dict[str, Any]:
    return {
        "id": str(window.id),
        "name": window.name,
        "starts_at": iso_z(window.starts_at) if window.starts_at else None,
        "ends_at": iso_z(window.ends_at) if window.ends_at else None,
        "cron": window.cron or None,
        "timezone": window.timezone,
        "duration_s": window.duration_s,
    }


class MaintenanceWindowListView(StrictQueryView):
    @extend_schema(operation_id="maintenance_windows_list", responses={200: WindowListDoc})
    def get(self, request: Request) -> Response:
        windows = MaintenanceWindow.objects.filter(tenant=views.principal(request).tenant)
        return Response({"results": [window_out(w) for w in windows]})

    @extend_schema(
        operation_id="maintenance_windows_create",
        request=WindowInSerializer,
        responses={201: WindowOutDoc},
        description="While a window is open the tenant's alerts are held; when it closes "
        "they are sent as one summary per tenant (and per batch of 20).",
    )
    def post(self, request: Request) -> Response:
        data = views.validate_request(WindowInSerializer, request)
        data |= {k: request.data[k] for k in ("duration_s",) if k in request.data}
        window = services.maintenance_window_create(actor=views.principal(request), data=data)
        return Response(window_out(window), status=status.HTTP_201_CREATED)


class MaintenanceWindowDetailView(StrictQueryView):
    @extend_schema(
        operation_id="maintenance_windows_delete", parameters=[WINDOW_ID], responses={204: None}
    )
    def delete(self, request: Request, pk: str) -> Response:
        services.maintenance_window_delete(actor=views.principal(request), window_id=pk)
        return Response(status=status.HTTP_204_NO_CONTENT)
