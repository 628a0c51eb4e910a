"""Run control's live pages: a bulk operation's progress and per-item results,
a backfill's progress (the schedule page polls it), and cancelling either.

The progress regions poll (htmx, every ~2 s) only while the operation runs: the
fragment answered once it is done (or cancelled) has no trigger, so polling
stops by itself. Only the progress region is swapped — never a form being
filled in — and its focusable elements keep stable ids, so htmx puts keyboard
focus back on them after each swap."""

from __future__ import annotations

import uuid

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from console.access import base_context, tenant_view
from console.views.common import is_htmx
from console.views.schedules import action_error, action_redirect, backfill_live
from dispatch import selectors, services
from dispatch.exceptions import DispatchError, InvalidSchedule, NotFound
from dispatch.models import Backfill, Operation, OperationItem
from dispatch.states import ItemStatus
from tenants.roles import Principal, Role

ITEMS_PAGE = 100


def _operation_or_404(principal: Principal, operation_id: uuid.UUID) -> Operation:
    try:
        return selectors.operation_get(tenant=principal.tenant, operation_id=operation_id)
    except NotFound:
        raise Http404("operation not found") from None


def _operation_page(
    request: HttpRequest,
    principal: Principal,
    operation: Operation,
    *,
    error: str = "",
    status: int = 200,
) -> HttpResponse:
    try:
        page = selectors.operation_items(
            operation=operation, cursor=request.GET.get("cursor") or None, limit=ITEMS_PAGE
        )
        items, next_cursor = page.items, page.next_cursor
    except InvalidSchedule as exc:
        error, items, next_cursor = exc.message, [], None
    named = selectors.operation_item_objects(operation=operation, items=items)
    ctx = base_context(
        request,
        principal,
        operation=operation,
        # Each item by what it names (the id stays on the page, second).
        items=[(item, _item_href(operation, item), named.get(item.object_id)) for item in items],
        next_cursor=next_cursor,
        error=error,
        percent=round(100 * operation.processed / operation.total) if operation.total else 100,
    )
    if is_htmx(request) and request.headers.get("HX-Target") == "operation-progress":
        return render(request, "console/operation.html#progress", ctx)
    return render(request, "console/operation.html", ctx, status=status)


def _item_href(operation: Operation, item: OperationItem) -> str:
    """The page of an item's object; none for an id that names nothing of this tenant's."""
    pk = selectors.as_uuid(item.object_id)
    if pk is None or item.status == ItemStatus.NOT_FOUND:
        return ""
    if operation.object_type == "execution":
        return reverse("console-execution", kwargs={"execution_id": pk})
    return reverse("console-schedule", kwargs={"schedule_id": pk})


@require_GET
@tenant_view(Role.VIEWER)
def operation_detail(
    request: HttpRequest, principal: Principal, operation_id: uuid.UUID
) -> HttpResponse:
    return _operation_page(request, principal, _operation_or_404(principal, operation_id))


@require_POST
@tenant_view(Role.OPERATOR)
def operation_cancel(
    request: HttpRequest, principal: Principal, operation_id: uuid.UUID
) -> HttpResponse:
    operation = _operation_or_404(principal, operation_id)
    try:
        services.operation_cancel(actor=principal, operation_id=operation.id)
    except NotFound:
        raise Http404("operation not found") from None
    except DispatchError as exc:
        return _operation_page(request, principal, operation, error=exc.message, status=exc.status)
    return redirect("console-operation", operation_id=operation.id)


# --- backfills ---------------------------------------------------------------------------


def _backfill_or_404(principal: Principal, backfill_id: uuid.UUID) -> Backfill:
    try:
        return selectors.backfill_get(tenant=principal.tenant, backfill_id=backfill_id)
    except NotFound:
        raise Http404("backfill not found") from None


@require_GET
@tenant_view(Role.VIEWER)
def backfill_progress(
    request: HttpRequest, principal: Principal, backfill_id: uuid.UUID
) -> HttpResponse:
    """One backfill's progress fragment (the schedule page polls it)."""
    try:
        backfill, progress = selectors.backfill_summary(
            tenant=principal.tenant, backfill_id=backfill_id
        )
    except NotFound:
        raise Http404("backfill not found") from None
    ctx = base_context(
        request,
        principal,
        backfill=backfill,
        progress=progress,
        live=backfill_live(backfill, progress),
    )
    return render(request, "console/backfill_progress.html", ctx)


@require_POST
@tenant_view(Role.OPERATOR)
def backfill_cancel(
    request: HttpRequest, principal: Principal, backfill_id: uuid.UUID
) -> HttpResponse:
    backfill = _backfill_or_404(principal, backfill_id)
    try:
        services.backfill_cancel(actor=principal, backfill_id=backfill.id)
    except NotFound:
        raise Http404("backfill not found") from None
    except DispatchError as exc:
        return action_error(request, principal, exc, exc.status)
    message = "Backfill cancelled: runs already released go on, the rest are left alone."
    return action_redirect(request, backfill.schedule_id, message, anchor="backfills")
