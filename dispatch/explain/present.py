"""The explainer's answer as callers see it: its shape, how times read, the JSON.

`reasons` decides; this module only words instants and lays the answer out for
the API and the console (evidence with the link a client follows).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from dispatch.states import ExplainCode
from dispatch.timing.durations import spell


@dataclass(frozen=True)
class Evidence:
    """A recorded fact the answer rests on: an execution, an event or an audit row."""

    kind: str  # execution | event | audit | schedule | backfill | archive (a day's manifest)
    id: str
    label: str = ""
    execution_id: str | None = None  # for events: the execution they belong to

    def as_dict(self, url: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "id": self.id}
        if self.label:
            out["label"] = self.label
        if url:
            out["url"] = url
        return out


@dataclass
class Explanation:
    code: ExplainCode
    sentence: str
    at: datetime
    occurrence: datetime | None = None
    evidence: list[Evidence] = field(default_factory=list)
    execution_id: str | None = None
    notes: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- wording


def who(label: str) -> str:
    """`user:alice` → alice; tokens and the beat keep their label."""
    return label.removeprefix("user:") if label else "someone"


def clock(value: datetime, zone: ZoneInfo) -> str:
    local = value.astimezone(zone)
    fmt = "%Y-%m-%d %H:%M:%S" if local.second or local.microsecond else "%Y-%m-%d %H:%M"
    text = local.strftime(fmt)
    if local.microsecond:
        text += f".{local.microsecond // 100_000}"
    return f"{text} {local.tzname()}"


def utc(value: datetime) -> str:
    return clock(value, ZoneInfo("UTC"))


def both(value: datetime, zone: ZoneInfo) -> str:
    """A time in the schedule's zone, with UTC beside it when the zone is not UTC."""
    if zone.key == "UTC":
        return utc(value)
    return f"{clock(value, zone)} ({utc(value)})"


def late(delta: timedelta) -> str:
    """How late, spaced for a sentence: "14 min 00 s"."""
    return spell(delta, units=("h", "min", "s"), sep=" ")


def cap(text: str) -> str:
    return text[:1].upper() + text[1:]


# --------------------------------------------------------------------------- JSON


def api_url(evidence: Evidence) -> str | None:
    """Where an API client reads a piece of evidence."""
    if evidence.kind == "execution":
        return f"/v1/executions/{evidence.id}"
    if evidence.kind == "schedule":
        return f"/v1/schedules/{evidence.id}"
    if evidence.kind == "backfill":
        return f"/v1/backfills/{evidence.id}"
    return None


def as_json(answer: Explanation) -> dict[str, Any]:
    def iso(value: datetime | None) -> str | None:
        if value is None:
            return None
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")

    return {
        "code": str(answer.code),
        "sentence": answer.sentence,
        "evidence": [e.as_dict(api_url(e)) for e in answer.evidence],
        "at": iso(answer.at),
        "occurrence": iso(answer.occurrence),
        "execution_id": answer.execution_id,
        "notes": answer.notes,
    }
