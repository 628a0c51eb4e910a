"""What a schedule means and would do (the console's pages and the API): its cron
in words, the preview of a definition as typed, the resume plan, and the history
with the occurrences that have no record."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from dispatch.models import Execution, Kind, Schedule
from dispatch.selectors.calendars import schedule_filter
from dispatch.selectors.schedules import schedule_history, schedule_preview
from dispatch.timing import cron
from dispatch.timing.calendars import DateFilter
from dispatch.timing.clock import instant_text
from tenants.models import Tenant

UTC_ZONE = ZoneInfo("UTC")

# --- what a schedule means and would do (the console's pages and the API) -----------


@dataclass(frozen=True)
class CronText:
    description: str  # in words, e.g. "at 02:17 every day"
    resolved: str  # the expression with its H values filled in for this schedule


def cron_text(expr: str, *, seed: uuid.UUID | str) -> CronText:
    """A cron expression's description and resolved form for one schedule (its id
    seeds the H values). The API's preview and the console build both from this."""
    return CronText(
        description=cron.describe(expr, seed=str(seed)), resolved=cron.resolve(expr, seed=str(seed))
    )


PREVIEW_COUNT = 10


@dataclass
class PreviewRow:
    scheduled_for: datetime
    due_at: datetime
    note: str | None
    change: str = ""  # "", "added", "removed", "excluded" (by a calendar: `reason` says why)
    reason: str = ""
    number: int | None = None  # the run's place among the runs (removed, excluded: none)


def definition_preview(
    values: dict[str, Any],
    *,
    seed: uuid.UUID,
    schedule: Schedule | None,
    now: datetime,
    dates: DateFilter | None = None,
    start: datetime | None = None,
) -> dict[str, Any]:
    """The next runs of a definition as typed (cleaned `values`, not saved), and for an
    edit of `schedule`, which runs the change adds or removes. With `dates` (the
    calendars as typed), the runs they exclude are left out and listed in `excluded`.
    The runs listed are those from `start` on (default: `now`); `transition` says what
    the zone's next clock change after it (within a year) does to the schedule."""
    tz = values["timezone"]
    # From `start` itself on: a run at the very instant asked for is listed.
    begin = now if start is None else start - timedelta(microseconds=1)
    out: dict[str, Any] = {"zone": tz}
    if values["kind"] == Kind.CRON:
        expr = values["cron"]
        text = cron_text(expr, seed=seed)
        out["description"] = text.description
        out["resolved"] = text.resolved if text.resolved != expr else ""
        # An H in a cron spec (an interval's "1h" is not one).
        out["hashed"] = any(
            "h" in spec.cron.lower().replace("@hourly", "")
            for spec in cron.decompose(expr)[0]
            if spec.cron is not None
        )
        occurrences = cron.preview(
            expr,
            tz,
            seed=str(seed),
            after=begin,
            count=PREVIEW_COUNT,
            jitter_s=values["jitter_s"],
            dates=dates,
        )
        out["transition"] = cron.transition_effect(
            expr, tz, seed=str(seed), after=begin, dates=dates
        )
        if dates is not None and occurrences:
            out["excluded"] = cron.excluded_between(
                expr,
                tz,
                start=begin,
                end=occurrences[-1].scheduled_for,
                seed=str(seed),
                dates=dates,
                limit=PREVIEW_COUNT,
            )
    else:
        run_at: datetime = values["run_at"]
        out["description"] = "once"
        out["resolved"] = ""
        out["hashed"] = False
        occurrences = (
            [cron.Occurrence(run_at, run_at.astimezone(cron.get_zone(tz)), run_at, None)]
            if run_at > now and run_at > begin
            else []
        )
        if run_at <= now:
            out["past_once"] = run_at
    rows = [PreviewRow(o.scheduled_for, o.due_at, o.note) for o in occurrences]
    # The runs the calendars leave out are shown in place, struck through with their
    # reason (once: not also as "removed" by an edit that adds the calendar).
    skipped = {e.scheduled_for: e.reason for e in out.get("excluded", [])}
    if schedule is not None:
        before = {
            o.scheduled_for
            for o in schedule_preview(schedule=schedule, after=begin, count=PREVIEW_COUNT)
        }
        after = {r.scheduled_for for r in rows}
        if before != after:
            horizon = max(after) if after else None
            for r in rows:
                if r.scheduled_for not in before:
                    r.change = "added"
            for instant in sorted(before - after - set(skipped)):
                if horizon is None or instant <= horizon:
                    rows.append(PreviewRow(instant, instant, None, "removed"))
            out["changed"] = True
    rows += [PreviewRow(at, at, None, "excluded", reason) for at, reason in skipped.items()]
    rows.sort(key=lambda r: r.scheduled_for)
    runs = (r for r in rows if r.change in ("", "added"))
    for number, row in enumerate(runs, start=1):
        row.number = number
    out["rows"] = rows
    return out


@dataclass(frozen=True)
class ResumePreview:
    """What resuming a paused schedule now would do: how many missed occurrences
    run and how many are recorded as skipped (by its misfire policy), and the
    sentence the console shows. Bulk resume sums these."""

    run: int
    skip: int
    text: str


def resume_preview(schedule: Schedule, now: datetime, zone: ZoneInfo = UTC_ZONE) -> ResumePreview:
    """What resuming now would do, by the schedule's misfire policy; its times are
    written in `zone` (the console's viewer's; the API's answers are in UTC)."""
    if schedule.next_run_at is None:
        return ResumePreview(
            0, 0, "Resuming now runs nothing by itself: the schedule has no next run."
        )
    if schedule.next_run_at > now:
        return ResumePreview(
            0,
            0,
            "Nothing was missed while paused: resuming now keeps the next run "
            f"at {instant_text(schedule.next_run_at, zone)}.",
        )
    if schedule.kind == Kind.ONCE:
        # The beat's rule (fire_due_one_offs): due at run_at, or at creation if that was later.
        fell_due = max(schedule.next_run_at, schedule.created_at or schedule.next_run_at)
        late = (now - fell_due).total_seconds()
        if late > schedule.misfire_grace_s and schedule.misfire == "skip":
            return ResumePreview(
                0,
                1,
                "The one-off time has passed while paused, beyond its "
                f"{schedule.misfire_grace_s} s grace: resuming now records it as skipped "
                "(misfire policy: skip).",
            )
        return ResumePreview(
            1, 0, "The one-off time has passed while paused: resuming now runs it once, now."
        )
    plan = cron.plan_misfire(
        schedule.cron,
        schedule.timezone,
        seed=str(schedule.id),
        next_run_at=schedule.next_run_at,
        now=now,
        until=now,
        grace_s=schedule.misfire_grace_s,
        policy=schedule.misfire,
        catch_up_limit=schedule.catch_up_limit,
        dates=schedule_filter(schedule.id),
    )
    run = len(plan.fire)
    return ResumePreview(
        run,
        plan.skipped_total,
        f"Resuming now will run {run} occurrence{'s' if run != 1 else ''} and skip "
        f"{plan.skipped_total} (misfire policy: {schedule.misfire}, grace "
        f"{schedule.misfire_grace_s} s).",
    )


def resume_plan(schedule: Schedule, now: datetime, zone: ZoneInfo = UTC_ZONE) -> str:
    """What resuming now would do, in words (the console's resume confirmation)."""
    return resume_preview(schedule, now, zone).text


HISTORY_LIMIT = 50


@dataclass
class HistoryRow:
    execution: Execution | None
    scheduled_for: datetime


def schedule_history_rows(*, tenant: Tenant, schedule: Schedule, now: datetime) -> list[HistoryRow]:
    """The latest executions merged with the occurrences that have no record (gaps to explain)."""
    executions = schedule_history(tenant=tenant, schedule=schedule, limit=HISTORY_LIMIT)
    rows = [HistoryRow(e, e.scheduled_for) for e in executions]
    if schedule.kind != Kind.CRON or schedule.depends_on.exists():
        return rows
    start = executions[-1].scheduled_for if len(executions) >= HISTORY_LIMIT else None
    start = start or max(schedule.created_at, now - timedelta(days=7))
    try:
        expected = cron.occurrences_between(
            schedule.cron,
            schedule.timezone,
            start=start,
            end=now,
            seed=str(schedule.id),
            limit=HISTORY_LIMIT * 4,
            dates=schedule_filter(schedule.id),
        )
    except cron.CronError:
        return rows
    recorded = {e.scheduled_for for e in executions}
    gaps = [HistoryRow(None, o) for o in expected if o not in recorded][-HISTORY_LIMIT:]
    merged = sorted(rows + gaps, key=lambda r: r.scheduled_for, reverse=True)
    return merged[:HISTORY_LIMIT]
