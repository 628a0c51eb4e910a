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
    cron: str | None = None
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
    timeline: list[dict[str, Any]] | None = None  # GET /v1/executions/{id} only


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
