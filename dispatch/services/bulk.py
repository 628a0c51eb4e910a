"""Bulk actions: pause, resume, trigger or delete many schedules, cancel or re-run
many executions, named by ids or by a filter.

A filter is resolved to ids when the request is made (a snapshot: a schedule
created a second later is not part of a freeze started now), through the same
list reads the API's list endpoints use, so a filter means what it means there.
At most BULK_MAX_ITEMS objects per request.

Every request is recorded as an `Operation` with one `OperationItem` per object,
audited as a whole (`operation.create`, `operation.cancel`). Each item goes
through the single-object service (schedule_pause, execution_cancel, ...), so it
is audited, evented and checked exactly as the one-object endpoint would do it;
another tenant's id is `not_found` there and nothing of theirs is touched.

Small sets (<= BULK_SYNC_MAX) are worked in the request, in the transaction that
creates the operation (so it is `done` when anyone can see it); larger ones are
left `running` for the beats' control pump (dispatch/scheduler/operations.py),
which works BULK_CHUNK items per transaction with the operation's row locked
FOR UPDATE SKIP LOCKED, and records progress in that same transaction. The
pump takes tenants in turn (operation_step), and a tenant's running operations
hold at most BULK_MAX_QUEUED_ITEMS_PER_TENANT items not worked yet (_start
refuses more with a 429), so one tenant's queue cannot stall another's.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from django.conf import settings
from django.db import InterfaceError, OperationalError, transaction

from core.api.inputs import InvalidInput, parse_instant
from core.db import db_now
from core.errors import AppError
from dispatch import selectors
from dispatch.exceptions import (
    InvalidSchedule,
    NotFound,
    QueueFull,
    StateConflict,
    TriggerLimited,
    VersionConflict,
)
from dispatch.models import Operation, OperationItem, Schedule
from dispatch.services.schedules import (
    schedule_delete,
    schedule_pause,
    schedule_resume,
)
from dispatch.services.triggers import schedule_trigger
from dispatch.sql import sql
from dispatch.states import AuditAction, ControlState, ItemStatus
from tenants.audit import audit_record
from tenants.models import Tenant
from tenants.roles import Principal, Role

log = logging.getLogger("dispatch.bulk")

SCHEDULE_ACTIONS = ("pause", "resume", "trigger", "delete")
# The schedule list's filters (GET /v1/schedules), under the same names.
SCHEDULE_FILTERS = ("search", "kind", "paused")

EXECUTION_ACTIONS = ("cancel", "rerun")
# The execution list's filters (GET /v1/executions), under the runs page's names.
EXECUTION_FILTERS = ("state", "schedule_id", "trigger", "from", "to")

OBJECT_SCHEDULE = "schedule"
OBJECT_EXECUTION = "execution"


@dataclass
class BulkOutcome:
    """A bulk request's answer: the operation it ran or started, or (dry run) the
    preview of what it would do and nothing written."""

    operation: Operation | None = None
    preview: dict[str, Any] | None = None


# --- request checks ------------------------------------------------------------------


def _check_action(action: str, allowed: tuple[str, ...]) -> None:
    if action not in allowed:
        raise InvalidSchedule.field("action", f"must be one of {', '.join(allowed)}")


def _max_items() -> int:
    return int(settings.BULK_MAX_ITEMS)


def _targets(
    ids: list[Any] | None,
    filter: dict[str, Any] | None,  # noqa: A002 - the API's name for it
    *,
    allowed: tuple[str, ...],
    resolve: Callable[[dict[str, Any]], list[str]],
) -> list[str]:
    """The ids the request names: its `ids` (duplicates dropped, order kept) or
    what its `filter` matches now. Exactly one of the two."""
    if ids is None and filter is None:
        raise InvalidSchedule.field("ids", "give ids or a filter")
    if ids is not None and filter is not None:
        raise InvalidSchedule.field("filter", "give either ids or a filter, not both")
    if ids is not None:
        if not isinstance(ids, list) or not all(isinstance(i, str | uuid.UUID) for i in ids):
            raise InvalidSchedule.field("ids", "must be a list of ids")
        if not ids:
            raise InvalidSchedule.field("ids", "must not be empty")
        if len(ids) > _max_items():
            raise InvalidSchedule.field(
                "ids", f"at most {_max_items()} ids per request ({len(ids)} given)"
            )
        return list(dict.fromkeys(str(i) for i in ids))
    if not isinstance(filter, dict):
        raise InvalidSchedule.field("filter", "must be an object")
    for key in filter:
        if key not in allowed:
            raise InvalidSchedule.field(
                f"filter.{key}", f"unknown filter; one of {', '.join(allowed)}"
            )
    return resolve(filter)


def _jsonable(flt: dict[str, Any] | None) -> dict[str, Any] | None:
    """A filter as the operation records it (instants and ids as text)."""
    if flt is None:
        return None
    return {
        k: v.isoformat() if isinstance(v, datetime) else str(v) if isinstance(v, uuid.UUID) else v
        for k, v in flt.items()
    }


def _in_filter(exc: AppError) -> InvalidSchedule:
    """A list read's field error, named as the filter field the request used."""
    field, reasons = next(iter(exc.detail.items()), ("filter", [exc.message]))
    return InvalidSchedule.field(f"filter.{field}", reasons[0])


def _over_limit(what: str) -> InvalidSchedule:
    return InvalidSchedule.field(
        "filter",
        f"matches more than {_max_items()} {what} (at most {_max_items()} per request); narrow it",
    )


def _text_filter(flt: dict[str, Any], name: str) -> str:
    value = flt.get(name, "")
    if not isinstance(value, str):
        raise InvalidSchedule.field(f"filter.{name}", "must be a string")
    return value


def _schedule_ids(tenant: Tenant, flt: dict[str, Any]) -> list[str]:
    """Every live schedule the schedule list shows for this filter, newest first."""
    paused = flt.get("paused")
    if paused is not None and not isinstance(paused, bool):
        raise InvalidSchedule.field("filter.paused", "must be true or false")
    found: list[str] = []
    cursor: str | None = None
    while True:
        try:
            page = selectors.schedule_list(
                tenant=tenant,
                cursor=cursor,
                limit=selectors.MAX_PAGE,
                search=_text_filter(flt, "search"),
                kind=_text_filter(flt, "kind"),
                paused=paused,
            )
        except (InvalidSchedule, InvalidInput) as exc:
            raise _in_filter(exc) from None
        found += [str(s.id) for s in page.items]
        if len(found) > _max_items():
            raise _over_limit("schedules")
        if page.next_cursor is None:
            return found
        cursor = page.next_cursor


# --- schedules -------------------------------------------------------------------------


def bulk_schedules(
    *,
    actor: Principal,
    action: str,
    ids: list[Any] | None = None,
    filter: dict[str, Any] | None = None,  # noqa: A002 - the API's name for it
    reason: str = "",
    until: datetime | None = None,
    dry_run: bool = False,
    zone: ZoneInfo | None = None,
) -> BulkOutcome:
    """Pause (one reason, optional until), resume, trigger or delete many schedules.

    `zone`: the zone a dry run's sentences write times in (the console's viewer's;
    the API's are in UTC).

    `dry_run` writes nothing and answers what would happen: for resume the
    combined misfire preview (the sum of each schedule's resume preview), for
    pause which schedules would be paused and which already are.
    """
    _check_action(action, SCHEDULE_ACTIONS)
    if until is not None:
        if action != "pause":
            raise InvalidSchedule.field("until", "only with action pause")
        if until <= db_now():
            raise InvalidSchedule.field("until", "must be in the future")
    targets = _targets(
        ids,
        filter,
        allowed=SCHEDULE_FILTERS,
        resolve=lambda flt: _schedule_ids(actor.tenant, flt),
    )
    if dry_run:
        return BulkOutcome(preview=schedules_dry_run(actor.tenant, action, targets, zone=zone))
    params: dict[str, Any] = {
        "reason": reason,
        "until": until.isoformat() if until else None,
        "filter": _jsonable(filter),
    }
    return BulkOutcome(operation=_start(actor, OBJECT_SCHEDULE, action, targets, params))


def _live_schedules(tenant: Tenant, targets: list[str]) -> dict[str, Schedule]:
    pks = [pk for pk in (selectors.as_uuid(t) for t in targets) if pk is not None]
    rows = Schedule.objects.filter(tenant=tenant, deleted_at__isnull=True, pk__in=pks)
    return {str(s.id): s for s in rows}


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def schedules_dry_run(
    tenant: Tenant, action: str, targets: list[str], *, zone: ZoneInfo | None = None
) -> dict[str, Any]:
    """What the action would do to each schedule; nothing is written."""
    now = db_now()
    found = _live_schedules(tenant, targets)
    items: list[dict[str, Any]] = []
    changes = run = skip = 0
    for target in targets:
        schedule = found.get(str(selectors.as_uuid(target)))
        if schedule is None:
            items.append({"id": target, "status": ItemStatus.NOT_FOUND, "name": None})
            continue
        item: dict[str, Any] = {
            "id": str(schedule.id),
            "status": ItemStatus.OK,
            "name": schedule.name,
            "paused": schedule.paused,
        }
        if action == "resume":
            # Resuming a schedule that is not paused changes nothing (resume is idempotent).
            if schedule.paused:
                preview = selectors.resume_preview(schedule, now, zone or ZoneInfo("UTC"))
                item |= {"run": preview.run, "skip": preview.skip, "text": preview.text}
                changes, run, skip = changes + 1, run + preview.run, skip + preview.skip
            else:
                item["text"] = "not paused: resuming changes nothing"
        elif action == "pause":
            item["text"] = "pause replaced (already paused)" if schedule.paused else "paused"
            changes += 0 if schedule.paused else 1
        else:
            changes += 1
        items.append(item)
    summary: dict[str, Any] = {
        "dry_run": True,
        "action": action,
        "total": len(targets),
        "found": len(found),
        "not_found": len(targets) - len(found),
        "items": items,
    }
    if action == "resume":
        summary |= {"schedules": changes, "run": run, "skip": skip}
        summary["text"] = (
            f"resuming {_plural(changes, 'schedule')} will run {_plural(run, 'occurrence')} "
            f"and skip {skip}"
        )
    elif action == "pause":
        summary |= {"schedules": changes, "already_paused": len(found) - changes}
        summary["text"] = f"pausing {_plural(changes, 'schedule')}" + (
            f"; {len(found) - changes} already paused (their pause is replaced)"
            if len(found) > changes
            else ""
        )
    else:
        verb = {"trigger": "triggering", "delete": "deleting"}[action]
        summary |= {"schedules": changes}
        summary["text"] = f"{verb} {_plural(changes, 'schedule')}"
    return summary


# --- executions ------------------------------------------------------------------------


def _filter_instant(flt: dict[str, Any], name: str) -> datetime | None:
    raw = flt.get(name)
    if raw is None or isinstance(raw, datetime):
        return raw
    if not isinstance(raw, str):
        raise InvalidSchedule.field(f"filter.{name}", "must be an ISO 8601 instant")
    return parse_instant(raw, f"filter.{name}")


def _choice_list(flt: dict[str, Any], name: str) -> str | None:
    """A filter's state or trigger: one value or a list, as the list read's comma form."""
    raw = flt.get(name)
    if raw is None:
        return None
    values = raw if isinstance(raw, list) else [raw]
    if not values or not all(isinstance(v, str) and v for v in values):
        raise InvalidSchedule.field(f"filter.{name}", f"must be a {name} or a list of them")
    return ",".join(values)


def _execution_ids(tenant: Tenant, flt: dict[str, Any]) -> list[str]:
    """Every execution the execution list shows for this filter, newest first."""
    schedule_id = flt.get("schedule_id")
    if schedule_id is not None and not isinstance(schedule_id, str | uuid.UUID):
        raise InvalidSchedule.field("filter.schedule_id", "is not a schedule id")
    try:
        matching = selectors.execution_filter(
            state=_choice_list(flt, "state"),
            schedule_id=schedule_id,
            trigger=_choice_list(flt, "trigger"),
            since=_filter_instant(flt, "from"),
            until=_filter_instant(flt, "to"),
        )
    except (InvalidSchedule, InvalidInput) as exc:
        raise _in_filter(exc) from None
    # One index-ordered read, one row past the bound to tell "over the limit".
    found = [
        str(pk)
        for pk in selectors.executions_matching(tenant=tenant, flt=matching)
        .order_by("-scheduled_for", "-id")
        .values_list("id", flat=True)[: _max_items() + 1]
    ]
    if len(found) > _max_items():
        raise _over_limit("executions")
    return found


def bulk_executions(
    *,
    actor: Principal,
    action: str,
    ids: list[Any] | None = None,
    filter: dict[str, Any] | None = None,  # noqa: A002 - the API's name for it
    reason: str = "",
) -> BulkOutcome:
    """Cancel (with one reason) or re-run many executions; each item through
    execution_cancel / execution_rerun, which name this operation in their event
    and audit row."""
    _check_action(action, EXECUTION_ACTIONS)
    if reason and action != "cancel":
        raise InvalidSchedule.field("reason", "only with action cancel")
    targets = _targets(
        ids,
        filter,
        allowed=EXECUTION_FILTERS,
        resolve=lambda flt: _execution_ids(actor.tenant, flt),
    )
    params: dict[str, Any] = {"reason": reason, "until": None, "filter": _jsonable(filter)}
    return BulkOutcome(operation=_start(actor, OBJECT_EXECUTION, action, targets, params))


# --- one item ------------------------------------------------------------------------

# (actor, object id, operation) -> the item's detail; raises the service's errors.
Apply = Callable[[Principal, str, Operation], str]


def _until(op: Operation) -> datetime | None:
    raw = op.params.get("until")
    return datetime.fromisoformat(raw) if raw else None


def _pause(actor: Principal, object_id: str, op: Operation) -> str:
    schedule = schedule_pause(
        actor=actor, schedule_id=object_id, reason=op.params.get("reason") or "", until=_until(op)
    )
    return f"paused (version {schedule.version})"


def _resume(actor: Principal, object_id: str, op: Operation) -> str:
    schedule_resume(actor=actor, schedule_id=object_id)
    return "resumed"


def _trigger(actor: Principal, object_id: str, op: Operation) -> str:
    execution = schedule_trigger(actor=actor, schedule_id=object_id)
    return f"execution {execution.id} {execution.state}"


def _delete(actor: Principal, object_id: str, op: Operation) -> str:
    schedule_delete(actor=actor, schedule_id=object_id)
    return "deleted"


def _cancel(actor: Principal, object_id: str, op: Operation) -> str:
    # Imported here: runs imports the scheduler's dependencies module, which imports the
    # services package this module is part of (it would be half-initialised at our import).
    from dispatch.services.runs import execution_cancel

    result = execution_cancel(
        actor=actor,
        execution_id=object_id,
        reason=op.params.get("reason") or "",
        operation_id=str(op.id),
    )
    return "cancelled" if result.changed else "already cancelled"


def _rerun(actor: Principal, object_id: str, op: Operation) -> str:
    from dispatch.services.runs import execution_rerun  # late, as in _cancel

    execution = execution_rerun(actor=actor, execution_id=object_id, operation_id=str(op.id))
    return f"re-run as attempt {execution.attempt}"


APPLY: dict[tuple[str, str], Apply] = {
    (OBJECT_EXECUTION, "cancel"): _cancel,
    (OBJECT_EXECUTION, "rerun"): _rerun,
    (OBJECT_SCHEDULE, "pause"): _pause,
    (OBJECT_SCHEDULE, "resume"): _resume,
    (OBJECT_SCHEDULE, "trigger"): _trigger,
    (OBJECT_SCHEDULE, "delete"): _delete,
}


def _apply(op: Operation, actor: Principal, item: OperationItem) -> None:
    """Run one item through its single-object service and record the outcome on it.

    No savepoint of our own: each service is its own (nested) transaction and
    rolls back its part on an error, while what it commits on purpose before
    raising (a refused trigger's audit row) stays.
    """
    status, detail = ItemStatus.OK, ""
    try:
        detail = APPLY[(op.object_type, op.action)](actor, item.object_id, op)
    except NotFound as exc:
        status, detail = ItemStatus.NOT_FOUND, exc.message
    except (StateConflict, VersionConflict, TriggerLimited) as exc:
        status, detail = ItemStatus.CONFLICT, exc.message
    except (InvalidSchedule, InvalidInput) as exc:
        status, detail = ItemStatus.INVALID, exc.message
    except AppError as exc:
        status, detail = ItemStatus.ERROR, exc.message
    except (OperationalError, InterfaceError):
        raise  # the connection is gone: the chunk rolls back and is taken up again
    except Exception:
        # One item's bug must not stop the operation for ever (the pump would retry
        # the same chunk each round): recorded, and the rest goes on.
        log.exception("bulk %s item %s", op.id, item.object_id)
        status, detail = ItemStatus.ERROR, "internal error (logged)"
    item.status, item.detail = status, detail[:500]


def _work(op: Operation, actor: Principal, items: list[OperationItem]) -> None:
    """Apply `items` (pending, in position order) and record them and the counters."""
    for item in items:
        _apply(op, actor, item)
    OperationItem.objects.bulk_update(items, ["status", "detail"])
    ok = sum(1 for item in items if item.status == ItemStatus.OK)
    op.processed += len(items)
    op.succeeded += ok
    op.failed += len(items) - ok
    fields = ["processed", "succeeded", "failed"]
    if op.processed >= op.total:
        op.state, op.finished_at = ControlState.DONE, db_now()
        fields += ["state", "finished_at"]
    op.save(update_fields=fields)


def _creator(op: Operation) -> Principal:
    """The principal the operation's items act as: its creator (audit rows name them)."""
    who = op.params.get("actor") or {}
    return Principal(
        tenant=op.tenant,
        role=Role.parse(who.get("role", Role.OPERATOR.label)),
        actor_kind=who.get("kind", "system"),
        actor_id=who.get("id", ""),
        label=op.created_by,
    )


def _check_queue_bound(actor: Principal, wanted: int) -> None:
    """Refuse to queue `wanted` more items past the tenant's BULK_MAX_QUEUED_ITEMS_PER_TENANT
    (items of its running operations not worked yet). Only queued work counts: a small
    set worked in the request queues nothing and is never refused.

    Held to commit, the tenant's lock makes two concurrent requests count one after
    the other (the second sees the first's items), so the bound is never overshot."""
    params = {"tenant_id": actor.tenant.pk, "running": str(ControlState.RUNNING)}
    sql.one("operation_tenant_lock", params)
    queued = int(sql.scalar("operation_tenant_queued", params))
    bound = int(settings.BULK_MAX_QUEUED_ITEMS_PER_TENANT)
    if queued + wanted > bound:
        raise QueueFull(
            f"this tenant's running bulk operations have {queued} items queued; {wanted} more "
            f"would pass the bound of {bound} (BULK_MAX_QUEUED_ITEMS_PER_TENANT). It frees "
            "as those operations finish (or are cancelled): retry then, or send a smaller set",
            detail={"queued": [str(queued)], "limit": [str(bound)], "items": [str(wanted)]},
        )


def _start(
    actor: Principal, object_type: str, action: str, targets: list[str], params: dict[str, Any]
) -> Operation:
    sync = len(targets) <= int(settings.BULK_SYNC_MAX)
    with transaction.atomic():
        if not sync:
            _check_queue_bound(actor, len(targets))
        op = Operation.objects.create(
            tenant=actor.tenant,
            object_type=object_type,
            action=action,
            params=params
            | {"actor": {"kind": actor.actor_kind, "id": actor.actor_id, "role": actor.role.label}},
            total=len(targets),
            created_by=actor.label,
            state=ControlState.DONE if not targets else ControlState.RUNNING,
        )
        items = OperationItem.objects.bulk_create(
            [
                OperationItem(operation=op, position=n, object_id=target)
                for n, target in enumerate(targets)
            ],
            batch_size=1000,
        )
        audit_record(
            actor=actor,
            action=AuditAction.OPERATION_CREATE,
            object_type="operation",
            object_id=str(op.id),
            after={
                "object_type": object_type,
                "action": action,
                "total": len(targets),
                "mode": "sync" if sync else "async",
                **params,
            },
        )
        if sync and items:
            _work(op, actor, items)
    return op


@dataclass(frozen=True)
class Step:
    worked: int  # items worked (1 for an operation found with nothing left, then done)
    tenant_id: int | None  # whose operation it was (None: no running operation free)


def operation_step(*, after_tenant: int = 0) -> Step:
    """One chunk of one running operation (the control pump's step).

    Which one: tenants take turns, starting after `after_tenant` (the tenant the
    caller served last), each tenant's oldest operation first (operation_next),
    so one tenant's long queue delays another's operation by a chunk a turn, not
    by the whole queue. The operation's row is locked FOR UPDATE SKIP LOCKED, so
    two beats' pumps work two different operations (or one waits a round); the
    items and the counters commit together, so a crash loses at most the chunk
    in progress, which the next round does again (each item's service is safe to
    repeat: pause replaces the pause, resume of a resumed schedule is a no-op...).
    """
    with transaction.atomic():
        row = sql.one(
            "operation_next", {"running": str(ControlState.RUNNING), "after": after_tenant}
        )
        if row is None:
            return Step(0, None)
        op = Operation.objects.select_related("tenant").get(pk=row.id)
        # Items are worked in position order, so the pending ones start at `processed`.
        items = list(
            OperationItem.objects.filter(
                operation=op, position__gte=op.processed, status=ItemStatus.PENDING
            ).order_by("position")[: int(settings.BULK_CHUNK)]
        )
        if not items:
            op.state, op.finished_at = ControlState.DONE, db_now()
            op.save(update_fields=["state", "finished_at"])
            return Step(1, op.tenant_id)
        _work(op, _creator(op), items)
        return Step(len(items), op.tenant_id)


@transaction.atomic
def operation_cancel(*, actor: Principal, operation_id: uuid.UUID | str) -> Operation:
    """Stop a running operation: the items not reached yet become `cancelled`.

    Waits for a chunk in progress (its row lock), so every item is either worked
    or cancelled, never both. Cancelling a cancelled operation changes nothing;
    a finished one is a 409 naming its state.
    """
    pk = selectors.as_uuid(operation_id)
    op = (
        Operation.objects.select_for_update().filter(tenant=actor.tenant, pk=pk).first()
        if pk
        else None
    )
    if op is None:
        raise NotFound("operation not found")
    if op.state == ControlState.CANCELLED:
        return op
    if op.state != ControlState.RUNNING:
        raise StateConflict(
            f"operation is {op.state}; only a running operation can be cancelled",
            detail={"state": [str(op.state)]},
        )
    cancelled = OperationItem.objects.filter(operation=op, status=ItemStatus.PENDING).update(
        status=ItemStatus.CANCELLED, detail=f"operation cancelled by {actor.label}"
    )
    before = {"state": op.state, "processed": op.processed}
    op.state, op.finished_at, op.cancelled_by = ControlState.CANCELLED, db_now(), actor.label
    op.save(update_fields=["state", "finished_at", "cancelled_by"])
    audit_record(
        actor=actor,
        action=AuditAction.OPERATION_CANCEL,
        object_type="operation",
        object_id=str(op.id),
        before=before,
        after={"state": op.state, "processed": op.processed, "cancelled": cancelled},
    )
    return op
