"""Declarative apply (POST /v1/schedules:apply): a file of definitions keyed by name,
made true in ONE transaction — missing ones created, differing ones updated, equal
ones left alone (no write, no audit, no version bump), and with `prune` the
tenant's other definitions deleted. Nothing is half-applied: any error rolls the
whole request back.

Every write goes through the one-schedule services (schedule_create / _update /
_delete / _pause / _resume), so validation, audit rows, timeline events, the
withdrawal of staged occurrences and the beat wake-up are theirs, unchanged. A
dry run does exactly the same work and rolls it back: its answer is the real one
(quota, cycles, unique names included), only the ids of creates are not kept.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection, transaction

from core.db import db_now
from core.errors import AppError
from dispatch.exceptions import InvalidSchedule, QuotaExceeded, VersionConflict, under
from dispatch.models import Schedule
from dispatch.schedule_fields import clean_schedule
from dispatch.selectors.definitions import (
    LINKED_FIELDS,
    definition_filled,
    definition_of,
    definition_with,
    definitions_live,
)
from dispatch.selectors.schedules import schedule_preview
from dispatch.services.apply_calendars import CalendarChange, calendars_apply, calendars_prune
from dispatch.services.common import store_definition
from dispatch.services.schedules import (
    schedule_create,
    schedule_delete,
    schedule_pause,
    schedule_resume,
    schedule_update,
)
from tenants.roles import Principal

APPLY_MAX = 1000
# What an apply does to each definition (and calendar) of the file.
CHANGE_ACTIONS = ("create", "update", "unchanged", "delete")
NEXT_RUNS = 5
PAUSE_REASON = "paused by apply"
# pg_advisory_xact_lock(class, key): applies of one tenant take turns, so two racing
# on the same new names end as if run one after the other (the second sees the first's).
_LOCK_CLASS = 4244


@dataclass
class Change:
    name: str
    action: str  # create | update | unchanged | delete
    id: uuid.UUID | None = None
    version: int | None = None
    fields: dict[str, dict[str, Any]] = field(default_factory=dict)
    next_before: list[datetime] = field(default_factory=list)
    next_after: list[datetime] = field(default_factory=list)


@dataclass
class ApplyResult:
    dry_run: bool
    changes: list[Change]
    # The file's calendars (dispatch/services/apply_calendars.py); None: it had none.
    calendars: list[CalendarChange] | None = None

    @property
    def summary(self) -> dict[str, int]:
        counts = dict.fromkeys(CHANGE_ACTIONS, 0)
        for change in self.changes:
            counts[change.action] += 1
        return counts


class _RolledBack(Exception):
    """Carries a dry run's answer out of the transaction it rolls back."""

    def __init__(self, result: ApplyResult) -> None:
        super().__init__("dry run")
        self.result = result


@dataclass
class _Item:
    index: int
    raw: dict[str, Any]
    name: str
    existing: Schedule | None
    schedule_id: uuid.UUID
    depends_on: list[str]
    change: Change
    definition_changed: bool = False
    pause: bool | None = None  # True: pause, False: resume, None: leave


def at_item(index: int, exc: AppError) -> AppError:
    return under(f"schedules[{index}]", exc)


def _next_runs(schedule: Schedule, now: datetime) -> list[datetime]:
    return [
        o.scheduled_for for o in schedule_preview(schedule=schedule, after=now, count=NEXT_RUNS)
    ]


def schedules_apply(
    *,
    actor: Principal,
    definitions: list[dict[str, Any]],
    calendars: list[Any] | None = None,
    prune: bool = False,
    dry_run: bool = False,
) -> ApplyResult:
    """Apply `definitions` (each a validated DEF: the body of POST /v1/schedules with
    depends_on as names, optional `version` and `paused`), after the `calendars` they
    may name (None: leave the tenant's calendars alone, prune included). Raises the
    first item's error naming `schedules[i].<field>` / `calendars[i].<field>`;
    nothing is written then."""
    if len(definitions) > APPLY_MAX:
        raise InvalidSchedule.field("schedules", f"at most {APPLY_MAX} definitions per request")
    try:
        with transaction.atomic():
            result = _apply(actor, definitions, calendars, prune=prune, dry_run=dry_run)
            if dry_run:
                raise _RolledBack(result)
    except _RolledBack as done:
        return done.result
    return result


def _apply(
    actor: Principal,
    definitions: list[dict[str, Any]],
    calendars: list[Any] | None,
    *,
    prune: bool,
    dry_run: bool,
) -> ApplyResult:
    tenant = actor.tenant
    with connection.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", [_LOCK_CLASS, str(tenant.id)])
    # First: the schedules below are checked against the calendars as the file has them.
    calendar_changes = (
        None if calendars is None else calendars_apply(actor=actor, definitions=calendars)
    )
    names = _names(definitions)
    # The rows this apply may change, locked: a concurrent PATCH waits for us (and then
    # sees the new version: its If-Match is a 409) instead of being overwritten.
    scope = definitions_live(tenant=tenant)
    if not prune:
        scope = scope.filter(name__in=names)
    live = {s.name: s for s in scope.select_for_update()}
    _refuse_jobs(tenant_id=tenant.id, names=names)
    now = db_now()
    items = [
        _plan(actor, i, raw, names[i], live.get(names[i]), now) for i, raw in enumerate(definitions)
    ]
    pruned = sorted(set(live) - set(names)) if prune else []
    # Upstreams by name: the file's own first, then the tenant's live schedules.
    ids = _check_upstreams(tenant_id=tenant.id, items=items, pruned=set(pruned))
    ids |= {item.name: item.schedule_id for item in items}
    for item in _upstreams_first(items):
        _carry_out(actor, item, ids, now, dry_run=dry_run)
    changes = [item.change for item in items]
    for name in pruned:
        schedule = live[name]
        before = _next_runs(schedule, now)
        schedule_delete(actor=actor, schedule_id=schedule.id)
        changes.append(
            Change(name, "delete", schedule.id, _version_of(schedule.id), next_before=before)
        )
    if prune and calendar_changes is not None:
        # Last: a calendar only the pruned schedules listed is no longer in use.
        keep = {c.name for c in calendar_changes}
        calendar_changes += calendars_prune(actor=actor, keep=keep)
    return ApplyResult(dry_run=dry_run, changes=changes, calendars=calendar_changes)


def _names(definitions: list[dict[str, Any]]) -> list[str]:
    names: list[str] = []
    seen: dict[str, int] = {}
    for i, raw in enumerate(definitions):
        name = raw.get("name")
        if not isinstance(name, str) or not name.strip():
            raise InvalidSchedule.field(f"schedules[{i}].name", "is required")
        name = name.strip()
        if name in seen:
            raise InvalidSchedule.field(
                f"schedules[{i}].name", f"duplicate: {name!r} is also schedules[{seen[name]}]"
            )
        seen[name] = i
        names.append(name)
    return names


def _refuse_jobs(*, tenant_id: Any, names: list[str]) -> None:
    # A live one-off of /v1/jobs holds the name: apply neither adopts it as a definition
    # nor collides with it at insert (that would be the unique index's 400, unexplained).
    taken = set(
        Schedule.objects.filter(tenant_id=tenant_id, deleted_at__isnull=True, name__in=names)
        .exclude(request_digest="")
        .values_list("name", flat=True)
    )
    for i, name in enumerate(names):
        if name in taken:
            raise InvalidSchedule.field(
                f"schedules[{i}].name", "a one-off job created through /v1/jobs has this name"
            )


def _plan(
    actor: Principal,
    index: int,
    raw: dict[str, Any],
    name: str,
    existing: Schedule | None,
    now: datetime,
) -> _Item:
    expected = raw.get("version")
    if expected is not None and (existing is None or existing.version != expected):
        current = f"it is now {existing.version}" if existing else "there is no such schedule"
        raise VersionConflict(
            f"schedules[{index}].version: {name!r} was changed concurrently: you sent "
            f"version {expected}, {current}; export again and retry",
            detail={f"schedules[{index}].version": [current]},
        )
    schedule_id = existing.id if existing is not None else uuid.uuid4()
    data = definition_filled(raw)
    depends_on = sorted(set(data.pop("depends_on")))
    try:
        # The validation of schedule_create / schedule_update (depends_on is resolved by
        # name below, and validated again by the service with ids).
        spec = clean_schedule(
            tenant=actor.tenant, data=data, schedule_id=schedule_id, existing=existing
        )
    except InvalidSchedule as exc:
        raise at_item(index, exc) from None
    wanted = Schedule(id=schedule_id, tenant=actor.tenant)
    store_definition(wanted, spec)
    after = definition_with(wanted, depends_on)
    for key in (k for k in LINKED_FIELDS if k != "depends_on"):
        if key in after:  # links an unsaved schedule cannot have yet: as the file says
            after[key] = list(data.get(key) or [])
    item = _Item(index, raw, name, existing, schedule_id, depends_on, Change(name, "unchanged"))
    if existing is None:
        item.change = Change(name, "create")  # its next runs: once created (_carry_out)
        item.definition_changed = True
        item.pause = True if raw.get("paused") else None
        return item
    before = definition_of(existing)
    fields = {k: {"before": before[k], "after": v} for k, v in after.items() if before[k] != v}
    item.definition_changed = bool(fields)
    paused = raw.get("paused")
    if paused is not None and paused != existing.paused:
        item.pause = bool(paused)
        fields["paused"] = {"before": existing.paused, "after": bool(paused)}
    runs = _next_runs(existing, now)
    item.change = Change(
        name,
        "update" if fields else "unchanged",
        existing.id,
        existing.version,
        fields,
        next_before=runs,
        next_after=runs,
    )
    return item


def _check_upstreams(
    *, tenant_id: Any, items: list[_Item], pruned: set[str]
) -> dict[str, uuid.UUID]:
    """Every depends_on name is a definition of the file or a live schedule of the
    tenant that this apply keeps; returns the ids of the latter by name."""
    in_file = {item.name for item in items}
    wanted = {n for item in items for n in item.depends_on} - in_file
    found = dict(
        Schedule.objects.filter(
            tenant_id=tenant_id, deleted_at__isnull=True, name__in=wanted
        ).values_list("name", "id")
    )
    for item in items:
        if len(item.depends_on) > 20:
            raise InvalidSchedule.field(
                f"schedules[{item.index}].depends_on", "at most 20 upstream schedules"
            )
        for upstream in item.depends_on:
            if upstream in in_file:
                continue
            if upstream in pruned:
                raise InvalidSchedule.field(
                    f"schedules[{item.index}].depends_on",
                    f"{upstream!r} is not in the file, so prune would delete it",
                )
            if upstream not in found:
                raise InvalidSchedule.field(
                    f"schedules[{item.index}].depends_on",
                    f"no schedule named {upstream!r} in the file or the tenant",
                )
    return found


def _upstreams_first(items: list[_Item]) -> list[_Item]:
    """The items in request order, except that an item comes after the items of the
    file it depends on (they may be created by this apply). A cycle inside the file
    is a 400 naming the item that closes it. Iterative: a chain of 1,000 is no
    deeper for Python than a chain of two."""
    by_name = {item.name: item for item in items}

    def upstreams(item: _Item) -> list[_Item]:
        return [by_name[n] for n in item.depends_on if n in by_name]

    order: list[_Item] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: placed
    for root in items:
        if root.name in state:
            continue
        state[root.name] = 1
        path = [root]
        pending = [iter(upstreams(root))]
        while pending:
            upstream = next(pending[-1], None)
            if upstream is None:
                done = path.pop()
                pending.pop()
                state[done.name] = 2
                order.append(done)
            elif state.get(upstream.name) == 1:
                names = [i.name for i in path[path.index(upstream) :]] + [upstream.name]
                raise InvalidSchedule.field(
                    f"schedules[{upstream.index}].depends_on",
                    f"dependency cycle in the file: {' -> '.join(names)}",
                )
            elif upstream.name not in state:
                state[upstream.name] = 1
                path.append(upstream)
                pending.append(iter(upstreams(upstream)))
    return order


def _carry_out(
    actor: Principal, item: _Item, ids: dict[str, uuid.UUID], now: datetime, *, dry_run: bool
) -> None:
    if not item.definition_changed and item.pause is None:
        return
    data = definition_filled(item.raw)
    data["depends_on"] = [str(ids[n]) for n in item.depends_on]
    try:
        if item.existing is None:
            schedule = schedule_create(actor=actor, data=data, schedule_id=item.schedule_id)
        elif item.definition_changed:
            for key in LINKED_FIELDS:
                if key not in item.change.fields:
                    # Unchanged links stay as they are (set again, they would re-plan for nothing).
                    data.pop(key, None)
            schedule = schedule_update(
                actor=actor,
                schedule_id=item.schedule_id,
                data=data,
                expected_version=item.existing.version,
            )
        else:
            schedule = item.existing
        if item.pause is True:
            schedule = schedule_pause(actor=actor, schedule_id=schedule.id, reason=PAUSE_REASON)
        elif item.pause is False:
            schedule = schedule_resume(actor=actor, schedule_id=schedule.id)
    except QuotaExceeded as exc:
        raise QuotaExceeded(
            f"schedules[{item.index}]: {exc.message}; nothing was applied",
            detail={f"schedules[{item.index}]": [exc.message]},
        ) from None
    except InvalidSchedule as exc:
        raise at_item(item.index, exc) from None
    item.change.id = None if dry_run and item.existing is None else schedule.id
    item.change.version = schedule.version
    if item.definition_changed:
        item.change.next_after = _next_runs(schedule, now)


def _version_of(schedule_id: uuid.UUID) -> int:
    return int(Schedule.objects.values_list("version", flat=True).get(pk=schedule_id))
