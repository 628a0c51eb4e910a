from django.contrib.auth import views as auth_views
from django.urls import path

from console import views
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
    path("", views.home, name="console-home"),
    path("dashboard/live", views.dashboard_live, name="console-dashboard-live"),
    path("upcoming", views.upcoming, name="console-upcoming"),
    path("tenant", views.tenant_switch, name="console-tenant-switch"),
    path("prefs/tz", views.set_timezone, name="console-set-tz"),
    path("schedules/", views.schedule_list, name="console-schedules"),
    path("schedules/new", views.schedule_create, name="console-schedule-new"),
    path("schedules/preview", views.schedule_preview, name="console-schedule-preview"),
    path("schedules/pick", views.schedule_pick, name="console-schedule-pick"),
    path("schedules/<uuid:schedule_id>/", views.schedule_detail, name="console-schedule"),
    path("schedules/<uuid:schedule_id>/edit", views.schedule_edit, name="console-schedule-edit"),
    path(
        "schedules/<uuid:schedule_id>/preview",
        views.schedule_preview,
        name="console-schedule-edit-preview",
    ),
    path("schedules/<uuid:schedule_id>/pause", views.schedule_pause, name="console-schedule-pause"),
    path(
        "schedules/<uuid:schedule_id>/resume", views.schedule_resume, name="console-schedule-resume"
    ),
    path(
        "schedules/<uuid:schedule_id>/trigger",
        views.schedule_trigger,
        name="console-schedule-trigger",
    ),
    path(
        "schedules/<uuid:schedule_id>/delete", views.schedule_delete, name="console-schedule-delete"
    ),
    path("executions/<uuid:execution_id>/", views.execution_detail, name="console-execution"),
    path("explain", views.explain_page, name="console-explain"),
    path("tokens/", views.tokens, name="console-tokens"),
    path("tokens/<int:token_id>/revoke", views.token_revoke, name="console-token-revoke"),
    path("members/", views.members, name="console-members"),
    path("members/<int:user_id>/role", views.member_role, name="console-member-role"),
    path("members/<int:user_id>/remove", views.member_remove, name="console-member-remove"),
    path("ops/", views.ops_overview, name="console-ops"),
    path("ops/audit", views.ops_audit, name="console-ops-audit"),
]
