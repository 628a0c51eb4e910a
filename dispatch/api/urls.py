from django.urls import path, re_path

from dispatch.api import (
    alerts,
    apply,
    backfills,
    bulk,
    calendars,
    completion,
    health,
    jobs,
    logs,
    runs,
    views,
)

urlpatterns = [
    path("schedules", views.ScheduleListView.as_view(), name="api-schedules"),
    path("schedules:bulk", bulk.ScheduleBulkView.as_view(), name="api-schedules-bulk"),
    path("schedules:apply", apply.ScheduleApplyView.as_view(), name="api-schedules-apply"),
    path("schedules:export", apply.ScheduleExportView.as_view(), name="api-schedules-export"),
    re_path(
        r"^schedules/(?P<pk>[^/:]+):pause$",
        views.SchedulePauseView.as_view(),
        name="api-schedule-pause",
    ),
    re_path(
        r"^schedules/(?P<pk>[^/:]+):resume$",
        views.ScheduleResumeView.as_view(),
        name="api-schedule-resume",
    ),
    re_path(
        r"^schedules/(?P<pk>[^/:]+):trigger$",
        views.ScheduleTriggerView.as_view(),
        name="api-schedule-trigger",
    ),
    re_path(
        r"^schedules/(?P<pk>[^/:]+):backfill$",
        backfills.ScheduleBackfillView.as_view(),
        name="api-schedule-backfill",
    ),
    re_path(
        r"^schedules/(?P<pk>[^/:]+)/backfills$",
        backfills.ScheduleBackfillListView.as_view(),
        name="api-schedule-backfills",
    ),
    re_path(
        r"^schedules/(?P<pk>[^/:]+):snooze$",
        alerts.ScheduleSnoozeView.as_view(),
        name="api-schedule-snooze",
    ),
    re_path(
        r"^schedules/(?P<pk>[^/:]+)/alert-policy$",
        alerts.SchedulePolicyView.as_view(),
        name="api-schedule-alert-policy",
    ),
    re_path(
        r"^schedules/(?P<pk>[^/:]+)/preview$",
        views.SchedulePreviewView.as_view(),
        name="api-schedule-preview",
    ),
    re_path(
        r"^schedules/(?P<pk>[^/:]+)/health$",
        health.ScheduleHealthView.as_view(),
        name="api-schedule-health",
    ),
    re_path(
        r"^schedules/(?P<pk>[^/:]+)/explain$",
        views.ScheduleExplainView.as_view(),
        name="api-schedule-explain",
    ),
    re_path(r"^schedules/(?P<pk>[^/:]+)$", views.ScheduleDetailView.as_view(), name="api-schedule"),
    re_path(
        r"^backfills/(?P<pk>[^/:]+):cancel$",
        backfills.BackfillCancelView.as_view(),
        name="api-backfill-cancel",
    ),
    re_path(
        r"^backfills/(?P<pk>[^/:]+)$", backfills.BackfillDetailView.as_view(), name="api-backfill"
    ),
    path("jobs", jobs.JobListView.as_view(), name="api-jobs"),
    path("jobs:batch", jobs.JobBatchView.as_view(), name="api-jobs-batch"),
    re_path(r"^jobs/(?P<pk>[^/:]+)$", jobs.JobDetailView.as_view(), name="api-job"),
    path("executions", views.ExecutionListView.as_view(), name="api-executions"),
    path("executions:bulk", bulk.ExecutionBulkView.as_view(), name="api-executions-bulk"),
    # Before the detail route (the colon actions are not ids).
    re_path(
        r"^executions/(?P<pk>[^/:]+):cancel$",
        runs.ExecutionCancelView.as_view(),
        name="api-execution-cancel",
    ),
    re_path(
        r"^executions/(?P<pk>[^/:]+):rerun$",
        runs.ExecutionRerunView.as_view(),
        name="api-execution-rerun",
    ),
    # A handed-off attempt's callbacks (dispatch/completion.py): the capability, not a token.
    re_path(
        r"^executions/(?P<pk>[^/:]+):heartbeat$",
        completion.ExecutionHeartbeatView.as_view(),
        name="api-execution-heartbeat",
    ),
    re_path(
        r"^executions/(?P<pk>[^/:]+):succeed$",
        completion.ExecutionSucceedView.as_view(),
        name="api-execution-succeed",
    ),
    re_path(
        r"^executions/(?P<pk>[^/:]+):fail$",
        completion.ExecutionFailView.as_view(),
        name="api-execution-fail",
    ),
    re_path(
        r"^executions/(?P<pk>[^/:]+)/attempts/(?P<n>[0-9]{1,6})/log$",
        logs.ExecutionAttemptLogView.as_view(),
        name="api-execution-attempt-log",
    ),
    re_path(
        r"^executions/(?P<pk>[^/:]+)/log$",
        logs.ExecutionLogView.as_view(),
        name="api-execution-log",
    ),
    re_path(
        r"^executions/(?P<pk>[^/]+)$", views.ExecutionDetailView.as_view(), name="api-execution"
    ),
    # Bulk operations: the colon route first (the id pattern excludes ":" too).
    re_path(
        r"^operations/(?P<pk>[^/:]+):cancel$",
        bulk.OperationCancelView.as_view(),
        name="api-operation-cancel",
    ),
    re_path(
        r"^operations/(?P<pk>[^/:]+)$", bulk.OperationDetailView.as_view(), name="api-operation"
    ),
    path("alert-policy", alerts.TenantPolicyView.as_view(), name="api-alert-policy"),
    path(
        "maintenance-windows",
        alerts.MaintenanceWindowListView.as_view(),
        name="api-maintenance-windows",
    ),
    re_path(
        r"^maintenance-windows/(?P<pk>[^/:]+)$",
        alerts.MaintenanceWindowDetailView.as_view(),
        name="api-maintenance-window",
    ),
    path("calendars", calendars.CalendarListView.as_view(), name="api-calendars"),
    re_path(
        r"^calendars/(?P<pk>[^/:]+)/dates$",
        calendars.CalendarDatesView.as_view(),
        name="api-calendar-dates",
    ),
    re_path(
        r"^calendars/(?P<pk>[^/:]+)$", calendars.CalendarDetailView.as_view(), name="api-calendar"
    ),
    path("alert-channels", alerts.AlertChannelListView.as_view(), name="api-alert-channels"),
    re_path(
        r"^alert-channels/(?P<pk>[^/:]+):test$",
        alerts.AlertChannelTestView.as_view(),
        name="api-alert-channel-test",
    ),
    re_path(
        r"^alert-channels/(?P<pk>[^/:]+)$",
        alerts.AlertChannelDetailView.as_view(),
        name="api-alert-channel",
    ),
]
