"""Typed views of the API's answers: small dataclasses, built by `from_json`.

Forward compatible: fields the client does not know are ignored (and kept in
`raw`), fields a newer server omits default to None, so an older client keeps
working against a newer server. Times stay ISO 8601 strings as the API sends
them (`parse_time` turns one into an aware datetime).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from typing import Any, TypeVar

T = TypeVar("T", bound="Model")


def parse_time(value: str | None) -> datetime | None:
    """An API instant ("2026-03-29T01:00:00Z") as an aware datetime; None stays None."""
    if value is None:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


@dataclass(frozen=True)
class Model:
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls: type[T], data: dict[str, Any]) -> T:
        known = {f.name for f in fields(cls)} - {"raw"}
        # Unknown keys are dropped here (still in raw); missing ones take their defaults.
        return cls(raw=dict(data), **{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class Schedule(Model):
    id: str = ""
    name: str = ""
    kind: str | None = None  # "cron" | "once"
    # One cron spec without bounds: the expression; else the whole timing text
    # ("<spec> | <spec> | start_at <instant> | end_at <instant>"), which preview takes.
    cron: str | None = None
    # [{"cron": "0 6 * * 1-5"}, {"every": "1h30m", "anchor": "2026-01-01T00:15:00"}]
    specs: list[dict[str, str]] | None = None
    start_at: str | None = None  # inclusive
    end_at: str | None = None  # exclusive; after it next_run_at is None
    run_at: str | None = None
    timezone: str | None = None
    target: dict[str, Any] | None = None
    retry: dict[str, Any] | None = None
    concurrency: str | None = None
    misfire: str | None = None
    misfire_grace_s: int | None = None
    catch_up_limit: int | None = None
    jitter_s: int | None = None
    priority: str | None = None
    duration: str | None = None
    depends_on: list[str] | None = None
    paused: bool | None = None
    paused_reason: str | None = None
    paused_until: str | None = None
    next_run_at: str | None = None
    version: int | None = None
    created_at: str | None = None
    updated_at: str | None = None
    exclude_calendars: list[str] | None = None  # calendar names
    only_calendars: list[str] | None = None
    # Lifecycle bounds: max_runs counts succeeded occurrences; completed is shown like paused.
    max_runs: int | None = None
    runs_succeeded: int | None = None
    completed: bool | None = None
    completed_at: str | None = None
    completed_reason: str | None = None  # "max_runs" | "end_at"
    delete_after: str | None = None  # one-offs: e.g. "7d"; None = kept
    # Keyed concurrency: {"key": template, "limit": int, "on_conflict": "queue"|"skip"|"replace"}
    concurrency_key: dict[str, Any] | None = None
    health: dict[str, Any] | None = None  # GET /v1/schedules/{id} only


@dataclass(frozen=True)
class Execution(Model):
    id: str = ""
    schedule_id: str | None = None
    scheduled_for: str | None = None
    due_at: str | None = None
    trigger: str | None = None
    attempt: int | None = None
    state: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    status_code: int | None = None
    exit_code: int | None = None
    error: str | None = None
    reason_code: str | None = None
    reason: str | None = None
    concurrency_key: str | None = None  # the rendered key it holds (set at admission)
    output: Any = None  # the result its target reported with a completion callback
    timeline: list[dict[str, Any]] | None = None  # GET /v1/executions/{id} only
    # GET /v1/executions/{id} only: where it was read back from once its day of
    # history was archived (day, location, manifest, archived_at); None before.
    archived: dict[str, Any] | None = None


@dataclass(frozen=True)
class Job(Schedule):
    """A one-off job: a schedule of kind "once", with its execution's state."""

    state: str | None = None
    execution: dict[str, Any] | None = None


@dataclass(frozen=True)
class Evidence(Model):
    kind: str = ""
    id: str = ""
    label: str | None = None
    url: str | None = None


@dataclass(frozen=True)
class Explanation(Model):
    """GET /v1/schedules/{id}/explain?at=: why a schedule did or did not run then."""

    code: str = ""
    sentence: str = ""
    at: str | None = None
    occurrence: str | None = None
    execution_id: str | None = None
    notes: list[str] | None = None
    evidence: list[Evidence] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Explanation:
        items = data.get("evidence") or []
        base = super().from_json({k: v for k, v in data.items() if k != "evidence"})
        return replace(
            base,
            raw=dict(data),
            evidence=[Evidence.from_json(e) for e in items if isinstance(e, dict)],
        )


@dataclass(frozen=True)
class Calendar(Model):
    """A tenant's named set of dates; schedules list it by name in exclude_calendars /
    only_calendars. `sources` as the server summarises them (an .ics shows its url and
    size, not its content)."""

    id: str = ""
    name: str = ""
    description: str | None = None
    sources: list[dict[str, Any]] | None = None
    version: int | None = None
    created_at: str | None = None
    updated_at: str | None = None
    created_by: str | None = None
    updated_by: str | None = None


@dataclass(frozen=True)
class CalendarDate(Model):
    """One date a calendar holds (YYYY-MM-DD) and its name ("Christmas Day", "Saturday")."""

    date: str = ""
    name: str | None = None


@dataclass(frozen=True)
class AlertChannel(Model):
    """Where a tenant's alerts go; `config` holds addresses and secret references only."""

    id: str = ""
    name: str = ""
    kind: str | None = None  # "email" | "slack" | "webhook"
    config: dict[str, Any] | None = None
    enabled: bool | None = None
    created_at: str | None = None
    updated_at: str | None = None


@dataclass(frozen=True)
class MaintenanceWindow(Model):
    """A time the tenant's alerts are held: one-off (starts_at, ends_at) or recurring
    (cron, timezone, duration_s)."""

    id: str = ""
    name: str = ""
    starts_at: str | None = None
    ends_at: str | None = None
    cron: str | None = None
    timezone: str | None = None
    duration_s: int | None = None


@dataclass(frozen=True)
class Backfill(Model):
    """A schedule's past occurrences in [range_from, range_to), being run now. The API
    names the range `from` / `to` (`from` is a Python keyword, hence the prefix)."""

    id: str = ""
    schedule_id: str | None = None
    state: str | None = None  # "running" | "done" | "cancelled"
    range_from: str | None = None
    range_to: str | None = None
    reprocess: str | None = None
    max_concurrent: int | None = None
    order: str | None = None
    skip_paused: bool | None = None
    created_by: str | None = None
    created_at: str | None = None
    finished_at: str | None = None
    cancelled_by: str | None = None
    progress: dict[str, int] | None = None
    counts: dict[str, int] | None = None  # occurrences per action; not on list pages

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Backfill:
        renamed = {k: v for k, v in data.items() if k not in ("from", "to")}
        base = super().from_json(
            renamed | {"range_from": data.get("from"), "range_to": data.get("to")}
        )
        return replace(base, raw=dict(data))


@dataclass(frozen=True)
class Operation(Model):
    """A bulk action (schedules:bulk, executions:bulk) and a page of its per-item
    results (`items`: {"position", "id", "status", "detail"}; the rest from
    `next_cursor`, see Client.operation_items)."""

    id: str = ""
    object_type: str | None = None  # "schedule" | "execution"
    action: str | None = None
    state: str | None = None  # "running" | "done" | "cancelled"
    total: int | None = None
    processed: int | None = None
    succeeded: int | None = None
    failed: int | None = None
    cancelled: int | None = None
    reason: str | None = None
    until: str | None = None
    filter: dict[str, Any] | None = None
    created_by: str | None = None
    created_at: str | None = None
    finished_at: str | None = None
    cancelled_by: str | None = None
    items: list[dict[str, Any]] | None = None  # not in a cancel's answer
    next_cursor: str | None = None
