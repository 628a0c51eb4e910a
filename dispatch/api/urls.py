from django.urls import path, re_path

from dispatch.api import runs, views

urlpatterns = [
    path("schedules", views.ScheduleListView.as_view(), name="api-schedules"),
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
        r"^schedules/(?P<pk>[^/:]+)/preview$",
        views.SchedulePreviewView.as_view(),
        name="api-schedule-preview",
    ),
    re_path(
        r"^schedules/(?P<pk>[^/:]+)/explain$",
        views.ScheduleExplainView.as_view(),
        name="api-schedule-explain",
    ),
    re_path(r"^schedules/(?P<pk>[^/:]+)$", views.ScheduleDetailView.as_view(), name="api-schedule"),
    path("jobs", views.JobCreateView.as_view(), name="api-jobs"),
    path("executions", views.ExecutionListView.as_view(), name="api-executions"),
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
    re_path(
        r"^executions/(?P<pk>[^/]+)$", views.ExecutionDetailView.as_view(), name="api-execution"
    ),
]
