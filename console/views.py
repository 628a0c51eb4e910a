"""Console views: function views, tenant-scoped through the user's principal.

Reads go through selectors, writes through the services (which audit); every
view names the least role it needs (console/access.py). Another tenant's
object is a 404, like a missing one. No GET changes state.
"""

from __future__ import annotations

import base64
import re
import secrets
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from django.conf import settings
from django.contrib.auth.models import User
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from console import forms as console_forms
from console.access import (
    SESSION_TENANT,
    SESSION_TZ,
    base_context,
    principal_for,
    staff_view,
    tenant_view,
    viewer_zone,
)
from dispatch import explain, selectors, services
from dispatch.exceptions import DispatchError, InvalidSchedule, NotFound
from dispatch.models import Execution, Kind, Schedule
from dispatch.schedule_fields import clean_schedule
from dispatch.timing import cron
from tenants import selectors as tenant_selectors
from tenants import services as tenant_services
from tenants.exceptions import TenantsError
from tenants.roles import Principal, Role

PREVIEW_COUNT = 10
PICK_TARGET = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,40}")
HISTORY_LIMIT = 50
QUEUE_NAMES = [f"{p}.{d}" for p in ("high", "default", "low") for d in ("short", "long")]


def _is_htmx(request: HttpRequest) -> bool:
    return bool(getattr(request, "htmx", False))


def _schedule_or_404(principal: Principal, schedule_id: uuid.UUID | str) -> Schedule:
    try:
        return selectors.schedule_get(tenant=principal.tenant, schedule_id=schedule_id)
    except NotFound:
        raise Http404("schedule not found") from None


def _next(request: HttpRequest, default: str) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return default


# --------------------------------------------------------------------------- session


@require_POST
def tenant_switch(request: HttpRequest) -> HttpResponse:
    if not request.user.is_authenticated:
        return redirect(settings.LOGIN_URL)
    slug = request.POST.get("tenant", "")
    principal = tenant_selectors.user_principal(user=request.user, tenant_slug=slug)
    if principal is None or principal.tenant.slug != slug:
        raise Http404("no such tenant")
    request.session[SESSION_TENANT] = slug
    return redirect("console-home")


@require_POST
def set_timezone(request: HttpRequest) -> HttpResponse:
    if not request.user.is_authenticated:
        return redirect(settings.LOGIN_URL)
    name = request.POST.get("tz", "").strip()
    if not name:
        request.session.pop(SESSION_TZ, None)
    else:
        try:
            cron.get_zone(name)
        except cron.CronError:
            return HttpResponse("unknown time zone", status=400, content_type="text/plain")
        request.session[SESSION_TZ] = name
    return redirect(_next(request, reverse("console-home")))


# --------------------------------------------------------------------------- dashboard


def _dashboard_context(principal: Principal) -> dict[str, Any]:
    now = services.db_now()
    day_start = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    usage = selectors.tenant_usage(tenant=principal.tenant, day_start=day_start)
    total, capped = selectors.upcoming_count(
        tenant=principal.tenant, now=now, horizon=timedelta(hours=1)
    )
    return {
        "now": now,
        "upcoming": selectors.upcoming_fires(
            tenant=principal.tenant, now=now, horizon=timedelta(hours=1)
        ),
        "upcoming_total": total,
        "upcoming_capped": capped,
        "running": selectors.executions_running(tenant=principal.tenant),
        "troubled": selectors.executions_troubled(
            tenant=principal.tenant, since=now - timedelta(days=1)
        ),
        "usage": usage,
    }


@require_GET
@tenant_view(Role.VIEWER)
def home(request: HttpRequest, principal: Principal) -> HttpResponse:
    ctx = base_context(request, principal, **_dashboard_context(principal))
    return render(request, "console/dashboard.html", ctx)


@require_GET
@tenant_view(Role.VIEWER)
def dashboard_live(request: HttpRequest, principal: Principal) -> HttpResponse:
    ctx = base_context(request, principal, **_dashboard_context(principal))
    return render(request, "console/dashboard.html#live", ctx)


UPCOMING_PAGE = 200


@require_GET
@tenant_view(Role.VIEWER)
def upcoming(request: HttpRequest, principal: Principal) -> HttpResponse:
    """Every fire due in the next hour (the dashboard shows the first 50), by pages."""
    try:
        page = max(1, int(request.GET.get("page", "1")))
    except ValueError:
        page = 1
    page = min(page, selectors.UPCOMING_COUNT_CAP // UPCOMING_PAGE)
    now = services.db_now()
    horizon = timedelta(hours=1)
    rows = selectors.upcoming_fires(
        tenant=principal.tenant, now=now, horizon=horizon, limit=page * UPCOMING_PAGE
    )
    total, capped = selectors.upcoming_count(tenant=principal.tenant, now=now, horizon=horizon)
    start = (page - 1) * UPCOMING_PAGE
    shown = rows[start:]
    ctx = base_context(
        request,
        principal,
        now=now,
        rows=shown,
        first=start + 1,
        last=start + len(shown),
        total=total,
        capped=capped,
        page=page,
        prev_page=page - 1 if page > 1 else None,
        next_page=page + 1 if start + len(shown) < total else None,
    )
    return render(request, "console/upcoming.html", ctx)


# --------------------------------------------------------------------------- schedules


@require_GET
@tenant_view(Role.VIEWER)
def schedule_list(request: HttpRequest, principal: Principal) -> HttpResponse:
    q = request.GET.get("q", "").strip()[:200]
    kind = request.GET.get("kind", "")
    status = request.GET.get("status", "")
    paused = {"paused": True, "active": False}.get(status)
    error = ""
    try:
        page = selectors.schedule_list(
            tenant=principal.tenant,
            cursor=request.GET.get("cursor") or None,
            limit=50,
            search=q,
            kind=kind if kind in Kind.values else "",
            paused=paused,
        )
    except InvalidSchedule as exc:
        error = exc.message
        page = selectors.Page(items=[], next_cursor=None)
    last = selectors.last_executions(
        tenant=principal.tenant, schedule_ids=[s.id for s in page.items]
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
    )
    if _is_htmx(request) and request.headers.get("HX-Target") == "schedule-rows":
        return render(request, "console/schedules.html#rows", ctx)
    return render(request, "console/schedules.html", ctx)


def _apply_errors(form: console_forms.ScheduleForm, exc: DispatchError) -> None:
    """Put a service error on the field it names; anything else above the form."""
    unplaced = False
    for key, messages in (exc.detail or {}).items():
        target = console_forms.field_for_error(key)
        for message in messages:
            if target and target in form.fields:
                form.add_error(target, f"{key}: {message}")
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
    schedule = _schedule_or_404(principal, schedule_id)
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


@dataclass
class PreviewRow:
    scheduled_for: datetime
    due_at: datetime
    note: str | None
    change: str = ""  # "", "added", "removed"


def _preview_rows(occurrences: list[cron.Occurrence]) -> list[PreviewRow]:
    return [PreviewRow(o.scheduled_for, o.due_at, o.note) for o in occurrences]


@require_POST
@tenant_view(Role.VIEWER)
def schedule_preview(
    request: HttpRequest, principal: Principal, schedule_id: uuid.UUID | None = None
) -> HttpResponse:
    """Live validation and preview of the form as typed (htmx POST; writes nothing)."""
    schedule = _schedule_or_404(principal, schedule_id) if schedule_id else None
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
    if not form.is_valid():
        ctx["errors"] = [str(e) for errs in form.errors.values() for e in errs]
    else:
        data = form.to_service_data()
        try:
            spec = clean_schedule(
                tenant=principal.tenant, data=data, schedule_id=seed, existing=schedule
            )
        except InvalidSchedule as exc:
            ctx["errors"] = [f"{k}: {m}" for k, ms in exc.detail.items() for m in ms] or [
                exc.message
            ]
        else:
            ctx.update(_preview_for(spec.values, seed=seed, schedule=schedule))
    ctx["viewer_tz"] = viewer_zone(request)
    return render(request, "console/schedule_form.html#preview", ctx)


def _preview_for(
    values: dict[str, Any], *, seed: uuid.UUID, schedule: Schedule | None
) -> dict[str, Any]:
    now = services.db_now()
    tz = values["timezone"]
    out: dict[str, Any] = {"zone": tz}
    if values["kind"] == Kind.CRON:
        expr = values["cron"]
        out["description"] = cron.describe(expr, seed=str(seed))
        resolved = cron.resolve(expr, seed=str(seed))
        out["resolved"] = resolved if resolved != expr else ""
        out["hashed"] = "h" in expr.lower().replace("@hourly", "")
        occurrences = cron.preview(
            expr, tz, seed=str(seed), after=now, count=PREVIEW_COUNT, jitter_s=values["jitter_s"]
        )
    else:
        run_at: datetime = values["run_at"]
        out["description"] = "once"
        out["resolved"] = ""
        out["hashed"] = False
        occurrences = (
            [cron.Occurrence(run_at, run_at.astimezone(cron.get_zone(tz)), run_at, None)]
            if run_at > now
            else []
        )
        if run_at <= now:
            out["past_once"] = run_at
    rows = _preview_rows(occurrences)
    if schedule is not None:
        before = {
            o.scheduled_for
            for o in selectors.schedule_preview(schedule=schedule, after=now, count=PREVIEW_COUNT)
        }
        after = {r.scheduled_for for r in rows}
        if before != after:
            horizon = max(after) if after else None
            for r in rows:
                if r.scheduled_for not in before:
                    r.change = "added"
            for instant in sorted(before - after):
                if horizon is None or instant <= horizon:
                    rows.append(PreviewRow(instant, instant, None, "removed"))
            rows.sort(key=lambda r: r.scheduled_for)
            out["changed"] = True
    out["rows"] = rows
    return out


def _resume_plan(schedule: Schedule, now: datetime) -> str:
    """What resuming now would do, by the schedule's misfire policy."""
    if schedule.next_run_at is None:
        return "Resuming now runs nothing by itself: the schedule has no next run."
    if schedule.next_run_at > now:
        return (
            "Nothing was missed while paused: resuming now keeps the next run "
            f"at {schedule.next_run_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC."
        )
    if schedule.kind == Kind.ONCE:
        # The beat's rule (fire_due_one_offs): due at run_at, or at creation if that was later.
        fell_due = max(schedule.next_run_at, schedule.created_at or schedule.next_run_at)
        late = (now - fell_due).total_seconds()
        if late > schedule.misfire_grace_s and schedule.misfire == "skip":
            return (
                "The one-off time has passed while paused, beyond its "
                f"{schedule.misfire_grace_s} s grace: resuming now records it as skipped "
                "(misfire policy: skip)."
            )
        return "The one-off time has passed while paused: resuming now runs it once, now."
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
    )
    run = len(plan.fire)
    return (
        f"Resuming now will run {run} occurrence{'s' if run != 1 else ''} and skip "
        f"{plan.skipped_total} (misfire policy: {schedule.misfire}, grace "
        f"{schedule.misfire_grace_s} s)."
    )


@dataclass
class HistoryRow:
    execution: Execution | None
    scheduled_for: datetime


def _history(schedule: Schedule, executions: list[Execution], now: datetime) -> list[HistoryRow]:
    """Executions merged with the occurrences that have no record (gaps to explain)."""
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
        )
    except cron.CronError:
        return rows
    recorded = {e.scheduled_for for e in executions}
    gaps = [HistoryRow(None, o) for o in expected if o not in recorded][-HISTORY_LIMIT:]
    merged = sorted(rows + gaps, key=lambda r: r.scheduled_for, reverse=True)
    return merged[:HISTORY_LIMIT]


@require_GET
@tenant_view(Role.VIEWER)
def schedule_detail(
    request: HttpRequest, principal: Principal, schedule_id: uuid.UUID
) -> HttpResponse:
    schedule = _schedule_or_404(principal, schedule_id)
    now = services.db_now()
    executions = selectors.schedule_history(
        tenant=principal.tenant, schedule=schedule, limit=HISTORY_LIMIT
    )
    description = (
        cron.describe(schedule.cron, seed=str(schedule.id))
        if schedule.kind == Kind.CRON
        else "once"
    )
    resolved = cron.resolve(schedule.cron, seed=str(schedule.id)) if schedule.cron else ""
    ctx = base_context(
        request,
        principal,
        schedule=schedule,
        description=description,
        resolved=resolved if resolved != schedule.cron else "",
        upcoming=selectors.schedule_next_runs(schedule=schedule, after=now, count=PREVIEW_COUNT),
        history=_history(schedule, executions, now),
        upstream=list(schedule.depends_on.filter(deleted_at__isnull=True).order_by("name")),
        downstream=selectors.schedule_dependents(tenant=principal.tenant, schedule=schedule),
        resume_plan=_resume_plan(schedule, now) if schedule.paused else "",
        pause_form=console_forms.PauseForm(),
        zone=schedule.timezone,
        message=request.GET.get("done", "")[:200],
    )
    return render(request, "console/schedule_detail.html", ctx)


def _action_redirect(schedule_id: uuid.UUID, message: str) -> HttpResponse:
    from urllib.parse import urlencode

    url = reverse("console-schedule", kwargs={"schedule_id": schedule_id})
    return HttpResponseRedirect(f"{url}?{urlencode({'done': message})}")


def _action_error(
    request: HttpRequest, principal: Principal, exc: DispatchError, status: int
) -> HttpResponse:
    ctx = base_context(request, principal, error=exc.message)
    return render(request, "console/action_error.html", ctx, status=status)


@require_POST
@tenant_view(Role.OPERATOR)
def schedule_pause(
    request: HttpRequest, principal: Principal, schedule_id: uuid.UUID
) -> HttpResponse:
    schedule = _schedule_or_404(principal, schedule_id)
    form = console_forms.PauseForm(request.POST)
    if not form.is_valid():
        return _action_error(request, principal, InvalidSchedule("reason: too long"), 400)
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
        return _action_error(
            request, principal, InvalidSchedule("until: is not a date and time"), 400
        )
    except DispatchError as exc:
        return _action_error(request, principal, exc, exc.status)
    return _action_redirect(schedule.id, "Pause changed." if schedule.paused else "Paused.")


@require_POST
@tenant_view(Role.OPERATOR)
def schedule_resume(
    request: HttpRequest, principal: Principal, schedule_id: uuid.UUID
) -> HttpResponse:
    schedule = _schedule_or_404(principal, schedule_id)
    plan = _resume_plan(schedule, services.db_now()) if schedule.paused else ""
    try:
        services.schedule_resume(actor=principal, schedule_id=schedule.id)
    except DispatchError as exc:
        return _action_error(request, principal, exc, exc.status)
    if not schedule.paused:
        # Resume is idempotent (a double click, a stale page): nothing was changed.
        return _action_redirect(schedule.id, "It was not paused: nothing changed.")
    return _action_redirect(schedule.id, f"Resumed. {plan}".strip())


@require_POST
@tenant_view(Role.OPERATOR)
def schedule_trigger(
    request: HttpRequest, principal: Principal, schedule_id: uuid.UUID
) -> HttpResponse:
    schedule = _schedule_or_404(principal, schedule_id)
    try:
        execution = services.schedule_trigger(actor=principal, schedule_id=schedule.id)
    except DispatchError as exc:
        return _action_error(request, principal, exc, exc.status)
    return redirect("console-execution", execution_id=execution.id)


@require_http_methods(["GET", "POST"])
@tenant_view(Role.OPERATOR)
def schedule_delete(
    request: HttpRequest, principal: Principal, schedule_id: uuid.UUID
) -> HttpResponse:
    schedule = _schedule_or_404(principal, schedule_id)
    if request.method == "POST":
        try:
            services.schedule_delete(actor=principal, schedule_id=schedule.id)
        except DispatchError as exc:
            return _action_error(request, principal, exc, exc.status)
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


# --------------------------------------------------------------------------- executions


@require_GET
@tenant_view(Role.VIEWER)
def execution_detail(
    request: HttpRequest, principal: Principal, execution_id: uuid.UUID
) -> HttpResponse:
    try:
        execution = selectors.execution_get(tenant=principal.tenant, execution_id=execution_id)
    except NotFound:
        raise Http404("execution not found") from None
    events = list(selectors.execution_events(execution=execution))
    ctx = base_context(
        request,
        principal,
        execution=execution,
        schedule=execution.schedule,
        timeline=selectors.execution_timeline(execution=execution, events=events),
        zone=execution.schedule.timezone,
    )
    if _is_htmx(request) and request.headers.get("HX-Target") == "execution-live":
        return render(request, "console/execution_detail.html#live", ctx)
    return render(request, "console/execution_detail.html", ctx)


# --------------------------------------------------------------------------- explainer


@require_GET
@tenant_view(Role.VIEWER)
def explain_page(request: HttpRequest, principal: Principal) -> HttpResponse:
    sid = request.GET.get("schedule", "").strip()[:200]
    at_raw = request.GET.get("at", "").strip()
    at_utc = request.GET.get("at_utc", "").strip()
    answer: explain.Explanation | None = None
    error = ""
    schedule: Schedule | None = None
    if sid:
        # A name or an id (the picker is a text field): any of the tenant's
        # schedules, not only the first few hundred a dropdown could list.
        schedule = selectors.schedule_resolve(
            tenant=principal.tenant, ref=sid, include_deleted=True
        )
        if schedule is None:
            if selectors.as_uuid(sid) is not None:
                # Another tenant's id is indistinguishable from a missing one.
                raise Http404("schedule not found")
            error = f"schedule: no schedule with the name {sid!r}"
        elif schedule.deleted_at is None:
            sid = schedule.name
    if schedule is not None and (at_raw or at_utc):
        zone = cron.get_zone(schedule.timezone)
        try:
            if at_utc:
                at = console_forms.parse_local(at_utc, ZoneInfo("UTC"))
            else:
                at = console_forms.parse_local(at_raw, zone)
            answer = explain.explain(schedule=schedule, at=at, now=services.db_now())
            if not at_raw:
                at_raw = at.astimezone(zone).replace(tzinfo=None).isoformat(timespec="minutes")
        except (ValueError, OverflowError, cron.CronError) as exc:
            error = f"at: is not a date and time ({exc})"
    evidence = []
    if answer is not None:
        for e in answer.evidence:
            url = None
            if e.kind == "execution":
                url = reverse("console-execution", kwargs={"execution_id": e.id})
            elif e.kind == "schedule" and schedule is not None and schedule.deleted_at is None:
                url = reverse("console-schedule", kwargs={"schedule_id": e.id})
            evidence.append({"kind": e.kind, "id": e.id, "label": e.label, "url": url})
    ctx = base_context(
        request,
        principal,
        schedule=schedule,
        sid=sid,
        at_value=at_raw,
        answer=answer,
        evidence=evidence,
        error=error,
        zone=schedule.timezone if schedule else "UTC",
    )
    return render(request, "console/explain.html", ctx, status=400 if error else 200)


# --------------------------------------------------------------------------- tokens, members


# A new token's secret is shown once, on the GET after the POST (so a reload
# cannot create a second token). It is never kept in clear on the server: the
# session (a database row) holds it XOR a one-time pad, the pad rides in a
# short-lived HttpOnly cookie for this page only, and both go on first display.
NEW_TOKEN_SESSION = "console_new_token"  # noqa: S105 - a key name
NEW_TOKEN_COOKIE = "console_new_token_pad"  # noqa: S105 - a cookie name
NEW_TOKEN_TTL_S = 300


def _xor(data: bytes, pad: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(data, pad, strict=True))


def _keep_new_secret(request: HttpRequest, response: HttpResponse, token: Any, raw: str) -> None:
    secret = raw.encode()
    pad = secrets.token_bytes(len(secret))
    request.session[NEW_TOKEN_SESSION] = {
        "id": token.pk,
        "name": token.name,
        "masked": base64.b64encode(_xor(secret, pad)).decode(),
    }
    response.set_cookie(
        NEW_TOKEN_COOKIE,
        base64.urlsafe_b64encode(pad).decode(),
        max_age=NEW_TOKEN_TTL_S,
        path=reverse("console-tokens"),
        secure=request.is_secure(),
        httponly=True,
        samesite="Strict",
    )


def _pop_new_secret(request: HttpRequest) -> tuple[str, str]:
    """(name, secret) of the token created just before, once; else ("", "")."""
    kept = request.session.pop(NEW_TOKEN_SESSION, None)
    pad = request.COOKIES.get(NEW_TOKEN_COOKIE, "")
    if not kept or not pad:
        return "", ""
    try:
        masked = base64.b64decode(kept["masked"])
        return str(kept["name"]), _xor(masked, base64.urlsafe_b64decode(pad)).decode()
    except (ValueError, KeyError, TypeError):
        return "", ""


@require_http_methods(["GET", "POST"])
@tenant_view(Role.ADMIN)
def tokens(request: HttpRequest, principal: Principal) -> HttpResponse:
    form = console_forms.TokenForm(request.POST or None)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            raw = form.cleaned_data.get("expires_at") or ""
            try:
                expires = console_forms.parse_local(raw, viewer_zone(request)) if raw else None
                created, secret = tenant_services.token_issue(
                    tenant=principal.tenant,
                    name=form.cleaned_data["name"],
                    role=Role.parse(form.cleaned_data["role"]),
                    expires_at=expires,
                    actor=principal,
                )
            except ValueError as exc:
                form.add_error("expires_at", f"expires_at: is not a date and time in range ({exc})")
            except TenantsError as exc:
                for key, messages in exc.detail.items():
                    for m in messages:
                        form.add_error(key if key in form.fields else None, f"{key}: {m}")
            else:
                # POST-redirect-GET: reloading the page shows it, never makes another token.
                done = redirect("console-tokens")
                _keep_new_secret(request, done, created, secret)
                return done
        status = 400
    created_name, secret = ("", "") if request.method == "POST" else _pop_new_secret(request)
    ctx = base_context(
        request,
        principal,
        form=form,
        secret=secret,
        created_name=created_name,
        tokens=list(tenant_selectors.token_list(tenant=principal.tenant)),
        now=services.db_now(),
    )
    response = render(request, "console/tokens.html", ctx, status=status)
    # The secret is shown once: keep it out of caches and the back button.
    response["Cache-Control"] = "no-store"
    if NEW_TOKEN_COOKIE in request.COOKIES:
        response.delete_cookie(NEW_TOKEN_COOKIE, path=reverse("console-tokens"))
    return response


@require_http_methods(["GET", "POST"])
@tenant_view(Role.ADMIN)
def token_revoke(request: HttpRequest, principal: Principal, token_id: int) -> HttpResponse:
    """GET asks to confirm (works without JavaScript); POST revokes."""
    token = tenant_selectors.token_get(tenant=principal.tenant, token_id=token_id)
    if token is None:
        raise Http404("token not found")
    if request.method == "GET":
        return render(
            request, "console/token_revoke.html", base_context(request, principal, token=token)
        )
    try:
        tenant_services.token_revoke(tenant=principal.tenant, token_id=token_id, actor=principal)
    except TenantsError:
        raise Http404("token not found") from None
    return redirect("console-tokens")


@require_http_methods(["GET", "POST"])
@tenant_view(Role.ADMIN)
def members(request: HttpRequest, principal: Principal) -> HttpResponse:
    form = console_forms.MemberAddForm(request.POST or None)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            # Only platform staff add accounts (tenants/services.py); one answer otherwise.
            try:
                tenant_services.membership_attach(
                    tenant=principal.tenant,
                    username=form.cleaned_data["username"],
                    role=Role.parse(form.cleaned_data["role"]),
                    actor=principal,
                    by_staff=request.user.is_staff,
                )
            except TenantsError as exc:
                form.add_error("username", f"username: {exc.message}")
            else:
                return redirect("console-members")
        status = 400
    ctx = base_context(
        request,
        principal,
        form=form,
        memberships=tenant_selectors.membership_list(tenant=principal.tenant),
        roles=[r.label for r in Role],
    )
    return render(request, "console/members.html", ctx, status=status)


def _member_or_404(principal: Principal, user_id: int) -> User:
    membership = tenant_selectors.membership_get(tenant=principal.tenant, user_id=user_id)
    if membership is None:
        raise Http404("member not found")
    return membership.user


@require_POST
@tenant_view(Role.ADMIN)
def member_role(request: HttpRequest, principal: Principal, user_id: int) -> HttpResponse:
    user = _member_or_404(principal, user_id)
    form = console_forms.MemberRoleForm(request.POST)
    if not form.is_valid():
        return HttpResponse("role: must be viewer, operator or admin", status=400)
    if str(user.pk) == principal.actor_id:
        return HttpResponse("you cannot change your own role", status=400)
    tenant_services.membership_set(
        tenant=principal.tenant,
        user=user,
        role=Role.parse(form.cleaned_data["role"]),
        actor=principal,
    )
    return redirect("console-members")


@require_http_methods(["GET", "POST"])
@tenant_view(Role.ADMIN)
def member_remove(request: HttpRequest, principal: Principal, user_id: int) -> HttpResponse:
    """GET asks to confirm (works without JavaScript); POST removes."""
    user = _member_or_404(principal, user_id)
    if str(user.pk) == principal.actor_id:
        return HttpResponse("you cannot remove yourself", status=400)
    if request.method == "GET":
        ctx = base_context(request, principal, member=user)
        return render(request, "console/member_remove.html", ctx)
    tenant_services.membership_set(tenant=principal.tenant, user=user, role=None, actor=principal)
    return redirect("console-members")


# --------------------------------------------------------------------------- operators


def _queue_depths() -> list[tuple[str, str]]:
    broker: str = settings.CELERY_BROKER_URL
    if not broker.startswith(("redis://", "rediss://", "redis+socket://", "unix://")):
        return [(name, "n/a") for name in QUEUE_NAMES]
    try:
        from kombu import Connection

        with Connection(broker, connect_timeout=2) as conn:
            client: Any = conn.default_channel.client  # type: ignore[attr-defined]
            return [(name, str(client.llen(name))) for name in QUEUE_NAMES]
    except Exception:  # the page must render even when the broker is down
        return [(name, "unavailable") for name in QUEUE_NAMES]


@require_GET
@staff_view
def ops_overview(request: HttpRequest) -> HttpResponse:
    now = services.db_now()
    ctx = base_context(
        request,
        principal_for(request),
        now=now,
        all_tenants=selectors.ops_tenants(),
        beats=selectors.ops_beats(),
        workers=selectors.ops_workers(since=now - timedelta(hours=1)),
        partitions=selectors.ops_partitions(),
        queues=_queue_depths(),
        lag=selectors.ops_fire_lag(since=now - timedelta(hours=1)),
        dead=selectors.ops_dead(),
    )
    return render(request, "console/ops.html", ctx)


@require_GET
@staff_view
def ops_audit(request: HttpRequest) -> HttpResponse:
    actor = request.GET.get("actor", "").strip()[:200]
    tenant = request.GET.get("tenant", "").strip()[:63]
    action = request.GET.get("action", "").strip()[:64]
    since_raw = request.GET.get("since", "").strip()
    until_raw = request.GET.get("until", "").strip()
    zone = viewer_zone(request)
    error = ""
    since = until = None
    try:
        since = console_forms.parse_local(since_raw, zone) if since_raw else None
        until = console_forms.parse_local(until_raw, zone) if until_raw else None
    except ValueError as exc:
        error = f"since/until: not a date and time in range ({exc})"
    rows = tenant_selectors.audit_search(
        actor=actor, tenant_slug=tenant, action=action, since=since, until=until, limit=200
    )
    ctx = base_context(
        request,
        principal_for(request),
        rows=rows,
        actor=actor,
        tenant_q=tenant,
        action=action,
        since=since_raw,
        until=until_raw,
        error=error,
    )
    return render(request, "console/audit.html", ctx, status=400 if error else 200)
