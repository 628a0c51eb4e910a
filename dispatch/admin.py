from django.contrib import admin

from core.admin import ReadOnlyAdmin
from dispatch.models import BeatNode, Execution, ManagedCommand, Schedule, SchedulerPartition


@admin.register(Schedule)
class ScheduleAdmin(ReadOnlyAdmin):
    list_display = (
        "name",
        "tenant",
        "kind",
        "cron",
        "timezone",
        "next_run_at",
        "paused",
        "partition",
    )
    list_filter = ("tenant", "kind", "paused")
    search_fields = ("name", "id")


@admin.register(Execution)
class ExecutionAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "tenant",
        "schedule",
        "scheduled_for",
        "state",
        "attempt",
        "fencing_token",
    )
    list_filter = ("state", "tenant")
    search_fields = ("id",)


@admin.register(SchedulerPartition)
class PartitionAdmin(ReadOnlyAdmin):
    list_display = ("number", "lo", "hi", "owner", "lease_expires_at", "epoch")


@admin.register(ManagedCommand)
class ManagedCommandAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("name", "timeout_s", "egress", "enabled")
    filter_horizontal = ("tenants",)


@admin.register(BeatNode)
class BeatNodeAdmin(ReadOnlyAdmin):
    list_display = (
        "name",
        "hostname",
        "pid",
        "heartbeat_at",
        "partitions",
        "stale_writes_rejected",
        "fired_total",
        "published_total",
        "standby_since",
        "handovers_total",
        "stopped_at",
    )
