"""Reads of bulk operations: one operation of the tenant, a page of its items
(in the order the request named or the filter matched them), and what each item
names for people (a schedule's name, a run's schedule and occurrence)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from dispatch.exceptions import InvalidSchedule
from dispatch.models import Execution, Operation, OperationItem, Schedule
from dispatch.selectors.paging import MAX_PAGE, as_uuid, tenant_object
from tenants.models import Tenant


def operation_get(*, tenant: Tenant, operation_id: uuid.UUID | str) -> Operation:
    """The tenant's operation; another tenant's (or a malformed id) is not found."""
    return tenant_object(Operation.objects.all(), tenant=tenant, pk=operation_id, what="operation")


@dataclass
class ItemPage:
    items: list[OperationItem]
    next_cursor: str | None


def operation_items(
    *, operation: Operation, cursor: str | None = None, limit: int = 100
) -> ItemPage:
    """A page of the operation's items by position (keyset: the cursor is the last
    position shown, so every page costs the same on the (operation, position) key)."""
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidSchedule.field("limit", f"must be in 1..{MAX_PAGE}")
    after = -1
    if cursor:
        if not cursor.isdigit() or len(cursor) > 10:
            raise InvalidSchedule.field("cursor", "is not a cursor this API returned")
        after = int(cursor)
    rows = list(
        OperationItem.objects.filter(operation=operation, position__gt=after).order_by("position")[
            : limit + 1
        ]
    )
    items = rows[:limit]
    nxt = str(items[-1].position) if len(rows) > limit else None
    return ItemPage(items=items, next_cursor=nxt)


@dataclass(frozen=True)
class ItemObject:
    """What an item's id names, as a person knows it: the schedule's name; for a run,
    its schedule's name and its occurrence (`scheduled_for`)."""

    name: str
    scheduled_for: datetime | None = None


def operation_item_objects(
    *, operation: Operation, items: list[OperationItem]
) -> dict[str, ItemObject]:
    """By each item's object_id, the object it names (one query): of the operation's
    tenant only (another tenant's id names nothing here), a deleted schedule by the name
    it had (a bulk delete's results still say which)."""
    pks = {item.object_id: as_uuid(item.object_id) for item in items}
    wanted = {pk for pk in pks.values() if pk is not None}
    if not wanted:
        return {}
    found: dict[uuid.UUID, ItemObject]
    if operation.object_type == "execution":
        runs = Execution.objects.filter(tenant_id=operation.tenant_id, pk__in=wanted)
        found = {
            e.id: ItemObject(name=e.schedule.name, scheduled_for=e.scheduled_for)
            for e in runs.select_related("schedule").only("id", "scheduled_for", "schedule__name")
        }
    else:
        schedules = Schedule.objects.filter(tenant_id=operation.tenant_id, pk__in=wanted)
        found = {pk: ItemObject(name=name) for pk, name in schedules.values_list("id", "name")}
    return {oid: found[pk] for oid, pk in pks.items() if pk is not None and pk in found}
