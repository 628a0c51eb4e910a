"""The explainer's decisions: why did (or didn't) a schedule run at a given moment?

Answers come from recorded decisions, never guesses: the execution row of the
occurrence (one per occurrence, so there is at most one to find), its events
(held, claimed, attempts, cancellations), the schedule's pause / resume events
and the audit log (who paused, with which reason; which definition was in force
at that moment). Every branch is on a recorded field (a state, a reason code,
an event kind, `WouldRun.dst`), never on a sentence. Pure reads.

`explain(schedule=…, at=…)` returns an `Explanation` whose `code` is one of
CODES and whose `sentence` is fit to show a user as is.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from dispatch.completion import OWNER_PREFIX as HANDED_OFF
from dispatch.explain import records
from dispatch.explain.present import Evidence, Explanation, both, cap, clock, late, who
from dispatch.explain.records import PauseInterval
from dispatch.history.archive import archived_day_of_instant
from dispatch.lifecycle import completion
from dispatch.models import Execution, ExecutionEvent, ExecutionState, Kind, Schedule, Trigger
from dispatch.selectors.calendars import schedule_filter
from dispatch.states import (
    ATTEMPT_END_EVENT_KINDS,
    CANCEL_EVENT_KINDS,
    CLAIMABLE_STATES,
    HELD_EVENT_KINDS,
    AuditAction,
    EventData,
    EventKind,
    ExplainCode,
    ReasonCode,
)
from dispatch.targets.runtime import result_label
from dispatch.timing import cron

# Every code an answer can carry, with its meaning (the API documents these as an enum).
CODE_MEANINGS: dict[str, str] = {str(code.value): str(code.label) for code in ExplainCode}
CODES = tuple(CODE_MEANINGS)
# What became of an execution that was started, by its state.
OUTCOME_CODES = {
    ExecutionState.SUCCEEDED: ExplainCode.RAN,
    ExecutionState.RUNNING: ExplainCode.RUNNING,
    ExecutionState.RETRY_SCHEDULED: ExplainCode.RETRYING,
    # Queued or scheduled again after an attempt started: a retry on its way.
    ExecutionState.QUEUED: ExplainCode.RETRYING,
    ExecutionState.SCHEDULED: ExplainCode.RETRYING,
    ExecutionState.FAILED: ExplainCode.FAILED,
    ExecutionState.TIMED_OUT: ExplainCode.TIMED_OUT,
    ExecutionState.DEAD: ExplainCode.DEAD,
}
# Skipped because of another execution (an upstream's outcome, a key's holder), which
# the answer links as its evidence.
_SKIPPED_FOR_ANOTHER: dict[str, ExplainCode] = {
    ReasonCode.UPSTREAM: ExplainCode.SKIPPED_UPSTREAM,
    ReasonCode.KEY_SKIPPED: ExplainCode.SKIPPED_KEY,
}


def _aware(value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("at must be timezone-aware")
    if not cron.MIN_YEAR <= value.year <= cron.MAX_YEAR:
        raise ValueError(f"at must be between the years {cron.MIN_YEAR} and {cron.MAX_YEAR}")
    return value.astimezone(UTC)


def _pause_sentence(p: PauseInterval, zone: ZoneInfo, *, future: bool = False) -> str:
    if future:
        text = f"the schedule is paused (by {p.by} since {clock(p.start, zone)}"
        text += f', "{p.reason}")' if p.reason else ")"
        return text + " and will not run until it is resumed"
    text = f"the schedule was paused by {p.by} at {clock(p.start, zone)}"
    if p.reason:
        text += f' ("{p.reason}")'
    if p.end is None:
        text += " and is still paused"
    elif p.resumed_by in ("beat", "system"):
        text += f"; it resumed by itself at {clock(p.end, zone)} when the pause ended"
    else:
        text += f"; {p.resumed_by} resumed it at {clock(p.end, zone)}"
    return text


# --------------------------------------------------------------------------- the answer


def explain(*, schedule: Schedule, at: datetime, now: datetime | None = None) -> Explanation:
    """Why `schedule` did or did not run at the instant `at` (aware)."""
    at = _aware(at)
    now = _aware(now) if now is not None else datetime.now(UTC)
    zone = cron.get_zone(schedule.timezone)
    expr, tz, run_at = records.definition_at(schedule, at)
    notes: list[str] = []
    occurrence: datetime | None = None

    upstream_occurrence = records.upstream_occurrence(schedule, at)
    if upstream_occurrence is not None:
        # A dependent is fired by its upstreams, for their occurrences, not by its own timing.
        answer = _about_occurrence(schedule, upstream_occurrence, at, now, zone)
        answer.notes = notes
        return answer
    if schedule.kind == Kind.CRON and expr:
        try:
            would = cron.would_run_at(
                expr, tz, seed=str(schedule.id), at=at, now=now, dates=schedule_filter(schedule.id)
            )
        except cron.CronError as exc:
            return Explanation(ExplainCode.NOT_AN_OCCURRENCE, exc.message, at)
        if would.excluded is not None and records.manual_near(schedule, at) is None:
            return _excluded(schedule, at, would, zone, now)
        if would.note:
            notes.append(would.note)
        if would.spec is not None and would.is_occurrence:
            notes.append(f"given by {would.spec}")
        if would.is_occurrence:
            occurrence = would.scheduled_for
        elif would.dst is not None and would.previous is not None:
            # "gap": a wall time swallowed by a spring-forward gap ran at the gap's end.
            # "fold": the second copy of a repeated wall time; a fixed-hour schedule ran
            # at the first. Either way the answer is about that earlier run.
            answer = _about_occurrence(schedule, would.previous, at, now, zone)
            answer.code = ExplainCode.DST_SHIFTED
            answer.sentence = f"{would.note}. {cap(answer.sentence)}"
            answer.notes = notes
            return answer
        else:
            manual = records.manual_near(schedule, at)
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
            manual = records.manual_near(schedule, at)
            if manual is not None:
                return _about_execution(schedule, manual, at, now, zone, notes)
            when = both(target, zone) if target else "no time"
            return Explanation(
                ExplainCode.NOT_AN_OCCURRENCE,
                f"{at.strftime('%Y-%m-%d %H:%M')} UTC is not an occurrence: "
                f"this one-off job runs only at {when}",
                at,
                evidence=[Evidence("schedule", str(schedule.id), schedule.name)],
            )

    assert occurrence is not None  # noqa: S101 - both branches above set it or returned
    answer = _about_occurrence(schedule, occurrence, at, now, zone)
    if notes and answer.code != ExplainCode.DST_SHIFTED:
        answer.sentence = f"{answer.sentence} (DST: {notes[0]})"
    answer.notes = notes
    return answer


def _replanned(schedule: Schedule, instant: datetime) -> ExecutionEvent | None:
    """The `replanned` event that withdrew a staged occurrence at `instant` (to the
    minute) before it was published, if one did: an edit or a pause within the beat's
    stage-ahead window (services/schedules.py)."""
    minute = instant.replace(second=0, microsecond=0)
    for event in ExecutionEvent.objects.filter(
        tenant_id=schedule.tenant_id,
        schedule=schedule,
        kind=EventKind.REPLANNED,
        at__gte=minute - timedelta(days=1),
        at__lte=minute + timedelta(minutes=1),
    ).order_by("-at", "-id")[:20]:
        for iso in (event.data or {}).get(EventData.WITHDRAWN, []):
            if datetime.fromisoformat(iso).replace(second=0, microsecond=0) == minute:
                return event
    return None


def _with_replanned(answer: Explanation, schedule: Schedule, instant: datetime) -> Explanation:
    event = _replanned(schedule, instant)
    if event is not None:
        answer.sentence = f"{answer.sentence}; {event.message}"
        answer.evidence = [*answer.evidence, Evidence("event", str(event.pk), event.message)]
    return answer


def _excluded(
    schedule: Schedule, at: datetime, would: cron.WouldRun, zone: ZoneInfo, now: datetime
) -> Explanation:
    # The schedule's calendars as they are now: a calendar edit changes the answer for
    # past dates too (the beat used the dates in force when it planned).
    verb = "did not run" if at <= now else "will not run"
    parts = [f"{both(at, zone)} {verb}: {would.excluded}"]
    if would.next is not None:
        parts.append(f"the next run is {both(would.next, zone)}")
    return Explanation(
        ExplainCode.EXCLUDED_BY_CALENDAR,
        "; ".join(parts),
        at,
        evidence=[Evidence("schedule", str(schedule.id), schedule.name)],
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
    done = completion(schedule, now=now) if would.outside is not None else None
    if done is not None and done.at is not None and would.at >= done.at:
        # At or after an end_at that has passed: the schedule is completed.
        return Explanation(
            ExplainCode.COMPLETED,
            f"not run at {both(would.at, zone)}: the schedule is {done.sentence}"
            + (f"; the previous run was {both(would.previous, zone)}" if would.previous else ""),
            at,
            evidence=[Evidence("schedule", str(schedule.id), schedule.name)],
        )
    if would.outside is not None:
        # A spec gives this time, the schedule's start_at/end_at leave it out.
        parts = [f"{both(would.at, zone)} is not an occurrence: {would.spec or expr!r} gives it"]
        parts[0] += f", but it is {would.outside}"
    else:
        parts = [f"{both(would.at, zone)} is not an occurrence of '{expr}' ({description}) in {tz}"]
    if would.previous is not None:
        verb = "was" if would.previous <= now else "is"
        parts.append(f"the previous one {verb} {both(would.previous, zone)}")
    if would.next is not None:
        parts.append(f"the next one is {both(would.next, zone)}")
    answer = Explanation(
        ExplainCode.NOT_AN_OCCURRENCE,
        "; ".join(parts),
        at,
        evidence=[Evidence("schedule", str(schedule.id), schedule.name)],
    )
    return _with_replanned(answer, schedule, at)


def _about_occurrence(
    schedule: Schedule, occurrence: datetime, at: datetime, now: datetime, zone: ZoneInfo
) -> Explanation:
    when = both(occurrence, zone)
    execution = (
        Execution.objects.filter(
            tenant_id=schedule.tenant_id, schedule=schedule, scheduled_for=occurrence
        )
        .order_by("id")
        .first()
    )
    if execution is not None:
        return _about_execution(schedule, execution, at, now, zone, [])

    base = Explanation(ExplainCode.MISSING, "", at, occurrence=occurrence)
    archived = archived_day_of_instant(occurrence)
    if archived is not None:
        # The decisions of that day left the database with it: say where they are,
        # not that nothing happened.
        base.code = ExplainCode.ARCHIVED
        base.sentence = (
            f"the history of {archived.day.isoformat()} (UTC), which holds the occurrence at"
            f" {when}, was archived at {both(archived.archived_at, zone)} and left the"
            f" database: its execution and events are in {archived.manifest}"
        )
        base.evidence = [Evidence("archive", archived.day.isoformat(), archived.manifest)]
        return base
    created_at = schedule.created_at
    if created_at is not None and occurrence < created_at:
        base.code = ExplainCode.NOT_CREATED_YET
        by = who(schedule.created_by)
        base.sentence = (
            f"the occurrence at {when} came before the schedule existed: "
            f"{by} created it at {both(created_at, zone)}"
        )
        base.evidence = [
            Evidence("schedule", str(schedule.id), schedule.name),
            *records.audit_evidence(schedule, AuditAction.SCHEDULE_CREATE),
            *records.audit_evidence(schedule, AuditAction.JOB_CREATE),
        ]
        return base
    if schedule.deleted_at is not None and occurrence >= schedule.deleted_at:
        base.code = ExplainCode.DELETED
        base.sentence = (
            f"the schedule was deleted at {both(schedule.deleted_at, zone)}, "
            f"before the occurrence at {when}"
        )
        base.evidence = [
            Evidence("schedule", str(schedule.id), schedule.name),
            *records.audit_evidence(schedule, AuditAction.SCHEDULE_DELETE),
        ]
        return base
    done = completion(schedule, now=now)
    if done is not None and (done.at is None or occurrence >= done.at):
        base.code = ExplainCode.COMPLETED
        verb = "will not run" if occurrence > now else "not run"
        base.sentence = f"{verb} at {when}: the schedule is {done.sentence}"
        base.evidence = [Evidence("schedule", str(schedule.id), schedule.name)]
        event = records.completed_event(schedule)
        if event is not None:
            base.evidence.append(Evidence("event", str(event.pk), event.message))
        return base
    pause = records.pause_covering(schedule, occurrence, now=now)
    if pause is not None:
        base.code = ExplainCode.PAUSED
        if occurrence > now:
            base.sentence = f"will not run at {when}: {_pause_sentence(pause, zone, future=True)}"
        else:
            base.sentence = f"not run at {when}: {_pause_sentence(pause, zone)}"
        base.evidence = list(pause.evidence)
        return base
    if occurrence > now:
        base.code = ExplainCode.PENDING
        base.sentence = f"not due yet: it will run at {when}"
        base.evidence = [Evidence("schedule", str(schedule.id), schedule.name)]
        return _with_replanned(base, schedule, occurrence)
    bulk = (
        ExecutionEvent.objects.filter(
            tenant_id=schedule.tenant_id,
            schedule=schedule,
            kind=EventKind.MISFIRE_SKIPPED,
            at__gte=occurrence,
        )
        .order_by("at", "id")
        .first()
    )
    if bulk is not None:
        base.code = ExplainCode.SKIPPED_MISFIRE
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
            up_pause = records.pause_covering(upstream, occurrence)
            if (
                up_pause is None
                or Execution.objects.filter(
                    tenant_id=schedule.tenant_id, schedule=upstream, scheduled_for=occurrence
                ).exists()
            ):
                continue  # not paused then, or it has a run the dependent waits on
            # The beat moved the upstream past it without a run: decided, skipped.
            decided = upstream.next_run_at is None or occurrence < upstream.next_run_at
            base.code = ExplainCode.SKIPPED_UPSTREAM if decided else ExplainCode.PENDING
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
        base.code = ExplainCode.PENDING
        base.sentence = (
            f"this schedule runs after its upstream ({names}) succeeds for the same occurrence; "
            f"no upstream run for {when} has finished yet"
        )
        base.evidence = [Evidence("schedule", str(schedule.id), schedule.name)]
        return base
    if schedule.next_run_at is not None and schedule.next_run_at <= occurrence:
        base.code = ExplainCode.PENDING
        base.sentence = (
            f"the scheduler has not fired the occurrence at {when} yet: the schedule's next "
            f"due time is still {both(schedule.next_run_at, zone)} (the beat is behind or down)"
        )
        base.evidence = [Evidence("schedule", str(schedule.id), schedule.name)]
        return _with_replanned(base, schedule, occurrence)
    base.sentence = (
        f"there is no record for the occurrence at {when}: the scheduler never fired it "
        f"(it would have recorded a run or a skip); report this to the platform operators"
    )
    base.evidence = [Evidence("schedule", str(schedule.id), schedule.name)]
    return base


def _awaiting(execution: Execution, zone: ZoneInfo, started: str) -> str:
    """A handed-off attempt (dispatch/completion.py): since when the platform waits for
    the target, its last heartbeat, and until when it waits for the next one."""
    handed = records.latest_event(execution, EventKind.AWAITING_COMPLETION)
    since = clock(handed.at, zone) if handed is not None else started
    beat = records.latest_event(execution, EventKind.TARGET_HEARTBEAT)
    data = (beat.data or {}) if beat is not None else {}
    if beat is not None and data.get("fencing_token") == execution.fencing_token:
        last = datetime.fromisoformat(str(data.get("last_at") or beat.at.isoformat()))
        progress = f" ({data['progress']:g} % done)" if data.get("progress") is not None else ""
        heard = f"last heartbeat at {clock(last, zone)}{progress}"
    else:
        heard = "no heartbeat yet"
    until = clock(execution.lease_expires_at, zone) if execution.lease_expires_at else "?"
    return (
        f"is waiting for the target's completion since {since} (attempt {execution.attempt}, "
        f"started {started}): {heard}; the next heartbeat or completion is due by {until}"
    )


def _outcome(execution: Execution, zone: ZoneInfo) -> str:
    """What became of an execution that was started."""
    state = execution.state
    shown = result_label(execution.status_code, execution.exit_code)
    detail = f" ({shown})" if shown else ""
    finished = clock(execution.finished_at, zone) if execution.finished_at else ""
    if state == ExecutionState.SUCCEEDED:
        return f"succeeded at {finished}{detail}, attempt {execution.attempt}"
    if state == ExecutionState.RUNNING:
        started = clock(execution.started_at, zone) if execution.started_at else "?"
        if execution.lease_owner.startswith(HANDED_OFF):
            return _awaiting(execution, zone, started)
        return f"is running (attempt {execution.attempt}, started {started})"
    if state == ExecutionState.RETRY_SCHEDULED:
        nxt = clock(execution.next_attempt_at, zone) if execution.next_attempt_at else "soon"
        why = f": {execution.reason}" if execution.reason else ""
        return f"failed and will retry (attempt {execution.attempt} at {nxt}){why}"
    if state == ExecutionState.DEAD:
        why = execution.reason or execution.error or "failed"
        # The attempts of the chain that died (a re-run's chain counts from its base).
        tried = execution.attempt - execution.attempt_base
        return f"is dead after {tried} attempt(s) ({finished}): {why}"
    if state in (ExecutionState.FAILED, ExecutionState.TIMED_OUT):
        why = f": {execution.error}" if execution.error else ""
        return f"{state.replace('_', ' ')} on attempt {execution.attempt}{detail}{why}"
    if state == ExecutionState.QUEUED:
        return "is queued for a worker"
    return f"is {state}"


def _about_execution(
    schedule: Schedule,
    execution: Execution,
    at: datetime,
    now: datetime,
    zone: ZoneInfo,
    notes: list[str],
) -> Explanation:
    """What became of the occurrence's execution, and where its current run came
    from when that was run control: the backfill that created it, the latest
    re-run (who, when, which attempt) — read from the row's links and the
    `backfilled` / `rerun` events' fields."""
    answer = _about_execution_state(schedule, execution, at, now, zone, notes)
    origins: list[str] = []
    made = records.backfill_origin(execution)
    if made is not None:
        origins.append(f"created by backfill {made.id} on {made.on.astimezone(zone):%Y-%m-%d}")
        answer.evidence.append(made.evidence)
    if execution.reruns:
        rerun = records.latest_event(execution, EventKind.RERUN)
        if rerun is not None:
            data = rerun.data or {}
            text = f"re-run by {who(rerun.actor)} at {clock(rerun.at, zone)}"
            text += f" (attempt {data.get('attempt', execution.attempt)}"
            if data.get("target_edited"):
                text += ", with an edited target"
            if data.get(EventData.BACKFILL_ID):
                text += f", for backfill {data[EventData.BACKFILL_ID]}"
            origins.append(text + ")")
            answer.evidence.append(Evidence("event", str(rerun.pk), rerun.message))
    if origins:
        answer.sentence = f"{answer.sentence}; {'; '.join(origins)}"
    return answer


def _cancelled_by(execution: Execution, zone: ZoneInfo) -> str | None:
    """A user's cancel: who, when and why, from the `cancelled` event's fields
    (None for the platform's cancels, whose reason column says it all)."""
    if execution.reason_code != ReasonCode.CANCELLED_BY_USER:
        return None
    event = records.latest_event(execution, EventKind.CANCELLED)
    if event is None:
        return None
    why = (event.data or {}).get("reason") or ""
    return f"cancelled by {who(event.actor)} at {clock(event.at, zone)}" + (
        f" ({why})" if why else ""
    )


def _about_execution_state(
    schedule: Schedule,
    execution: Execution,
    at: datetime,
    now: datetime,
    zone: ZoneInfo,
    notes: list[str],
) -> Explanation:
    when = both(execution.scheduled_for, zone)
    main = Evidence("execution", str(execution.id), f"{execution.state} ({execution.trigger})")
    answer = Explanation(
        ExplainCode.RAN,
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
    labels: dict[str, str] = {Trigger.MANUAL: "manual run", Trigger.BACKFILL: "backfill run"}
    label = labels.get(execution.trigger, "run")

    if state == ExecutionState.SKIPPED:
        code = execution.reason_code
        if code == ReasonCode.MISFIRE:
            pause = records.pause_covering(schedule, execution.scheduled_for)
            if pause is not None:
                answer.code = ExplainCode.PAUSED
                answer.sentence = (
                    f"not run at {when}: {_pause_sentence(pause, zone)}; on resuming, the "
                    f"misfire policy ({schedule.misfire}) recorded this occurrence as skipped"
                )
                answer.evidence = [*pause.evidence, main]
                return answer
            answer.code = ExplainCode.SKIPPED_MISFIRE
            answer.sentence = (
                f"skipped by the misfire policy ({schedule.misfire}) at {when}: the scheduler "
                f"only reached it at {clock(execution.created_at, zone)}, "
                f"{late(execution.created_at - execution.scheduled_for)} late, beyond the "
                f"{schedule.misfire_grace_s} s grace period (was the scheduler down?)"
            )
            return answer
        if code == ReasonCode.PAUSED:
            # Recorded by the beat at due time because a dependent waits on this schedule.
            answer.code = ExplainCode.PAUSED
            pause = records.pause_covering(schedule, execution.scheduled_for)
            if pause is not None:
                answer.sentence = (
                    f"not run at {when}: {_pause_sentence(pause, zone)}; the occurrence was "
                    f"recorded as skipped when it fell due"
                )
                answer.evidence = [*pause.evidence, main]
            else:
                answer.sentence = f"not run at {when}: {reason.removeprefix('skipped: ')}"
            return answer
        if code == ReasonCode.SCHEDULE_COMPLETED:
            answer.code = ExplainCode.COMPLETED
            done = completion(schedule, now=now)
            answer.sentence = (
                f"not run at {when}: the schedule is {done.sentence}"
                if done is not None
                else f"not run at {when}: {reason.removeprefix('not run: ')}"
            )
            answer.sentence += " (published before it completed, skipped when claimed)"
            return answer
        if code == ReasonCode.OVERLAP_FORBID:
            answer.code = ExplainCode.SKIPPED_OVERLAP
            answer.sentence = (
                f"skipped at {when}: the previous run was still active and the schedule forbids "
                f"overlapping runs ({reason or 'overlap forbid'})"
            )
            linked = records.related_execution(execution, schedule)
            if linked is not None:
                answer.evidence.append(linked)
            return answer
        if code in _SKIPPED_FOR_ANOTHER:
            # "skipped: upstream ... failed" / "skipped: key customer-42 already running
            # execution <id> (limit 1, ...)": the other execution is the evidence.
            answer.code = _SKIPPED_FOR_ANOTHER[code]
            answer.sentence = f"skipped at {when}: {reason.removeprefix('skipped: ')}"
            linked = records.related_execution(execution, schedule)
            if linked is not None:
                answer.evidence.append(linked)
            return answer
        if code == ReasonCode.QUOTA_EXHAUSTED:
            answer.code = ExplainCode.SKIPPED_QUOTA
            answer.sentence = (
                f"skipped at {when}: {reason or 'the tenant was over its daily quota'}"
            )
            return answer
        answer.code = ExplainCode.SKIPPED
        answer.sentence = f"skipped at {when}: {reason or 'no reason recorded'}"
        return answer

    if state == ExecutionState.CANCELLED:
        if execution.reason_code == ReasonCode.SCHEDULE_DELETED:
            answer.code = ExplainCode.DELETED
            answer.sentence = f"the {label} for {when} was cancelled: {reason}"
            answer.evidence.extend(records.audit_evidence(schedule, AuditAction.SCHEDULE_DELETE))
            return answer
        answer.code = ExplainCode.CANCELLED
        finished = clock(execution.finished_at, zone) if execution.finished_at else "?"
        cancel_events = records.events_of(execution, CANCEL_EVENT_KINDS)
        answer.evidence.extend(Evidence("event", str(e.pk), e.message) for e in cancel_events)
        replacer = records.related_execution(execution, schedule)
        if replacer is not None:
            answer.evidence.append(replacer)
        what = reason or "cancelled"
        started = " after it had started" if execution.started_at else ""
        by_user = _cancelled_by(execution, zone)
        if by_user is not None:
            answer.sentence = f"the {label} for {when} was {by_user}{started}"
            return answer
        answer.sentence = f"the {label} for {when} was cancelled at {finished}{started}: {what}"
        return answer

    held = records.events_of(execution, HELD_EVENT_KINDS)
    if held:
        answer.code = ExplainCode.HELD
        answer.evidence.extend(Evidence("event", str(e.pk), e.message) for e in held)
        first = held[0]
        why = first.message.removeprefix("waiting: ").removeprefix("held: ")
        if execution.started_at is not None:
            # Held, then started: the code is what became of it (a held run that died is
            # `dead`); the sentence tells the wait.
            answer.code = OUTCOME_CODES.get(ExecutionState(state), ExplainCode.RAN)
            answer.sentence = (
                f"held at {when}: {why} (from {clock(first.at, zone)}); it ran at "
                f"{clock(execution.started_at, zone)} and {_outcome(execution, zone)}"
            )
        else:
            answer.sentence = (
                f"held at {when}: {why} (since {clock(first.at, zone)}); it has not started yet"
            )
        return answer

    if execution.started_at is None and state in CLAIMABLE_STATES:
        answer.code = ExplainCode.PENDING
        due = clock(execution.due_at, zone)
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

    answer.code = OUTCOME_CODES.get(ExecutionState(state), ExplainCode.RAN)
    attempts = records.events_of(execution, ATTEMPT_END_EVENT_KINDS)
    answer.evidence.extend(Evidence("event", str(e.pk), e.message) for e in attempts)
    prefix = "it did run" if not manual else f"a {label} was made"
    extra = ""
    if execution.trigger == Trigger.CATCH_UP:
        extra = " (a late catch-up run, by the misfire policy)"
    answer.sentence = (
        f"{prefix}{extra}: execution {execution.id} for {when} {_outcome(execution, zone)}"
    )
    return answer
