from django.contrib.auth import views as auth_views
from django.urls import path

from console.views import (
    access,
    alerts,
    calendars,
    control,
    dashboard,
    executions,
    explain,
    health,
    invite,
    ops,
    runs,
    schedules,
)
from tenants.login import ConsoleLoginForm

urlpatterns = [
    path(
        "login/",
        auth_views.LoginView.as_view(
            template_name="console/login.html", authentication_form=ConsoleLoginForm
        ),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", dashboard.home, name="console-home"),
    path("dashboard/live", dashboard.dashboard_live, name="console-dashboard-live"),
    path("dashboard/health", health.dashboard_health, name="console-dashboard-health"),
    path("dashboard/upcoming", dashboard.dashboard_upcoming, name="console-dashboard-upcoming"),
    path("upcoming", dashboard.upcoming, name="console-upcoming"),
    path("tenant", access.tenant_switch, name="console-tenant-switch"),
    path("prefs/tz", access.set_timezone, name="console-set-tz"),
    path("prefs/theme", access.set_theme, name="console-set-theme"),
    path("schedules/", schedules.schedule_list, name="console-schedules"),
    path("schedules/health", health.schedules_by_health, name="console-schedules-health"),
    path("schedules/new", schedules.schedule_create, name="console-schedule-new"),
    path("schedules/preview", schedules.schedule_preview, name="console-schedule-preview"),
    path("schedules/pick", schedules.schedule_pick, name="console-schedule-pick"),
    path("schedules/bulk", schedules.schedule_bulk, name="console-schedules-bulk"),
    path("schedules/<uuid:schedule_id>/", schedules.schedule_detail, name="console-schedule"),
    path(
        "schedules/<uuid:schedule_id>/edit", schedules.schedule_edit, name="console-schedule-edit"
    ),
    path(
        "schedules/<uuid:schedule_id>/preview",
        schedules.schedule_preview,
        name="console-schedule-edit-preview",
    ),
    path(
        "schedules/<uuid:schedule_id>/pause",
        schedules.schedule_pause,
        name="console-schedule-pause",
    ),
    path(
        "schedules/<uuid:schedule_id>/resume",
        schedules.schedule_resume,
        name="console-schedule-resume",
    ),
    path(
        "schedules/<uuid:schedule_id>/trigger",
        schedules.schedule_trigger,
        name="console-schedule-trigger",
    ),
    path(
        "schedules/<uuid:schedule_id>/backfill",
        schedules.schedule_backfill,
        name="console-schedule-backfill",
    ),
    path(
        "schedules/<uuid:schedule_id>/delete",
        schedules.schedule_delete,
        name="console-schedule-delete",
    ),
    path(
        "schedules/<uuid:schedule_id>/alerts/policy",
        alerts.schedule_policy_set,
        name="console-schedule-alert-policy",
    ),
    path(
        "schedules/<uuid:schedule_id>/alerts/policy/delete",
        alerts.schedule_policy_delete,
        name="console-schedule-alert-policy-delete",
    ),
    path(
        "schedules/<uuid:schedule_id>/alerts/snooze",
        alerts.schedule_snooze,
        name="console-schedule-snooze",
    ),
    path("calendars/", calendars.calendars_page, name="console-calendars"),
    path("calendars/<uuid:calendar_id>/", calendars.calendar_detail, name="console-calendar"),
    path(
        "calendars/<uuid:calendar_id>/delete",
        calendars.calendar_delete,
        name="console-calendar-delete",
    ),
    path("alerts/", alerts.alerts_page, name="console-alerts"),
    path("alerts/channels/new", alerts.channel_create, name="console-alert-channel-new"),
    path("alerts/channels/<uuid:channel_id>/", alerts.channel_edit, name="console-alert-channel"),
    path(
        "alerts/channels/<uuid:channel_id>/toggle",
        alerts.channel_toggle,
        name="console-alert-channel-toggle",
    ),
    path(
        "alerts/channels/<uuid:channel_id>/delete",
        alerts.channel_delete,
        name="console-alert-channel-delete",
    ),
    path(
        "alerts/channels/<uuid:channel_id>/test",
        alerts.channel_test,
        name="console-alert-channel-test",
    ),
    path("alerts/policy", alerts.policy_set, name="console-alert-policy"),
    path("alerts/windows/new", alerts.window_create, name="console-maintenance-window-new"),
    path(
        "alerts/windows/<uuid:window_id>/delete",
        alerts.window_delete,
        name="console-maintenance-window-delete",
    ),
    path("runs/", runs.runs_page, name="console-runs"),
    path("executions/bulk", executions.execution_bulk, name="console-executions-bulk"),
    path("executions/<uuid:execution_id>/", executions.execution_detail, name="console-execution"),
    path(
        "executions/<uuid:execution_id>/log",
        executions.execution_log_follow,
        name="console-execution-log",
    ),
    path(
        "executions/<uuid:execution_id>/cancel",
        executions.execution_cancel,
        name="console-execution-cancel",
    ),
    path(
        "executions/<uuid:execution_id>/rerun",
        executions.execution_rerun,
        name="console-execution-rerun",
    ),
    path("operations/<uuid:operation_id>/", control.operation_detail, name="console-operation"),
    path(
        "operations/<uuid:operation_id>/cancel",
        control.operation_cancel,
        name="console-operation-cancel",
    ),
    path(
        "backfills/<uuid:backfill_id>/progress",
        control.backfill_progress,
        name="console-backfill-progress",
    ),
    path(
        "backfills/<uuid:backfill_id>/cancel",
        control.backfill_cancel,
        name="console-backfill-cancel",
    ),
    path("explain", explain.explain_page, name="console-explain"),
    path("tokens/", access.tokens, name="console-tokens"),
    path("tokens/<int:token_id>/revoke", access.token_revoke, name="console-token-revoke"),
    path("members/", access.members, name="console-members"),
    path("members/invite", access.invite, name="console-member-invite"),
    path(
        "members/invitations/<int:invitation_id>/revoke",
        access.invite_revoke,
        name="console-member-invite-revoke",
    ),
    path("invite/<str:token>/", invite.invite_accept, name="invite-accept"),
    path("members/<int:user_id>/role", access.member_role, name="console-member-role"),
    path("members/<int:user_id>/remove", access.member_remove, name="console-member-remove"),
    path("ops/", ops.ops_overview, name="console-ops"),
    path("ops/audit", ops.ops_audit, name="console-ops-audit"),
    path("ops/commands/", ops.ops_commands, name="console-ops-commands"),
    path(
        "ops/commands/<int:command_id>/disable",
        ops.ops_command_disable,
        name="console-ops-command-disable",
    ),
    path(
        "ops/commands/<int:command_id>/enable",
        ops.ops_command_enable,
        name="console-ops-command-enable",
    ),
]
