"""The explainer: why did (or didn't) a schedule run at a given moment?

Answers come from recorded decisions, never guesses: the execution row of the
occurrence (one per occurrence, so there is at most one to find), its events
(held, claimed, attempts, cancellations), the schedule's pause / resume events
and the audit log (who paused, with which reason; which definition was in force
at that moment). Pure reads: nothing here writes.

`explain(schedule=…, at=…)` returns an `Explanation` whose `code` is one of
CODES and whose `sentence` is fit to show a user as is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from dispatch.models import Execution, ExecutionEvent, ExecutionState, Kind, Schedule, Trigger
from dispatch.timing import cron
from tenants.models import AuditEvent

# Every code an answer can carry, with its meaning (the API documents these as an enum).
# A service reading only `code` can tell every outcome apart; `sentence` adds the detail.
CODE_MEANINGS = {
    "ran": "the occurrence ran and succeeded",
    "running": "the occurrence is running now",
    "retrying": "an attempt failed; another attempt is scheduled",
    "failed": "the occurrence ran and failed (no retry left for this failure)",
    "timed_out": "the occurrence ran and was stopped at its timeout",
    "dead": "the occurrence failed on every allowed attempt",
    "pending": "not due yet, or due and not yet started (scheduled, queued, beat behind)",
    "held": "held back by a concurrency, capacity or rate limit; not started yet "
    "(once it starts, the code is its outcome and the sentence tells the wait)",
    "not_an_occurrence": "the schedule has no occurrence at that time",
    "dst_shifted": "that wall time was moved by a DST change; the answer is about the moved run",
    "paused": "the schedule was (or is) paused at that time",
    "not_created_yet": "the schedule did not exist yet",
    "deleted": "the schedule had been deleted",
    "skipped_misfire": "skipped by the misfire policy (the scheduler reached it too late)",
    "skipped_overlap": "skipped: the previous run was still active (overlap forbid)",
    "skipped_upstream": "skipped: an upstream schedule did not succeed",
    "skipped_quota": "skipped: the tenant was over its executions-per-day quota",
    "skipped": "skipped for another recorded reason (the sentence names it)",
    "cancelled": "the run was cancelled (replaced, or by the platform)",
    "missing": "no record at all: the scheduler never fired it (report to operators)",
}
CODES = tuple(CODE_MEANINGS)
# What became of an execution that was started, by its state.
OUTCOME_CODES = {
    ExecutionState.SUCCEEDED: "ran",
    ExecutionState.RUNNING: "running",
    ExecutionState.RETRY_SCHEDULED: "retrying",
    # Queued or scheduled again after an attempt started: a retry on its way.
    ExecutionState.QUEUED: "retrying",
    ExecutionState.SCHEDULED: "retrying",
    ExecutionState.FAILED: "failed",
    ExecutionState.TIMED_OUT: "timed_out",
    ExecutionState.DEAD: "dead",
}
HELD_KINDS = ("held_concurrency", "held_capacity", "held_rate_limit")
AUDIT_MATCH_S = 5.0
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@dataclass(frozen=True)
class Evidence:
    """A recorded fact the answer rests on: an execution, an event or an audit row."""

    kind: str  # execution | event | audit | schedule
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
    code: str
    sentence: str
    at: datetime
    occurrence: datetime | None = None
    evidence: list[Evidence] = field(default_factory=list)
    execution_id: str | None = None
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class PauseInterval:
    start: datetime
    end: datetime | None  # None: still paused
    by: str
    reason: str
    until: str | None
    resumed_by: str
    evidence: tuple[Evidence, ...]


# --------------------------------------------------------------------------- formatting


def _who(label: str) -> str:
    """`user:alice` → alice; tokens and the beat keep their label."""
    return label.removeprefix("user:") if label else "someone"


def _clock(value: datetime, zone: ZoneInfo) -> str:
    local = value.astimezone(zone)
    fmt = "%Y-%m-%d %H:%M:%S" if local.second or local.microsecond else "%Y-%m-%d %H:%M"
    text = local.strftime(fmt)
    if local.microsecond:
        text += f".{local.microsecond // 100_000}"
    return f"{text} {local.tzname()}"


def _utc(value: datetime) -> str:
    return _clock(value, ZoneInfo("UTC"))


def _both(value: datetime, zone: ZoneInfo) -> str:
    """A time in the schedule's zone, with UTC beside it when the zone is not UTC."""
    if zone.key == "UTC":
        return _utc(value)
    return f"{_clock(value, zone)} ({_utc(value)})"


def _aware(value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("at must be timezone-aware")
    if not cron.MIN_YEAR <= value.year <= cron.MAX_YEAR:
        raise ValueError(f"at must be between the years {cron.MIN_YEAR} and {cron.MAX_YEAR}")
    return value.astimezone(UTC)


# --------------------------------------------------------------------------- recorded state


def _definition_at(schedule: Schedule, instant: datetime) -> tuple[str, str, datetime | None]:
    """(cron, timezone, run_at) in force at `instant`.

    The audit log keeps each update's before/after snapshot: the first update
    after `instant` holds, in its `before`, the definition that was in force then.
    """
    later = (
        AuditEvent.objects.filter(
            tenant_id=schedule.tenant_id,
            object_type="schedule",
            object_id=str(schedule.id),
            action="schedule.update",
            at__gt=instant,
        )
        .order_by("at", "id")
        .values_list("before", flat=True)
        .first()
    )
    if isinstance(later, dict):
        run_at_raw = later.get("run_at")
        run_at = datetime.fromisoformat(run_at_raw) if isinstance(run_at_raw, str) else None
        return str(later.get("cron") or ""), str(later.get("timezone") or "UTC"), run_at
    return schedule.cron, schedule.timezone, schedule.run_at


def _matching_audit(
    audits: list[AuditEvent], action: str, event: ExecutionEvent
) -> AuditEvent | None:
    """The audit row a service wrote together with `event` (same transaction).

    Both are stamped with statement time, so they differ by the milliseconds
    between the two statements: take the nearest row of that action and actor.
    """
    best: AuditEvent | None = None
    for audit in audits:
        if audit.action != action or (event.actor and audit.actor_label != event.actor):
            continue
        gap = abs((audit.at - event.at).total_seconds())
        if gap <= AUDIT_MATCH_S and (
            best is None or gap < abs((best.at - event.at).total_seconds())
        ):
            best = audit
    return best


def pause_intervals(schedule: Schedule) -> list[PauseInterval]:
    """Every pause of the schedule, from its paused / resumed events and audit rows."""
    events = list(
        ExecutionEvent.objects.filter(
            tenant_id=schedule.tenant_id, schedule=schedule, kind__in=("paused", "resumed")
        ).order_by("at", "id")
    )
    audits = list(
        AuditEvent.objects.filter(
            tenant_id=schedule.tenant_id,
            object_type="schedule",
            object_id=str(schedule.id),
            action__in=("schedule.pause", "schedule.resume"),
        )
    )
    out: list[PauseInterval] = []
    current: ExecutionEvent | None = None
    for ev in events:
        if ev.kind == "paused":
            if current is not None:
                # Paused again while paused: the earlier pause still began the interval.
                continue
            current = ev
            continue
        if current is None:
            continue
        out.append(_interval(current, ev, audits))
        current = None
    if current is not None:
        out.append(_interval(current, None, audits))
    return out


def _interval(
    paused: ExecutionEvent,
    resumed: ExecutionEvent | None,
    audits: list[AuditEvent],
) -> PauseInterval:
    evidence: list[Evidence] = [Evidence("event", str(paused.pk), paused.message)]
    audit = _matching_audit(audits, "schedule.pause", paused)
    if audit is not None:
        evidence.append(Evidence("audit", str(audit.pk), f"{audit.action} by {audit.actor_label}"))
    if resumed is not None:
        evidence.append(Evidence("event", str(resumed.pk), resumed.message))
        audit = _matching_audit(audits, "schedule.resume", resumed)
        if audit is not None:
            evidence.append(
                Evidence("audit", str(audit.pk), f"{audit.action} by {audit.actor_label}")
            )
    data = paused.data if isinstance(paused.data, dict) else {}
    return PauseInterval(
        start=paused.at,
        end=resumed.at if resumed is not None else None,
        by=_who(paused.actor),
        reason=str(data.get("reason") or ""),
        until=data.get("until") if isinstance(data.get("until"), str) else None,
        resumed_by=_who(resumed.actor) if resumed is not None else "",
        evidence=tuple(evidence),
    )


def _pause_covering(
    schedule: Schedule, instant: datetime, *, now: datetime | None = None
) -> PauseInterval | None:
    for interval in pause_intervals(schedule):
        end = interval.end
        if end is None and now is not None and instant > now:
            # A pause still in force with an end time: the beat resumes it then,
            # so it covers only the future up to that end.
            end = schedule.paused_until if schedule.paused else None
        if interval.start <= instant and (end is None or instant < end):
            return interval
    return None


def _pause_sentence(p: PauseInterval, zone: ZoneInfo, *, future: bool = False) -> str:
    if future:
        text = f"the schedule is paused (by {p.by} since {_clock(p.start, zone)}"
        text += f', "{p.reason}")' if p.reason else ")"
        return text + " and will not run until it is resumed"
    text = f"the schedule was paused by {p.by} at {_clock(p.start, zone)}"
    if p.reason:
        text += f' ("{p.reason}")'
    if p.end is None:
        text += " and is still paused"
    elif p.resumed_by in ("beat", "system"):
        text += f"; it resumed by itself at {_clock(p.end, zone)} when the pause ended"
    else:
        text += f"; {p.resumed_by} resumed it at {_clock(p.end, zone)}"
    return text


def _audit_evidence(schedule: Schedule, action: str) -> list[Evidence]:
    audit = (
        AuditEvent.objects.filter(
            tenant_id=schedule.tenant_id,
            object_type="schedule",
            object_id=str(schedule.id),
            action=action,
        )
        .order_by("at", "id")
        .first()
    )
    if audit is None:
        return []
    return [Evidence("audit", str(audit.pk), f"{audit.action} by {audit.actor_label}")]


# --------------------------------------------------------------------------- the answer


def explain(*, schedule: Schedule, at: datetime, now: datetime | None = None) -> Explanation:
    """Why `schedule` did or did not run at the instant `at` (aware)."""
    at = _aware(at)
    now = _aware(now) if now is not None else datetime.now(UTC)
    zone = cron.get_zone(schedule.timezone)
    expr, tz, run_at = _definition_at(schedule, at)
    notes: list[str] = []
    occurrence: datetime | None = None

    upstream_occurrence = _upstream_occurrence(schedule, at)
    if upstream_occurrence is not None:
        # A dependent is fired by its upstreams, for their occurrences, not by its own timing.
        answer = _about_occurrence(schedule, upstream_occurrence, at, now, zone)
        answer.notes = notes
        return answer
    if schedule.kind == Kind.CRON and expr:
        try:
            would = cron.would_run_at(expr, tz, seed=str(schedule.id), at=at, now=now)
        except cron.CronError as exc:
            return Explanation("not_an_occurrence", exc.message, at)
        if would.note:
            notes.append(would.note)
        if would.is_occurrence:
            occurrence = would.scheduled_for
        elif would.note and would.previous is not None and "not exist" in would.note:
            # A wall time swallowed by a spring-forward gap ran at the gap's end.
            answer = _about_occurrence(schedule, would.previous, at, now, zone)
            answer.code = "dst_shifted"
            answer.sentence = f"{would.note}. {_cap(answer.sentence)}"
            answer.notes = notes
            return answer
        elif would.note and would.previous is not None and "twice" in would.note:
            # The second copy of a repeated wall time: a fixed-hour schedule ran at the first.
            answer = _about_occurrence(schedule, would.previous, at, now, zone)
            answer.code = "dst_shifted"
            answer.sentence = f"{would.note}. {_cap(answer.sentence)}"
            answer.notes = notes
            return answer
        else:
            manual = _manual_near(schedule, at)
            if manual is not None:
                return _about_execution(schedule, manual, at, now, zone, notes)
            return _not_an_occurrence(schedule, at, expr, tz, would, zone, now)
    else:
        target = run_at or schedule.run_at
        if target is not None and target.replace(second=0, microsecond=0) == at.replace(
            second=0, microsecond=0
        ):
            occurrence = target
        else:
            manual = _manual_near(schedule, at)
            if manual is not None:
                return _about_execution(schedule, manual, at, now, zone, notes)
            when = _both(target, zone) if target else "no time"
            return Explanation(
                "not_an_occurrence",
                f"{at.strftime('%Y-%m-%d %H:%M')} UTC is not an occurrence: "
                f"this one-off job runs only at {when}",
                at,
                evidence=[Evidence("schedule", str(schedule.id), schedule.name)],
            )

    assert occurrence is not None  # noqa: S101 - both branches above set it or returned
    answer = _about_occurrence(schedule, occurrence, at, now, zone)
    if notes and answer.code != "dst_shifted":
        answer.sentence = f"{answer.sentence} (DST: {notes[0]})"
    answer.notes = notes
    return answer


def _upstream_occurrence(schedule: Schedule, at: datetime) -> datetime | None:
    """The occurrence of one of the schedule's upstreams at `at` (its minute), if any."""
    for up in schedule.depends_on.filter(deleted_at__isnull=True).order_by("name"):
        if up.kind == Kind.CRON and up.cron:
            try:
                would = cron.would_run_at(up.cron, up.timezone, seed=str(up.id), at=at)
            except cron.CronError:
                continue
            if would.is_occurrence and would.scheduled_for is not None:
                return would.scheduled_for
        elif up.run_at is not None and up.run_at.replace(second=0, microsecond=0) == at.replace(
            second=0, microsecond=0
        ):
            return up.run_at
    return None


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _manual_near(schedule: Schedule, at: datetime) -> Execution | None:
    """A manual or API run started within the minute asked about."""
    minute = at.replace(second=0, microsecond=0)
    return (
        Execution.objects.filter(
            tenant_id=schedule.tenant_id,
            schedule=schedule,
            trigger__in=(Trigger.MANUAL, Trigger.API),
            scheduled_for__gte=minute,
            scheduled_for__lt=minute + timedelta(minutes=1),
        )
        .order_by("scheduled_for")
        .first()
    )


def _not_an_occurrence(
    schedule: Schedule,
    at: datetime,
    expr: str,
    tz: str,
    would: cron.WouldRun,
    zone: ZoneInfo,
    now: datetime,
) -> Explanation:
    description = cron.describe(expr, seed=str(schedule.id))
    parts = [f"{_both(would.at, zone)} is not an occurrence of '{expr}' ({description}) in {tz}"]
    if would.previous is not None:
        verb = "was" if would.previous <= now else "is"
        parts.append(f"the previous one {verb} {_both(would.previous, zone)}")
    if would.next is not None:
        parts.append(f"the next one is {_both(would.next, zone)}")
    return Explanation(
        "not_an_occurrence",
        "; ".join(parts),
        at,
        evidence=[Evidence("schedule", str(schedule.id), schedule.name)],
    )


def _about_occurrence(
    schedule: Schedule, occurrence: datetime, at: datetime, now: datetime, zone: ZoneInfo
) -> Explanation:
    when = _both(occurrence, zone)
    execution = (
        Execution.objects.filter(
            tenant_id=schedule.tenant_id, schedule=schedule, scheduled_for=occurrence
        )
        .order_by("id")
        .first()
    )
    if execution is not None:
        return _about_execution(schedule, execution, at, now, zone, [])

    base = Explanation("missing", "", at, occurrence=occurrence)
    created_at = schedule.created_at
    if created_at is not None and occurrence < created_at:
        base.code = "not_created_yet"
        by = _who(schedule.created_by)
        base.sentence = (
            f"the occurrence at {when} came before the schedule existed: "
            f"{by} created it at {_both(created_at, zone)}"
        )
        base.evidence = [
            Evidence("schedule", str(schedule.id), schedule.name),
            *_audit_evidence(schedule, "schedule.create"),
            *_audit_evidence(schedule, "job.create"),
        ]
        return base
    if schedule.deleted_at is not None and occurrence >= schedule.deleted_at:
        base.code = "deleted"
        base.sentence = (
            f"the schedule was deleted at {_both(schedule.deleted_at, zone)}, "
            f"before the occurrence at {when}"
        )
        base.evidence = [
            Evidence("schedule", str(schedule.id), schedule.name),
            *_audit_evidence(schedule, "schedule.delete"),
        ]
        return base
    pause = _pause_covering(schedule, occurrence, now=now)
    if pause is not None:
        base.code = "paused"
        if occurrence > now:
            base.sentence = f"will not run at {when}: {_pause_sentence(pause, zone, future=True)}"
        else:
            base.sentence = f"not run at {when}: {_pause_sentence(pause, zone)}"
        base.evidence = list(pause.evidence)
        return base
    if occurrence > now:
        base.code = "pending"
        base.sentence = f"not due yet: it will run at {when}"
        base.evidence = [Evidence("schedule", str(schedule.id), schedule.name)]
        return base
    bulk = (
        ExecutionEvent.objects.filter(
            tenant_id=schedule.tenant_id,
            schedule=schedule,
            kind="misfire_skipped",
            at__gte=occurrence,
        )
        .order_by("at", "id")
        .first()
    )
    if bulk is not None:
        base.code = "skipped_misfire"
        base.sentence = (
            f"skipped by the misfire policy ({schedule.misfire}): the occurrence at {when} was "
            f"among those missed while the scheduler was not firing; {bulk.message}"
        )
        base.evidence = [Evidence("event", str(bulk.pk), bulk.message)]
        return base
    if schedule.depends_on.exists():
        for upstream in schedule.depends_on.filter(deleted_at__isnull=True).order_by("name"):
            # No record yet (a long backlog, or its run_once / catch_up occurrence that
            # resuming decides): the upstream's pause is the answer.
            up_pause = _pause_covering(upstream, occurrence)
            if (
                up_pause is None
                or Execution.objects.filter(
                    tenant_id=schedule.tenant_id, schedule=upstream, scheduled_for=occurrence
                ).exists()
            ):
                continue  # not paused then, or it has a run the dependent waits on
            # The beat moved the upstream past it without a run: decided, skipped.
            decided = upstream.next_run_at is None or occurrence < upstream.next_run_at
            base.code = "skipped_upstream" if decided else "pending"
            outcome = (
                "so this schedule did not run for it"
                if decided
                else "this schedule runs for it only if the upstream runs it when resumed"
            )
            base.sentence = (
                f"the occurrence at {when} depends on upstream {upstream.name}, which was "
                f"paused then ({_pause_sentence(up_pause, zone).removeprefix('the schedule was ')}); "
                f"{outcome}"
            )
            base.evidence = [
                Evidence("schedule", str(upstream.id), upstream.name),
                *up_pause.evidence,
            ]
            return base
        names = ", ".join(sorted(schedule.depends_on.values_list("name", flat=True)))
        base.code = "pending"
        base.sentence = (
            f"this schedule runs after its upstream ({names}) succeeds for the same occurrence; "
            f"no upstream run for {when} has finished yet"
        )
        base.evidence = [Evidence("schedule", str(schedule.id), schedule.name)]
        return base
    if schedule.next_run_at is not None and schedule.next_run_at <= occurrence:
        base.code = "pending"
        base.sentence = (
            f"the scheduler has not fired the occurrence at {when} yet: the schedule's next "
            f"due time is still {_both(schedule.next_run_at, zone)} (the beat is behind or down)"
        )
        base.evidence = [Evidence("schedule", str(schedule.id), schedule.name)]
        return base
    base.sentence = (
        f"there is no record for the occurrence at {when}: the scheduler never fired it "
        f"(it would have recorded a run or a skip); report this to the platform operators"
    )
    base.evidence = [Evidence("schedule", str(schedule.id), schedule.name)]
    return base


def _outcome(execution: Execution, zone: ZoneInfo) -> str:
    """What became of an execution that was started."""
    state = execution.state
    shown = (
        f"HTTP {execution.status_code}"
        if execution.status_code is not None
        else f"exit {execution.exit_code}"
        if execution.exit_code is not None
        else ""
    )
    detail = f" ({shown})" if shown else ""
    finished = _clock(execution.finished_at, zone) if execution.finished_at else ""
    if state == ExecutionState.SUCCEEDED:
        return f"succeeded at {finished}{detail}, attempt {execution.attempt}"
    if state == ExecutionState.RUNNING:
        started = _clock(execution.started_at, zone) if execution.started_at else "?"
        return f"is running (attempt {execution.attempt}, started {started})"
    if state == ExecutionState.RETRY_SCHEDULED:
        nxt = _clock(execution.next_attempt_at, zone) if execution.next_attempt_at else "soon"
        why = f": {execution.reason}" if execution.reason else ""
        return f"failed and will retry (attempt {execution.attempt} at {nxt}){why}"
    if state == ExecutionState.DEAD:
        why = execution.reason or execution.error or "failed"
        return f"is dead after {execution.attempt} attempt(s) ({finished}): {why}"
    if state in (ExecutionState.FAILED, ExecutionState.TIMED_OUT):
        why = f": {execution.error}" if execution.error else ""
        return f"{state.replace('_', ' ')} on attempt {execution.attempt}{detail}{why}"
    if state == ExecutionState.QUEUED:
        return "is queued for a worker"
    return f"is {state}"


def _linked_execution(text: str, tenant_id: int) -> Evidence | None:
    match = _UUID.search(text or "")
    if match is None:
        return None
    found = (
        Execution.objects.filter(tenant_id=tenant_id, pk=match.group(0))
        .values_list("id", flat=True)
        .first()
    )
    return Evidence("execution", str(found), "related execution") if found else None


def _about_execution(
    schedule: Schedule,
    execution: Execution,
    at: datetime,
    now: datetime,
    zone: ZoneInfo,
    notes: list[str],
) -> Explanation:
    when = _both(execution.scheduled_for, zone)
    main = Evidence("execution", str(execution.id), f"{execution.state} ({execution.trigger})")
    answer = Explanation(
        "ran",
        "",
        at,
        occurrence=execution.scheduled_for,
        evidence=[main],
        execution_id=str(execution.id),
        notes=notes,
    )
    reason = execution.reason or ""
    state = execution.state
    manual = execution.trigger in (Trigger.MANUAL, Trigger.API)
    label = "manual run" if execution.trigger == Trigger.MANUAL else "run"

    if state == ExecutionState.SKIPPED:
        code = execution.reason_code
        if code == "misfire":
            pause = _pause_covering(schedule, execution.scheduled_for)
            if pause is not None:
                answer.code = "paused"
                answer.sentence = (
                    f"not run at {when}: {_pause_sentence(pause, zone)}; on resuming, the "
                    f"misfire policy ({schedule.misfire}) recorded this occurrence as skipped"
                )
                answer.evidence = [*pause.evidence, main]
                return answer
            answer.code = "skipped_misfire"
            answer.sentence = (
                f"skipped by the misfire policy ({schedule.misfire}) at {when}: the scheduler "
                f"only reached it at {_clock(execution.created_at, zone)}, "
                f"{_late(execution.created_at - execution.scheduled_for)} late, beyond the "
                f"{schedule.misfire_grace_s} s grace period (was the scheduler down?)"
            )
            return answer
        if code == "paused":
            # Recorded by the beat at due time because a dependent waits on this schedule.
            answer.code = "paused"
            pause = _pause_covering(schedule, execution.scheduled_for)
            if pause is not None:
                answer.sentence = (
                    f"not run at {when}: {_pause_sentence(pause, zone)}; the occurrence was "
                    f"recorded as skipped when it fell due"
                )
                answer.evidence = [*pause.evidence, main]
            else:
                answer.sentence = f"not run at {when}: {reason.removeprefix('skipped: ')}"
            return answer
        if code == "overlap_forbid":
            answer.code = "skipped_overlap"
            answer.sentence = (
                f"skipped at {when}: the previous run was still active and the schedule forbids "
                f"overlapping runs ({reason or 'overlap forbid'})"
            )
            linked = _linked_execution(reason, schedule.tenant_id)
            if linked is not None:
                answer.evidence.append(linked)
            return answer
        if code == "upstream":
            answer.code = "skipped_upstream"
            answer.sentence = f"skipped at {when}: {reason.removeprefix('skipped: ')}"
            linked = _linked_execution(reason, schedule.tenant_id)
            if linked is not None:
                answer.evidence.append(linked)
            return answer
        if code == "quota_exhausted":
            answer.code = "skipped_quota"
            answer.sentence = (
                f"skipped at {when}: {reason or 'the tenant was over its daily quota'}"
            )
            return answer
        answer.code = "skipped"
        answer.sentence = f"skipped at {when}: {reason or 'no reason recorded'}"
        return answer

    if state == ExecutionState.CANCELLED:
        if execution.reason_code == "schedule_deleted":
            answer.code = "deleted"
            answer.sentence = f"the {label} for {when} was cancelled: {reason}"
            answer.evidence.extend(_audit_evidence(schedule, "schedule.delete"))
            return answer
        answer.code = "cancelled"
        finished = _clock(execution.finished_at, zone) if execution.finished_at else "?"
        cancel_events = ExecutionEvent.objects.filter(
            tenant_id=schedule.tenant_id, execution=execution, kind__startswith="cancelled"
        ).order_by("at", "id")
        answer.evidence.extend(Evidence("event", str(e.pk), e.message) for e in cancel_events)
        what = reason or "cancelled"
        started = " after it had started" if execution.started_at else ""
        answer.sentence = f"the {label} for {when} was cancelled at {finished}{started}: {what}"
        return answer

    held = list(
        ExecutionEvent.objects.filter(
            tenant_id=schedule.tenant_id, execution=execution, kind__in=HELD_KINDS
        ).order_by("at", "id")
    )
    if held:
        answer.code = "held"
        answer.evidence.extend(Evidence("event", str(e.pk), e.message) for e in held)
        first = held[0]
        why = first.message.removeprefix("waiting: ")
        if execution.started_at is not None:
            # Held, then started: the code is what became of it (a held run that died is
            # `dead`); the sentence tells the wait.
            answer.code = OUTCOME_CODES.get(ExecutionState(state), "ran")
            answer.sentence = (
                f"held at {when}: {why} (from {_clock(first.at, zone)}); it ran at "
                f"{_clock(execution.started_at, zone)} and {_outcome(execution, zone)}"
            )
        else:
            answer.sentence = (
                f"held at {when}: {why} (since {_clock(first.at, zone)}); it has not started yet"
            )
        return answer

    if execution.started_at is None and state in (
        ExecutionState.SCHEDULED,
        ExecutionState.QUEUED,
        ExecutionState.RETRY_SCHEDULED,
    ):
        answer.code = "pending"
        due = _clock(execution.due_at, zone)
        if state == ExecutionState.QUEUED:
            answer.sentence = f"the {label} for {when} is queued (due {due}) and not started yet"
        elif execution.due_at > now:
            answer.sentence = f"the {label} for {when} is scheduled; it is due at {due}"
        else:
            answer.sentence = (
                f"the {label} for {when} is recorded but not yet published (due {due}); "
                f"the beat publishes it, or re-publishes it if the broker lost it"
            )
        return answer

    answer.code = OUTCOME_CODES.get(ExecutionState(state), "ran")
    attempts = ExecutionEvent.objects.filter(
        tenant_id=schedule.tenant_id,
        execution=execution,
        kind__in=("attempt_succeeded", "attempt_failed", "dead", "timed_out"),
    ).order_by("at", "id")
    answer.evidence.extend(Evidence("event", str(e.pk), e.message) for e in attempts)
    prefix = "it did run" if not manual else f"a {label} was made"
    extra = ""
    if execution.trigger == Trigger.CATCH_UP:
        extra = " (a late catch-up run, by the misfire policy)"
    answer.sentence = (
        f"{prefix}{extra}: execution {execution.id} for {when} {_outcome(execution, zone)}"
    )
    return answer


def _late(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds >= 3600:
        return f"{seconds // 3600} h {(seconds % 3600) // 60:02d} min"
    if seconds >= 60:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds} s"


# --------------------------------------------------------------------------- presenting


def api_url(evidence: Evidence, schedule_id: str) -> str | None:
    """Where an API client reads a piece of evidence."""
    if evidence.kind == "execution":
        return f"/v1/executions/{evidence.id}"
    if evidence.kind == "schedule":
        return f"/v1/schedules/{evidence.id}"
    return None


def as_json(answer: Explanation, *, schedule_id: str) -> dict[str, Any]:
    def iso(value: datetime | None) -> str | None:
        if value is None:
            return None
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")

    return {
        "code": answer.code,
        "sentence": answer.sentence,
        "evidence": [e.as_dict(api_url(e, schedule_id)) for e in answer.evidence],
        "at": iso(answer.at),
        "occurrence": iso(answer.occurrence),
        "execution_id": answer.execution_id,
        "notes": answer.notes,
    }
