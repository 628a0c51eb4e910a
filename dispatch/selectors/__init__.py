"""Reads of the dispatch app, by concern. Every query starts from the tenant (fails closed).

  paging.py      keyset pagination of the list reads, path ids
  schedules.py   schedules: one, a page, search, upstreams and dependents, next runs, upcoming fires
  executions.py  executions: one, a page, the timeline, running and troubled lists, usage
  previews.py    what a schedule means and would do: cron in words, previews, resume plan, history
  ops.py         the platform operators' cross-tenant reads
  backfills.py   backfills: the plan of a range (dry run), one with its progress, a schedule's
  operations.py  bulk operations: one, a page of its items

Callers use `from dispatch import selectors; selectors.x`: every public name is here.
"""

from __future__ import annotations

from dispatch.selectors.backfills import (
    BACKFILL_MAX_CONCURRENT,
    BackfillPlan,
    BackfillProgress,
    PlanItem,
    backfill_get,
    backfill_list,
    backfill_list_progress,
    backfill_occurrences,
    backfill_plan,
    backfill_progress,
    check_backfill_request,
)
from dispatch.selectors.executions import (
    TimelineItem,
    Usage,
    execution_events,
    execution_get,
    execution_list,
    execution_timeline,
    executions_running,
    executions_troubled,
    tenant_usage,
)
from dispatch.selectors.operations import ItemPage, operation_get, operation_items
from dispatch.selectors.ops import (
    LAG_EXCLUDED_TRIGGERS,
    WorkerSeen,
    ops_beats,
    ops_dead,
    ops_fire_lag,
    ops_partitions,
    ops_tenants,
    ops_workers,
    queue_depths,
)
from dispatch.selectors.paging import (
    MAX_PAGE,
    Page,
    _encode_cursor,
    as_uuid,
)
from dispatch.selectors.previews import (
    HISTORY_LIMIT,
    PREVIEW_COUNT,
    CronText,
    HistoryRow,
    PreviewRow,
    ResumePreview,
    cron_text,
    definition_preview,
    resume_plan,
    resume_preview,
    schedule_history_rows,
)
from dispatch.selectors.schedules import (
    PICK_LIMIT,
    UPCOMING_COUNT_CAP,
    last_executions,
    schedule_dependents,
    schedule_fields,
    schedule_get,
    schedule_get_including_deleted,
    schedule_history,
    schedule_list,
    schedule_next_runs,
    schedule_preview,
    schedule_resolve,
    schedule_search,
    schedule_upstreams,
    upcoming_count,
    upcoming_fires,
)

__all__ = [
    "BACKFILL_MAX_CONCURRENT",
    "HISTORY_LIMIT",
    "LAG_EXCLUDED_TRIGGERS",
    "MAX_PAGE",
    "PICK_LIMIT",
    "PREVIEW_COUNT",
    "UPCOMING_COUNT_CAP",
    "BackfillPlan",
    "BackfillProgress",
    "CronText",
    "HistoryRow",
    "ItemPage",
    "Page",
    "PlanItem",
    "PreviewRow",
    "ResumePreview",
    "TimelineItem",
    "Usage",
    "WorkerSeen",
    "_encode_cursor",
    "as_uuid",
    "backfill_get",
    "backfill_list",
    "backfill_list_progress",
    "backfill_occurrences",
    "backfill_plan",
    "backfill_progress",
    "check_backfill_request",
    "cron_text",
    "definition_preview",
    "execution_events",
    "execution_get",
    "execution_list",
    "execution_timeline",
    "executions_running",
    "executions_troubled",
    "last_executions",
    "operation_get",
    "operation_items",
    "ops_beats",
    "ops_dead",
    "ops_fire_lag",
    "ops_partitions",
    "ops_tenants",
    "ops_workers",
    "queue_depths",
    "resume_plan",
    "resume_preview",
    "schedule_dependents",
    "schedule_fields",
    "schedule_get",
    "schedule_get_including_deleted",
    "schedule_history",
    "schedule_history_rows",
    "schedule_list",
    "schedule_next_runs",
    "schedule_preview",
    "schedule_resolve",
    "schedule_search",
    "schedule_upstreams",
    "tenant_usage",
    "upcoming_count",
    "upcoming_fires",
]
