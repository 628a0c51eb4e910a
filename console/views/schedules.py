"""Schedule pages: the list, the form with its live preview, the detail page,
the actions (pause, resume, trigger, delete), the schedule picker, and run
control: the detail page's backfill (dry run, then confirm) and the list's
bulk bar (a review page, then the operation)."""

from __future__ import annotations

import re
import uuid
from datetime import datetime
from functools import partial
from typing import Any
from zoneinfo import ZoneInfo

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from console import control_forms
from console import forms as console_forms
from console.access import base_context, known_zone, tenant_view, viewer_zone
from console.views.common import done, is_htmx, next_url, schedule_or_404
from core.replicas import replica_reads
from dispatch import selectors, services
from dispatch.exceptions import DispatchError, InvalidSchedule
from dispatch.models import Backfill, Kind, Schedule
from dispatch.schedule_fields import clean_schedule
from dispatch.services import calendars as calendar_services
from dispatch.states import BackfillAction, ControlState
from dispatch.timing import cron
from tenants.roles import Principal, Role

PICK_TARGET = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,40}")


@require_GET
@replica_reads
@tenant_view(Role.VIEWER)
def schedule_list(request: HttpRequest, principal: Principal) -> HttpResponse:
    q = request.GET.get("q", "").strip()[:200]
    kind = request.GET.get("kind", "")
    status = request.GET.get("status", "")
    # "active": neither paused nor completed; "completed": reached its bound (paused or not).
    paused = {"paused": True, "active": False}.get(status)
    completed = {"completed": True, "active": False}.get(status)
    error = ""
    try:
        page = selectors.schedule_list(
            tenant=principal.tenant,
            cursor=request.GET.get("cursor") or None,
            limit=50,
            search=q,
            kind=kind if kind in Kind.values else "",
            paused=paused,
            completed=completed,
        )
    except InvalidSchedule as exc:
        error = exc.message
        page = selectors.Page(items=[], next_cursor=None)
    last = selectors.last_executions(
        tenant=principal.tenant, schedule_ids=[s.id for s in page.items], started=True
    )
    rows = [(s, last.get(s.id)) for s in page.items]
    ctx = base_context(
        request,
        principal,
        rows=rows,
        next_cursor=page.next_cursor,
        q=q,
        kind=kind,
        status=status,
        error=error,
        bulk_actions=[(a, BULK_VERBS[a]) for a in control_forms.BulkSchedulesForm.ACTIONS],
    )
    if is_htmx(request) and request.headers.get("HX-Target") == "schedule-rows":
        return render(request, "console/schedules.html#rows", ctx)
    return render(request, "console/schedules.html", ctx)


def _apply_errors(form: console_forms.ScheduleForm, exc: DispatchError) -> None:
    """Put a service error on the field it names; anything else above the form."""
    unplaced = False
    for key, messages in (exc.detail or {}).items():
        target = form.error_field(key)
        for message in messages:
            if target and target in form.fields:
                form.add_error(target, f"{console_forms.error_label(key)}: {message}")
            else:
                unplaced = True
    if unplaced or not exc.detail:
        form.add_error(None, exc.message)


@require_http_methods(["GET", "POST"])
@tenant_view(Role.OPERATOR)
def schedule_create(request: HttpRequest, principal: Principal) -> HttpResponse:
    form = console_forms.ScheduleForm(request.POST or None, tenant=principal.tenant)
    if request.method == "POST" and form.is_valid():
        try:
            schedule = services.schedule_create(
                actor=principal, data=form.to_service_data(), schedule_id=form.preview_seed_id()
            )
        except DispatchError as exc:
            _apply_errors(form, exc)
        else:
            return redirect("console-schedule", schedule_id=schedule.id)
    form.live(reverse("console-schedule-preview"))
    ctx = base_context(
        request,
        principal,
        form=form,
        schedule=None,
        zones=_zones(),
        preview_url=reverse("console-schedule-preview"),
    )
    status = 400 if request.method == "POST" else 200
    return render(request, "console/schedule_form.html", ctx, status=status)


@require_http_methods(["GET", "POST"])
@tenant_view(Role.OPERATOR)
def schedule_edit(
    request: HttpRequest, principal: Principal, schedule_id: uuid.UUID
) -> HttpResponse:
    schedule = schedule_or_404(principal, schedule_id)
    if request.method == "POST":
        form = console_forms.ScheduleForm(
            request.POST, tenant=principal.tenant, schedule_id=schedule.id
        )
        if form.is_valid() and form.cleaned_data.get("version") is None:
            # Like the API's 428: an edit must say which version it was made on.
            form.add_error(None, "version: missing; reload the page and edit again")
        if form.is_valid():
            try:
                services.schedule_update(
                    actor=principal,
                    schedule_id=schedule.id,
                    data=form.to_service_data(),
                    expected_version=form.cleaned_data.get("version"),
                )
            except DispatchError as exc:
                _apply_errors(form, exc)
            else:
                return redirect("console-schedule", schedule_id=schedule.id)
        status = 400
    else:
        form = console_forms.ScheduleForm(
            initial=console_forms.ScheduleForm.initial_from(schedule),
            tenant=principal.tenant,
            schedule_id=schedule.id,
        )
        status = 200
    preview_url = reverse("console-schedule-edit-preview", kwargs={"schedule_id": schedule.id})
    form.live(preview_url)
    ctx = base_context(
        request, principal, form=form, schedule=schedule, zones=_zones(), preview_url=preview_url
    )
    return render(request, "console/schedule_form.html", ctx, status=status)


def _zones() -> list[str]:
    from zoneinfo import available_timezones

    return sorted(available_timezones())


@require_POST
@tenant_view(Role.VIEWER)
def schedule_preview(
    request: HttpRequest, principal: Principal, schedule_id: uuid.UUID | None = None
) -> HttpResponse:
    """Live validation and preview of the form as typed (htmx POST; writes nothing)."""
    schedule = schedule_or_404(principal, schedule_id) if schedule_id else None
    form = console_forms.ScheduleForm(
        request.POST, tenant=principal.tenant, schedule_id=schedule.id if schedule else None
    )
    ctx: dict[str, Any] = {"schedule": schedule, "errors": [], "rows": []}
    # Only a seed this server issued (console/forms.py); an altered one is
    # reported by the form and previewed with a throwaway id.
    seed = (
        schedule.id
        if schedule
        else (console_forms.read_seed(request.POST.get("preview_seed", "")) or uuid.uuid4())
    )
    ctx["provisional_seed"] = schedule is None
    start, from_error = _preview_start(request.POST.get("preview_from", ""), request)
    ctx["start"] = start
    if not form.is_valid():
        ctx["errors"] = [str(e) for errs in form.errors.values() for e in errs]
    else:
        data = form.to_service_data()
        try:
            # The calendars as typed (not saved): the preview leaves their dates out.
            choice = calendar_services.clean_calendar_fields(principal, data, existing=schedule)
            spec = clean_schedule(
                tenant=principal.tenant, data=data, schedule_id=seed, existing=schedule
            )
        except InvalidSchedule as exc:
            ctx["errors"] = [
                f"{console_forms.error_label(k)}: {m}" for k, ms in exc.detail.items() for m in ms
            ] or [exc.message]
        else:
            if not from_error:
                ctx.update(
                    selectors.definition_preview(
                        spec.values,
                        seed=seed,
                        schedule=schedule,
                        now=services.db_now(),
                        dates=calendar_services.choice_filter(choice) if choice else None,
                        start=start,
                    )
                )
    # Named with the definition's own errors, all at once.
    ctx["errors"] += [from_error] if from_error else []
    ctx["viewer_tz"] = viewer_zone(request)
    return render(request, "console/schedule_form.html#preview", ctx)


PREVIEW_FROM_HELP = "a date (2027-03-28) or a date and time (2027-03-28T02:00)"


def _preview_start(raw: str, request: HttpRequest) -> tuple[datetime | None, str]:
    """The preview's "Preview from" (empty: now), read in the schedule's zone as typed
    (its table's first column; UTC while that zone is not valid): (start, error)."""
    text = raw.strip()[:64]
    if not text:
        return None, ""
    zone = known_zone(request.POST.get("timezone", "").strip()) or ZoneInfo("UTC")
    try:
        return console_forms.parse_local(text, zone), ""
    except ValueError as exc:
        try:
            datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            return None, f"Preview from: must be {PREVIEW_FROM_HELP}, not {text!r}"
        return None, f"Preview from: {exc}"  # a date, but out of range


@require_GET
@tenant_view(Role.VIEWER)
def schedule_detail(
    request: HttpRequest, principal: Principal, schedule_id: uuid.UUID
) -> HttpResponse:
    schedule = schedule_or_404(principal, schedule_id)
    now = services.db_now()
    text = (
        selectors.cron_text(schedule.cron, seed=schedule.id) if schedule.kind == Kind.CRON else None
    )
    ctx = base_context(
        request,
        principal,
        schedule=schedule,
        description=text.description if text else "once",
        resolved=text.resolved if text and text.resolved != schedule.cron else "",
        upcoming=selectors.schedule_next_runs(
            schedule=schedule, after=now, count=selectors.PREVIEW_COUNT
        ),
        history=selectors.schedule_history_rows(
            tenant=principal.tenant, schedule=schedule, now=now
        ),
        upstream=selectors.schedule_upstreams(schedule=schedule),
        downstream=selectors.schedule_dependents(tenant=principal.tenant, schedule=schedule),
        resume_plan=selectors.resume_plan(schedule, now, viewer_zone(request))
        if schedule.paused
        else "",
        pause_form=console_forms.PauseForm(),
        zone=schedule.timezone,
        backfill_form=_backfill_form(schedule),
        plan=None,
        backfills=backfill_rows(principal, schedule),
    )
    return render(request, "console/schedule_detail.html", ctx)


BACKFILLS_SHOWN = 10  # the schedule page lists its latest backfills (one count query each)


def backfill_rows(
    principal: Principal, schedule: Schedule
) -> list[tuple[Backfill, selectors.BackfillProgress, bool]]:
    """(backfill, progress, still live) of the schedule's latest backfills."""
    page = selectors.backfill_list(
        tenant=principal.tenant, schedule=schedule, limit=BACKFILLS_SHOWN
    )
    progress = selectors.backfill_list_progress(page.items)
    return [(b, progress[b.id], backfill_live(b, progress[b.id])) for b in page.items]


def backfill_live(backfill: Backfill, progress: selectors.BackfillProgress) -> bool:
    """Worth polling: it is still releasing occurrences, or runs it released are active."""
    return backfill.state == ControlState.RUNNING or progress.active > 0


def action_redirect(
    request: HttpRequest, schedule_id: uuid.UUID, message: str, *, anchor: str = ""
) -> HttpResponse:
    """Back to the schedule page, saying what was done (at `anchor`, a section's id)."""
    url = reverse("console-schedule", kwargs={"schedule_id": schedule_id})
    return done(request, f"{url}{anchor and '#' + anchor}", message)


def action_error(
    request: HttpRequest, principal: Principal, exc: DispatchError, status: int
) -> HttpResponse:
    ctx = base_context(request, principal, error=exc.message)
    return render(request, "console/action_error.html", ctx, status=status)


@require_POST
@tenant_view(Role.OPERATOR)
def schedule_pause(
    request: HttpRequest, principal: Principal, schedule_id: uuid.UUID
) -> HttpResponse:
    schedule = schedule_or_404(principal, schedule_id)
    form = console_forms.PauseForm(request.POST)
    if not form.is_valid():
        return action_error(request, principal, InvalidSchedule("reason: too long"), 400)
    until = None
    raw = form.cleaned_data.get("until") or ""
    try:
        if raw:
            until = console_forms.parse_local(raw, viewer_zone(request))
        services.schedule_pause(
            actor=principal,
            schedule_id=schedule.id,
            reason=form.cleaned_data.get("reason") or "",
            until=until,
        )
    except ValueError:
        return action_error(
            request, principal, InvalidSchedule("until: is not a date and time"), 400
        )
    except DispatchError as exc:
        return action_error(request, principal, exc, exc.status)
    return action_redirect(request, schedule.id, "Pause changed." if schedule.paused else "Paused.")


@require_POST
@tenant_view(Role.OPERATOR)
def schedule_resume(
    request: HttpRequest, principal: Principal, schedule_id: uuid.UUID
) -> HttpResponse:
    schedule = schedule_or_404(principal, schedule_id)
    plan = (
        selectors.resume_plan(schedule, services.db_now(), viewer_zone(request))
        if schedule.paused
        else ""
    )
    try:
        services.schedule_resume(actor=principal, schedule_id=schedule.id)
    except DispatchError as exc:
        return action_error(request, principal, exc, exc.status)
    if not schedule.paused:
        # Resume is idempotent (a double click, a stale page): nothing was changed.
        return action_redirect(request, schedule.id, "It was not paused: nothing changed.")
    return action_redirect(request, schedule.id, f"Resumed. {plan}".strip())


@require_POST
@tenant_view(Role.OPERATOR)
def schedule_trigger(
    request: HttpRequest, principal: Principal, schedule_id: uuid.UUID
) -> HttpResponse:
    schedule = schedule_or_404(principal, schedule_id)
    try:
        execution = services.schedule_trigger(actor=principal, schedule_id=schedule.id)
    except DispatchError as exc:
        return action_error(request, principal, exc, exc.status)
    return redirect("console-execution", execution_id=execution.id)


@require_http_methods(["GET", "POST"])
@tenant_view(Role.OPERATOR)
def schedule_delete(
    request: HttpRequest, principal: Principal, schedule_id: uuid.UUID
) -> HttpResponse:
    schedule = schedule_or_404(principal, schedule_id)
    if request.method == "POST":
        try:
            services.schedule_delete(actor=principal, schedule_id=schedule.id)
        except DispatchError as exc:
            return action_error(request, principal, exc, exc.status)
        return redirect("console-schedules")
    ctx = base_context(request, principal, schedule=schedule)
    return render(request, "console/schedule_delete.html", ctx)


@require_GET
@tenant_view(Role.VIEWER)
def schedule_pick(request: HttpRequest, principal: Principal) -> HttpResponse:
    """Search results for a schedule picker (htmx fragment): tenant-scoped, bounded.

    `target` names the text field a result fills (`mode=add` appends a line to a
    list of names, otherwise it replaces the value); `exclude` leaves one
    schedule out (a schedule cannot depend on itself)."""
    q = (request.GET.get("q") or request.GET.get("schedule") or "").strip()[:200]
    target = request.GET.get("target", "")
    if not PICK_TARGET.fullmatch(target):
        target = ""
    exclude = selectors.as_uuid(request.GET.get("exclude") or "")
    rows, more = selectors.schedule_search(tenant=principal.tenant, q=q, exclude=exclude)
    ctx = {
        "rows": rows,
        "more": more,
        "q": q,
        "target": target,
        "mode": "add" if request.GET.get("mode") == "add" else "set",
        "results_id": f"{target}-results" if target else "pick-results",
    }
    return render(request, "console/schedule_pick.html", ctx)


# --- run control: backfill and bulk actions ---------------------------------------------

BULK_VERBS = {
    "pause": "Pause",
    "resume": "Resume",
    "trigger": "Trigger",
    "delete": "Delete",
    "cancel": "Cancel",
    "rerun": "Re-run",
}
REVIEW_ITEMS = 200  # the review page lists this many items by name; the counts cover all


def bulk_review(
    request: HttpRequest,
    principal: Principal,
    form: control_forms.BulkForm,
    *,
    what: str,
    action_url: str,
    back_url: str,
    preview: dict[str, Any] | None,
    status: int,
) -> HttpResponse:
    """The page between a bulk bar and its confirm button: what the action would do
    (the service's dry run), or the error naming what is wrong with the request."""
    action = str(form.cleaned_data.get("action") or form.data.get("action") or "")
    items = list((preview or {}).get("items") or [])
    ctx = base_context(
        request,
        principal,
        form=form,
        what=what,
        verb=BULK_VERBS.get(action, action),
        action=action,
        preview=preview,
        count=int((preview or {}).get("found", (preview or {}).get("total", 0)) or 0),
        items=items[:REVIEW_ITEMS],
        items_hidden=max(0, len(items) - REVIEW_ITEMS),
        carried=form.carried(),
        action_url=action_url,
        back_url=back_url,
        filtered=form.cleaned_data.get("scope") == "filter",
        errors=control_forms.named_errors(form),
    )
    return render(request, "console/bulk_review.html", ctx, status=status)


@require_POST
@tenant_view(Role.OPERATOR)
def schedule_bulk(request: HttpRequest, principal: Principal) -> HttpResponse:
    """The schedule list's bulk bar: first a review (dry run), then `confirm` does it."""
    form = control_forms.BulkSchedulesForm(request.POST, zone=viewer_zone(request))
    review = partial(
        bulk_review,
        request,
        principal,
        form,
        what="schedule",
        action_url=reverse("console-schedules-bulk"),
        back_url=next_url(request, reverse("console-schedules")),
    )
    if not form.is_valid():
        return review(preview=None, status=400)
    d = form.cleaned_data
    kwargs: dict[str, Any] = {
        "actor": principal,
        "action": d["action"],
        "reason": d.get("reason") or "",
        "until": d.get("until"),
        **form.targets(),
    }
    try:
        if not d.get("confirm"):
            outcome = services.bulk_schedules(**kwargs, dry_run=True, zone=viewer_zone(request))
            return review(preview=outcome.preview, status=200)
        outcome = services.bulk_schedules(**kwargs)
    except DispatchError as exc:
        control_forms.apply_error(form, exc, control_forms.bulk_field)
        return review(preview=None, status=exc.status)
    if outcome.operation is None:  # a run always records an operation; a preview shows
        return review(preview=outcome.preview, status=200)
    return redirect("console-operation", operation_id=outcome.operation.id)


PLAN_ROWS = 1000  # the dry run's table lists this many occurrences; its counts cover all


def _backfill_form(schedule: Schedule, data: Any = None) -> control_forms.BackfillForm:
    return control_forms.BackfillForm(data, zone=cron.get_zone(schedule.timezone))


def _plan_context(plan: selectors.BackfillPlan, form: control_forms.BackfillForm) -> dict[str, Any]:
    items = plan.items
    return {
        "total": len(items),
        "counts": [(action, n) for action, n in plan.counts.items() if n],
        "spans": _spans(items),
        "rows": [
            {
                "scheduled_for": item.scheduled_for,
                "action": str(item.action),
                "meaning": BackfillAction(item.action).label,
            }
            for item in items[:PLAN_ROWS]
        ],
        "hidden": max(0, len(items) - PLAN_ROWS),
        "runs": _runs(plan),
        "params": form.carried(),
    }


def _spans(items: list[Any]) -> list[dict[str, Any]]:
    """The plan as runs of one action in a row: "1-96 create, from ... to ..." — what a
    reader checks before confirming; the table below lists every occurrence."""
    spans: list[dict[str, Any]] = []
    for n, item in enumerate(items, start=1):
        action = str(item.action)
        if spans and spans[-1]["action"] == action:
            spans[-1].update(last=n, to=item.scheduled_for, count=spans[-1]["count"] + 1)
            continue
        spans.append(
            {
                "action": action,
                "meaning": BackfillAction(item.action).label,
                "first": n,
                "last": n,
                "since": item.scheduled_for,
                "to": item.scheduled_for,
                "count": 1,
            }
        )
    return spans


def _runs(plan: selectors.BackfillPlan) -> int:
    """The occurrences a backfill of this plan runs: the ones it creates or re-runs."""
    return plan.counts.get(BackfillAction.CREATE, 0) + plan.counts.get(BackfillAction.RERUN, 0)


@require_POST
@tenant_view(Role.OPERATOR)
def schedule_backfill(
    request: HttpRequest, principal: Principal, schedule_id: uuid.UUID
) -> HttpResponse:
    """The backfill form's dry run (the table of occurrences and what happens to
    each, then the confirm button); with `confirm`, the backfill itself."""
    schedule = schedule_or_404(principal, schedule_id)
    form = _backfill_form(schedule, request.POST)
    plan: dict[str, Any] | None = None
    status = 400
    if form.is_valid():
        confirm = bool(form.cleaned_data.get("confirm"))
        try:
            result = services.backfill_create(
                actor=principal,
                schedule_id=schedule.id,
                dry_run=not confirm,
                **form.service_params(),
            )
        except DispatchError as exc:
            control_forms.apply_error(form, exc, control_forms.backfill_field)
            status = exc.status
        else:
            if result.backfill is not None:
                message = f"Backfill started: {_runs(result.plan)} to run."
                return action_redirect(request, schedule.id, message, anchor="backfills")
            plan, status = _plan_context(result.plan, form), 200
    ctx = base_context(
        request, principal, schedule=schedule, backfill_form=form, plan=plan, zone=schedule.timezone
    )
    if is_htmx(request):
        # htmx swaps only 2xx answers: the errors come back in the section, as a 200.
        return render(request, "console/schedule_backfill.html#section", ctx)
    return render(request, "console/schedule_backfill.html", ctx, status=status)
