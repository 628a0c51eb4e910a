"""Keyset pagination of the list reads, and path ids."""

from __future__ import annotations

import base64
import binascii
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Generic, TypeVar

from django.db.models import Model, Q, QuerySet

from dispatch.exceptions import InvalidSchedule, NotFound
from dispatch.history.partitions import Walk

T = TypeVar("T")
NIL = uuid.UUID(int=0)
M = TypeVar("M", bound=Model)
MAX_PAGE = 500


@dataclass
class Page(Generic[T]):
    items: list[T]
    next_cursor: str | None


def encode_cursor(at: datetime, pk: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(f"{at.isoformat()}|{pk}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    """A cursor's (value, id); InvalidSchedule naming `cursor` when it is not one of ours."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        at, pk = raw.split("|", 1)
        parsed = datetime.fromisoformat(at)
        if parsed.tzinfo is None:
            raise ValueError("naive")
        return parsed, uuid.UUID(pk)
    except (ValueError, UnicodeDecodeError, binascii.Error):
        raise InvalidSchedule.field("cursor", "is not a cursor this API returned") from None


def cursor_below(at: datetime) -> str:
    """A cursor that goes on with the rows strictly before `at` (no id is below the nil
    UUID): where a read stopped at a window's lower bound."""
    return encode_cursor(at, NIL)


def newest_after(at: datetime, pk: uuid.UUID) -> datetime:
    """The newest value a row after the cursor (at, pk) can have, where the page's walk
    of windows starts: `at`, or just below it after a cursor_below one, whose own
    instant holds nothing more (a day's start, where a walk stopped: reading on from
    that day would spend a read, and a day of the budget, on nothing)."""
    return at - timedelta(microseconds=1) if pk == NIL else at


# The windows of the keyset's field to read in turn, newest first, given the page's
# upper bound (the cursor's value, or None): see keyset_page.
Windows = Callable[[datetime | None], Walk]


def keyset_page(
    qs: QuerySet[M], *, field: str, cursor: str | None, limit: int, windows: Windows | None = None
) -> Page[M]:
    """Keyset pagination on (field desc, id desc): each page costs the same, however deep.
    With `windows` the page is read one range of `field` at a time until it is full
    (a partitioned table: each query plans over the partitions of its range only); a
    walk that stops at its budget (Walk.cut) ends the page there, short or even empty,
    with a cursor that reads on below it."""
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidSchedule.field("limit", f"must be in 1..{MAX_PAGE}")
    upper = None
    if cursor:
        at, pk = decode_cursor(cursor)
        qs = _after(qs, field=field, at=at, pk=pk)
        upper = newest_after(at, pk)
    ordered = qs.order_by(f"-{field}", "-id")
    rows: list[M] = []
    walk = windows(upper) if windows else Walk([(None, None)])
    for lo, hi in walk:
        rows += within(ordered, field=field, lo=lo, hi=hi)[: limit + 1 - len(rows)]
        if len(rows) > limit:
            break
    items = rows[:limit]
    nxt = None
    if len(rows) > limit:
        last = items[-1]
        nxt = encode_cursor(getattr(last, field), last.id)  # type: ignore[attr-defined]
    elif walk.cut is not None:
        nxt = cursor_below(walk.cut)
    return Page(items=items, next_cursor=nxt)


def within(qs: QuerySet[M], *, field: str, lo: datetime | None, hi: datetime | None) -> QuerySet[M]:
    """The rows with lo <= field < hi (None: no bound on that side)."""
    if lo is not None:
        qs = qs.filter(**{f"{field}__gte": lo})
    if hi is not None:
        qs = qs.filter(**{f"{field}__lt": hi})
    return qs


def keyset_after(qs: QuerySet[M], *, field: str, cursor: str) -> QuerySet[M]:
    """The rows after a cursor in (field desc, id desc) order."""
    at, pk = decode_cursor(cursor)
    return _after(qs, field=field, at=at, pk=pk)


def _after(qs: QuerySet[M], *, field: str, at: datetime, pk: uuid.UUID) -> QuerySet[M]:
    # The redundant `field <= at` is the index bound: the OR alone can only be
    # a filter, so deep pages would walk every row above the cursor.
    return qs.filter(
        Q(**{f"{field}__lte": at}), Q(**{f"{field}__lt": at}) | Q(**{field: at, "id__lt": pk})
    )


def keyset_through(qs: QuerySet[M], *, field: str, at: datetime, pk: uuid.UUID) -> QuerySet[M]:
    """The rows down to and including (at, pk) in (field desc, id desc) order."""
    return qs.filter(
        Q(**{f"{field}__gte": at}), Q(**{f"{field}__gt": at}) | Q(**{field: at, "id__gte": pk})
    )


def as_uuid(value: uuid.UUID | str) -> uuid.UUID | None:
    """A path id as a UUID, or None: a malformed id is just another id that does not exist."""
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


def tenant_object(queryset: QuerySet[M], *, tenant: object, pk: uuid.UUID | str, what: str) -> M:
    """The tenant's row `pk` of `queryset`, else NotFound("<what> not found"). Tenant
    first: another tenant's id, a malformed one and a missing one are the same 404."""
    key = as_uuid(pk)
    found = queryset.filter(tenant=tenant, pk=key).first() if key is not None else None
    if found is None:
        raise NotFound(f"{what} not found")
    return found
