"""Execution pages: one execution's row, events and timeline; cancel and re-run,
one at a time or in bulk from the runs page.

Cancel and re-run each ask first on a page of their own (works without
JavaScript, like revoking a token) that says what will happen; the POST does
it. The services decide which states allow it: their 409 (naming the state)
and 400 (naming the field) are shown on that page, never a 500."""

from __future__ import annotations

import uuid
from datetime import timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import reswap, retarget

from console import charts, control_forms
from console.access import base_context, tenant_view, viewer_zone
from console.views.common import done, is_htmx, next_url
from console.views.schedules import bulk_review
from dispatch import logs, selectors, services
from dispatch.exceptions import DispatchError, LiveLogUnavailable, NotFound
from dispatch.models import Execution
from dispatch.states import ACTIVE_STATES, FINAL_STATES, IN_FLIGHT_STATES, ExecutionState
from tenants.roles import Principal, Role

# Lines of the live log the execution page opens with (the API pages through all of
# them); while the attempt runs or is due within LIVE_LOG_SOON, the page asks for new
# lines every LIVE_LOG_POLL_MS and appends at most LIVE_LOG_STEP_LINES a time; while it
# waits for a later start, every LIVE_LOG_IDLE_POLL_MS.
LIVE_LOG_LINES = 200
LIVE_LOG_POLL_MS = 500
LIVE_LOG_IDLE_POLL_MS = 2000
LIVE_LOG_SOON = timedelta(minutes=1)
LIVE_LOG_STEP_LINES = 500


def _follow(execution: Execution) -> dict[str, Any]:
    """Whether the page follows the log (lines may still come), and how often it asks:
    often once the attempt runs or is about to (its first lines must not wait), seldom
    for one due later."""
    due = execution.next_attempt_at or execution.due_at
    soon = execution.state in IN_FLIGHT_STATES or due <= timezone.now() + LIVE_LOG_SOON
    return {
        "log_following": execution.state in ACTIVE_STATES,
        "log_poll_ms": LIVE_LOG_POLL_MS if soon else LIVE_LOG_IDLE_POLL_MS,
    }


def _execution_or_404(principal: Principal, execution_id: uuid.UUID) -> Execution:
    try:
        return selectors.execution_get(tenant=principal.tenant, execution_id=execution_id)
    except NotFound:
        raise Http404("execution not found") from None


def stop_bound_s() -> int:
    """How long a worker may take to notice a cancel: its heartbeat (a third of
    the lease) finds the token bumped and stops the attempt."""
    return max(1, round(settings.EXECUTION_LEASE_S / 3))


def control_state(principal: Principal, execution: Execution) -> dict[str, Any]:
    """Which of cancel / re-run this viewer may do now, and why not. `offer_cancel`:
    whether the execution page shows Cancel at all — only while the run may still run
    (a finished one never can be cancelled: a disabled Cancel beside its reason read as
    an offer); the cancel page still says why not (`cancel_why`)."""
    state = ExecutionState(execution.state)
    label = state.value.replace("_", " ")
    cancel_why = rerun_why = ""
    if not principal.can(Role.OPERATOR):
        cancel_why = rerun_why = (
            f"Cancel and re-run need the operator role; you are {principal.role.label}."
        )
    else:
        if state not in ACTIVE_STATES:
            cancel_why = f"It is {label}: only a scheduled, queued, running or retrying execution can be cancelled."
        if state not in FINAL_STATES:
            rerun_why = f"It is {label}: only a final execution (succeeded, dead, skipped, cancelled) can be re-run."
    return {
        "offer_cancel": state in ACTIVE_STATES,
        "can_cancel": not cancel_why,
        "can_rerun": not rerun_why,
        "cancel_why": cancel_why,
        "rerun_why": rerun_why,
    }


@require_GET
@tenant_view(Role.VIEWER)
def execution_detail(
    request: HttpRequest, principal: Principal, execution_id: uuid.UUID
) -> HttpResponse:
    # Once its day was archived and dropped, the same page is read back from the
    # archive, saying so and where (dispatch/history/archive.py).
    try:
        record = selectors.execution_record(tenant=principal.tenant, execution_id=execution_id)
    except NotFound:
        raise Http404("execution not found") from None
    ctx = _detail_context(request, principal, record)
    if is_htmx(request) and request.headers.get("HX-Target") == "execution-live":
        return render(request, "console/execution_detail.html#live", ctx)
    return render(request, "console/execution_detail.html", ctx)


def _detail_context(
    request: HttpRequest, principal: Principal, record: selectors.ExecutionRecord
) -> dict[str, Any]:
    """Everything the execution page shows: its row, timeline, controls and log."""
    execution, events = record.execution, record.events
    if record.archived is None:
        controls = control_state(principal, execution)
    else:
        why = "Its day of history was archived: re-run that occurrence with a backfill."
        controls = {"can_cancel": False, "can_rerun": False, "cancel_why": why, "rerun_why": why}
        controls["offer_cancel"] = False
    if not controls["offer_cancel"]:
        # No Cancel on the page, so nothing to explain about it.
        controls["cancel_why"] = ""
    timeline = selectors.execution_timeline(execution=execution, events=events)
    return base_context(
        request,
        principal,
        execution=execution,
        archived=record.archived,
        schedule=execution.schedule,
        timeline=timeline,
        steps=charts.timeline_axis(timeline),
        axis=charts.AXIS,
        **(_live_log(execution) if record.archived is None else _archived_log(record)),
        zone=execution.schedule.timezone,
        **controls,
    )


def _live_log(execution: Execution) -> dict[str, Any]:
    """The current attempt's log, its last lines, and whether the page follows it (the
    execution is in flight: lines may still come)."""
    lines = selectors.attempt_log_tail(
        execution=execution, attempt=execution.attempt, n=LIVE_LOG_LINES
    )
    follow = _follow(execution)
    return {
        "live_log": lines,
        "log_attempt": execution.attempt,
        "log_cursor": lines[-1].cursor if lines else "",
        "log_shown": bool(lines) or follow["log_following"],
    } | follow


def _archived_log(record: selectors.ExecutionRecord) -> dict[str, Any]:
    """An archived execution's last attempt's log, as its archive kept it: its last lines."""
    attempt = record.execution.attempt
    page = selectors.archived_attempt_log(record=record, attempt=attempt, after=None, limit=None)
    lines = page.lines[-LIVE_LOG_LINES:]
    return {
        "live_log": lines,
        "log_attempt": attempt,
        "log_cursor": "",
        "log_shown": bool(lines),
        "log_following": False,
    }


@require_GET
@tenant_view(Role.VIEWER)
def execution_log_follow(
    request: HttpRequest, principal: Principal, execution_id: uuid.UUID
) -> HttpResponse:
    """The live log's next lines for the execution page (htmx, every LIVE_LOG_POLL_MS
    while it follows): appended after the page's last cursor, with the follower that
    asks again. A new attempt replaces the whole log region; an ended one stops it.
    When the execution's state is not the one the page shows, the page's state region
    (state, timeline, controls) comes along, so the page never says two things."""
    execution = _execution_or_404(principal, execution_id)
    after = request.GET.get("after") or None
    try:
        attempt = int(request.GET.get("attempt", ""))
    except ValueError:
        attempt = 0
    moved_on = request.GET.get("state") != execution.state
    if (after is not None and not logs.valid_cursor(after)) or attempt != execution.attempt:
        # Another attempt began (a retry, a re-run), or the page's own state is off:
        # the region starts again from the current attempt (with the state region).
        region = {"execution": execution} | _live_log(execution)
        if moved_on:
            region = _state_region(request, principal, execution) | region
        response = render(request, "console/execution_detail.html#livelog-restart", region)
        return reswap(retarget(response, "#live-log"), "outerHTML")
    try:
        page = selectors.attempt_log(
            execution=execution, attempt=attempt, after=after, limit=LIVE_LOG_STEP_LINES
        )
    except LiveLogUnavailable:
        page = selectors.LogPage([], 0, kept=False)  # Redis away: try again next time
    step: dict[str, Any] = {
        "execution": execution,
        "lines": page.lines,
        "log_attempt": attempt,
        "log_cursor": page.lines[-1].cursor if page.lines else (after or ""),
    } | _follow(execution)
    if moved_on:
        step = _state_region(request, principal, execution) | step
    return render(request, "console/execution_detail.html#livelog-step", step)


def _state_region(
    request: HttpRequest, principal: Principal, execution: Execution
) -> dict[str, Any]:
    """The page's state region (state, timeline, controls), to come out of band."""
    record = selectors.ExecutionRecord(
        execution, list(selectors.execution_events(execution=execution))
    )
    return _detail_context(request, principal, record) | {"live_oob": True}


def _done(request: HttpRequest, execution_id: uuid.UUID, message: str) -> HttpResponse:
    return done(
        request, reverse("console-execution", kwargs={"execution_id": execution_id}), message
    )


@require_http_methods(["GET", "POST"])
@tenant_view(Role.OPERATOR)
def execution_cancel(
    request: HttpRequest, principal: Principal, execution_id: uuid.UUID
) -> HttpResponse:
    """GET says what cancelling does to this execution now; POST cancels it."""
    execution = _execution_or_404(principal, execution_id)
    form = control_forms.CancelForm(request.POST if request.method == "POST" else None)
    status = 200
    if request.method == "POST":
        status = 400
        if form.is_valid():
            try:
                result = services.execution_cancel(
                    actor=principal,
                    execution_id=execution.id,
                    reason=form.cleaned_data.get("reason") or "",
                )
            except NotFound:
                raise Http404("execution not found") from None
            except DispatchError as exc:
                form.add_error(None, exc.message)
                status = exc.status
                execution = _execution_or_404(principal, execution_id)
            else:
                if not result.changed:
                    return _done(
                        request, execution.id, "It was already cancelled: nothing changed."
                    )
                return _done(request, execution.id, "Cancelled.")
    ctx = base_context(
        request,
        principal,
        execution=execution,
        schedule=execution.schedule,
        zone=execution.schedule.timezone,
        form=form,
        stop_s=stop_bound_s(),
        running=execution.state == ExecutionState.RUNNING,
        **control_state(principal, execution),
    )
    return render(request, "console/execution_cancel.html", ctx, status=status)


@require_http_methods(["GET", "POST"])
@tenant_view(Role.OPERATOR)
def execution_rerun(
    request: HttpRequest, principal: Principal, execution_id: uuid.UUID
) -> HttpResponse:
    """GET shows the re-run (attempt N+1, new token, same occurrence) with the
    schedule's payload to edit for this run only; POST re-runs it."""
    execution = _execution_or_404(principal, execution_id)
    form = control_forms.RerunForm(
        request.POST if request.method == "POST" else None, schedule=execution.schedule
    )
    status = 200
    if request.method == "POST":
        status = 400
        if form.is_valid():
            target = form.edited_target()
            try:
                services.execution_rerun(actor=principal, execution_id=execution.id, target=target)
            except NotFound:
                raise Http404("execution not found") from None
            except DispatchError as exc:
                control_forms.apply_error(form, exc, control_forms.rerun_field)
                status = exc.status
                execution = _execution_or_404(principal, execution_id)
            else:
                edited = " with the edited payload" if target is not None else ""
                return _done(
                    request, execution.id, f"Re-run as attempt {execution.attempt + 1}{edited}."
                )
    ctx = base_context(
        request,
        principal,
        execution=execution,
        schedule=execution.schedule,
        zone=execution.schedule.timezone,
        form=form,
        next_attempt=execution.attempt + 1,
        next_token=execution.fencing_token + 1,
        **control_state(principal, execution),
    )
    return render(request, "console/execution_rerun.html", ctx, status=status)


@require_POST
@tenant_view(Role.OPERATOR)
def execution_bulk(request: HttpRequest, principal: Principal) -> HttpResponse:
    """The runs page's bulk bar: a review first (what will happen, to how many),
    then `confirm` does it as a bulk operation (its page shows each result)."""
    form = control_forms.BulkExecutionsForm(request.POST, zone=viewer_zone(request))
    review = partial(
        bulk_review,
        request,
        principal,
        form,
        what="execution",
        action_url=reverse("console-executions-bulk"),
        back_url=next_url(request, reverse("console-runs")),
    )
    if not form.is_valid():
        return review(preview=None, status=400)
    d = form.cleaned_data
    targets = form.targets()
    try:
        if not d.get("confirm"):
            return review(preview=_bulk_preview(principal, d["action"], targets), status=200)
        outcome = services.bulk_executions(
            actor=principal, action=d["action"], reason=d.get("reason") or "", **targets
        )
    except DispatchError as exc:
        control_forms.apply_error(form, exc, control_forms.bulk_field)
        return review(preview=None, status=exc.status)
    if outcome.operation is None:
        return review(preview=outcome.preview, status=200)
    return redirect("console-operation", operation_id=outcome.operation.id)


def _bulk_preview(principal: Principal, action: str, targets: dict[str, Any]) -> dict[str, Any]:
    """What the review page says: how many runs, and what the action does to each
    (the bulk service has no dry run for executions; the count is the runs page's)."""
    verb = {"cancel": "cancelling", "rerun": "re-running"}[action]
    if "ids" in targets:
        total = len(targets["ids"])
        scope = "selected "
    else:
        flt = targets["filter"]
        counted = selectors.execution_count(
            tenant=principal.tenant,
            flt=selectors.execution_filter(
                state=flt.get("state"),
                schedule_id=flt.get("schedule_id"),
                trigger=flt.get("trigger"),
                since=flt.get("from"),
                until=flt.get("to"),
            ),
        )
        total = counted[0] if counted else 0
        scope = "" if not counted or not counted[1] else "at least "
    return {
        "total": total,
        "found": total,
        "text": f"{verb} {scope}{total} execution{'' if total == 1 else 's'}",
        "items": [],
        "notes": BULK_NOTES[action].format(stop_s=stop_bound_s()),
    }


BULK_NOTES = {
    "cancel": (
        "Each scheduled, queued, running or retrying one becomes cancelled (its token is "
        "bumped; a running call is stopped within ~{stop_s} s and may already have reached "
        "its target). Those already final are reported per item and left as they are."
    ),
    "rerun": (
        "Each final one runs again as its next attempt with a new fencing token and the same "
        "scheduled_for. Those not final yet are reported per item and left as they are."
    ),
}
