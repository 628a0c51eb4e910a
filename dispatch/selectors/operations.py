"""Reads of bulk operations: one operation of the tenant, and a page of its items
(in the order the request named or the filter matched them)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from dispatch.exceptions import InvalidSchedule
from dispatch.models import Operation, OperationItem
from dispatch.selectors.paging import MAX_PAGE, tenant_object
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
