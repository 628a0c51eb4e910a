"""Semantic validation of schedule definitions, shared by the API and the console.

Shape and types are the caller's job (serializer or form); this checks meaning —
cron and timezone, target, policies, dependencies — and raises InvalidSchedule
naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from django.conf import settings

from dispatch import concurrency_keys, lifecycle
from dispatch.exceptions import InvalidSchedule
from dispatch.models import DurationClass, Misfire, Overlap, Priority, Schedule
from dispatch.targets import clean_target
from dispatch.timing import cron, retry
from tenants import naming
from tenants.models import Tenant

RETRY_KEYS = {"max_attempts", "backoff", "initial_s", "max_s"}
MAX_ATTEMPTS = 100
MAX_JITTER_S = 3600
MAX_GRACE_S = 7 * 24 * 3600
# One cron spec as the column held it before specs; the whole timing text: 20 of them and bounds.
MAX_SPEC_LENGTH = 200
MAX_TIMING_LENGTH = 5000
_TICK = timedelta(microseconds=1)
# The choices, listed once: a TextChoices' `.values` builds a new list on every read
# (four per schedule validated, 4,000 per 1,000-job batch).
PRIORITIES = tuple(Priority.values)
DURATIONS = tuple(DurationClass.values)
OVERLAPS = tuple(Overlap.values)
MISFIRES = tuple(Misfire.values)


class FieldErrors:
    """Every field error of a definition at once, in the one error shape: each check
    runs in `check()`; what it raises is kept and the next check runs; `raise_any()`
    raises them together (`detail`: each field with its reasons, the message listing
    them). A check that needs an earlier field's value is skipped while that field is
    wrong: its error would only repeat the first."""

    def __init__(self) -> None:
        self.detail: dict[str, list[str]] = {}

    # A context manager of its own rather than @contextmanager: a definition runs some
    # fifteen checks, and a batch validates 1,000 definitions per request.
    def check(self) -> FieldErrors:
        return self

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> bool:
        if not isinstance(exc, InvalidSchedule):
            return False
        for name, reasons in (exc.detail or {"definition": [exc.message]}).items():
            self.detail.setdefault(name, []).extend(str(r) for r in reasons)
        return True

    def wrong(self, *names: str) -> bool:
        return any(name in self.detail for name in names)

    def raise_any(self) -> None:
        if self.detail:
            message = "; ".join(
                f"{name}: {reason}" for name, reasons in self.detail.items() for reason in reasons
            )
            raise InvalidSchedule(message, detail=self.detail)


@dataclass
class ScheduleSpec:
    """A validated, normalised definition, ready to be stored."""

    values: dict[str, Any] = field(default_factory=dict)
    depends_on: list[Schedule] | None = None


def clean_retry(value: Any) -> dict[str, Any]:
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise InvalidSchedule.field("retry", "must be an object")
    unknown = sorted(set(value) - RETRY_KEYS)
    if unknown:
        raise InvalidSchedule.field(f"retry.{unknown[0]}", "unknown field")
    out: dict[str, Any] = dict(retry.DEFAULT_POLICY)
    for key in ("max_attempts", "initial_s", "max_s"):
        if key in value:
            v = value[key]
            low = 1 if key == "max_attempts" else 0
            high = MAX_ATTEMPTS if key == "max_attempts" else 24 * 3600
            if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
                raise InvalidSchedule.field(
                    f"retry.{key}", f"must be a whole number in {low}..{high}"
                )
            out[key] = v
    if "backoff" in value:
        if value["backoff"] not in ("exponential", "fixed"):
            raise InvalidSchedule.field("retry.backoff", "must be 'exponential' or 'fixed'")
        out["backoff"] = value["backoff"]
    if out["max_s"] < out["initial_s"]:
        raise InvalidSchedule.field("retry.max_s", "must be at least initial_s")
    return out


def _choice(data: dict[str, Any], key: str, choices: tuple[str, ...], default: str) -> str:
    value = data.get(key, default)
    if value not in choices:
        raise InvalidSchedule.field(key, f"must be one of {', '.join(choices)}")
    return str(value)


def _int(data: dict[str, Any], key: str, default: int, low: int, high: int) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidSchedule.field(key, f"must be a whole number in {low}..{high}")
    return int(value)


def clean_schedule(
    *, tenant: Tenant, data: dict[str, Any], schedule_id: UUID, existing: Schedule | None = None
) -> ScheduleSpec:
    """Validate a full definition (create) or a partial one merged over `existing` (update)."""
    merged: dict[str, Any] = {}
    if existing is not None:
        merged = {
            "name": existing.name,
            "cron": existing.cron or None,
            "run_at": existing.run_at,
            "timezone": existing.timezone,
            "target": existing.target,
            "retry": existing.retry,
            "priority": existing.priority,
            "duration": existing.duration_class,
            "concurrency": existing.overlap,
            "misfire": existing.misfire,
            "misfire_grace_s": existing.misfire_grace_s,
            "catch_up_limit": existing.catch_up_limit,
            "jitter_s": existing.jitter_s,
            "max_runs": existing.max_runs,
            "delete_after": existing.delete_after,
            "concurrency_key": concurrency_keys.definition(existing.concurrency_key),
        }
    merged.update(data)
    values: dict[str, Any] = {}
    errors = FieldErrors()
    with errors.check():
        values["name"] = _clean_name(merged.get("name"))
    tz = merged.get("timezone") or "UTC"
    with errors.check():
        try:
            cron.get_zone(tz)
        except cron.CronError as exc:
            raise InvalidSchedule.field("timezone", exc.message) from None
        values["timezone"] = tz
    # The timing is checked in UTC when the zone is wrong: a bad cron is said too.
    with errors.check():
        values.update(
            _clean_when(
                data, merged, existing, "UTC" if errors.wrong("timezone") else tz, schedule_id
            )
        )
    with errors.check():
        target = clean_target(merged.get("target"), tenant=tenant)
        values["target"] = target
        values["timeout_s"] = target["timeout_s"]
    with errors.check():
        values["retry"] = clean_retry(merged.get("retry"))
    with errors.check():
        values["priority"] = _choice(merged, "priority", PRIORITIES, Priority.DEFAULT)
    with errors.check():
        values["duration_class"] = _choice(merged, "duration", DURATIONS, DurationClass.SHORT)
    with errors.check():
        values["overlap"] = _choice(merged, "concurrency", OVERLAPS, Overlap.FORBID)
    with errors.check():
        values["misfire"] = _choice(merged, "misfire", MISFIRES, Misfire.SKIP)
    with errors.check():
        values["misfire_grace_s"] = _int(
            merged, "misfire_grace_s", settings.DEFAULT_MISFIRE_GRACE_S, 0, MAX_GRACE_S
        )
    with errors.check():
        values["catch_up_limit"] = _int(merged, "catch_up_limit", 10, 1, settings.MAX_CATCH_UP)
    with errors.check():
        values["jitter_s"] = _int(merged, "jitter_s", 0, 0, MAX_JITTER_S)
    if "kind" in values:  # a lifecycle bound means something for one kind only
        with errors.check():
            values["max_runs"] = lifecycle.clean_max_runs(
                merged.get("max_runs"), kind=values["kind"]
            )
        with errors.check():
            values["delete_after"] = lifecycle.clean_delete_after(
                merged.get("delete_after"), kind=values["kind"]
            )
    if "name" in values and "target" in values:
        with errors.check():
            # Rendered now, from the definition as it will be stored (see concurrency_keys).
            values["concurrency_key"] = concurrency_keys.clean(
                merged.get("concurrency_key"), name=values["name"], target=values["target"]
            )
    spec = ScheduleSpec(values=values)
    if "depends_on" in data:
        with errors.check():
            spec.depends_on = clean_dependencies(
                tenant=tenant, ids=data["depends_on"], schedule_id=schedule_id
            )
    errors.raise_any()
    return spec


def _clean_name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip():
        raise InvalidSchedule.field("name", "is required")
    if len(name) > 200 or any(ord(c) < 32 for c in name):
        raise InvalidSchedule.field("name", "must be at most 200 printable characters")
    # U+202E and zero-width characters make one name look like another in lists.
    invisible = naming.invisible_char(name)
    if invisible:
        raise InvalidSchedule.field(
            "name", f"must not contain bidi controls or invisible characters (found {invisible})"
        )
    return name.strip()


def _clean_when(
    data: dict[str, Any],
    merged: dict[str, Any],
    existing: Schedule | None,
    tz: str,
    schedule_id: UUID,
) -> dict[str, Any]:
    """kind, cron and run_at: recurring (cron or specs) or one-off (run_at)."""
    given_specs = data.get("specs") is not None
    if given_specs and data.get("cron") is not None:
        raise InvalidSchedule.field("specs", "give either 'cron' or 'specs', not both")
    expr, run_at = merged.get("cron"), merged.get("run_at")
    if given_specs:
        expr = expr or "specs"  # recurring; the text is built by clean_timing below
    if existing is not None and (data.get("cron") is not None or given_specs):
        run_at = None
    if existing is not None and "run_at" in data and data["run_at"] is not None:
        expr = None
    if bool(expr) == bool(run_at):
        raise InvalidSchedule.field(
            "cron", "give exactly one of 'cron' (recurring) or 'run_at' (one-off)"
        )
    if existing is not None and (bool(expr) != (existing.kind == "cron")):
        raise InvalidSchedule.field(
            "cron" if expr else "run_at", "a schedule cannot change between cron and one-off"
        )
    if expr:
        text = clean_timing(data=data, existing=existing, tz=tz, seed=str(schedule_id))
        return {"kind": "cron", "cron": text, "run_at": None}
    for key in ("start_at", "end_at"):
        if data.get(key) is not None:
            raise InvalidSchedule.field(key, "applies to recurring schedules only")
    if not isinstance(run_at, datetime) or run_at.tzinfo is None:
        raise InvalidSchedule.field(
            "run_at", "must be an ISO 8601 instant with a zone, e.g. 2026-09-26T09:00:00Z"
        )
    return {"kind": "once", "cron": "", "run_at": run_at}


def _clean_spec(index: int, item: Any, tz: str, seed: str) -> cron.Spec:
    where = f"specs[{index}]"
    if not isinstance(item, dict):
        raise InvalidSchedule.field(where, 'must be an object: {"cron"} or {"every", "anchor"}')
    unknown = sorted(set(item) - {"cron", "every", "anchor"})
    if unknown:
        raise InvalidSchedule.field(f"{where}.{unknown[0]}", "unknown field")
    if "cron" in item:
        if "every" in item or "anchor" in item:
            raise InvalidSchedule.field(where, "give either 'cron' or 'every' (with 'anchor')")
        expr = item["cron"]
        if not isinstance(expr, str) or len(expr) > MAX_SPEC_LENGTH:
            raise InvalidSchedule.field(
                f"{where}.cron",
                f"must be a cron expression of at most {MAX_SPEC_LENGTH} characters",
            )
        if "|" in expr or expr.strip().startswith("every "):
            raise InvalidSchedule.field(f"{where}.cron", "must be one cron expression")
        try:
            cron.validate(expr, tz, seed=seed)
        except cron.CronError as exc:
            raise InvalidSchedule.field(f"{where}.cron", exc.message) from None
        return cron.Spec(cron=" ".join(expr.split()))
    if "every" not in item:
        raise InvalidSchedule.field(where, "needs 'cron', or 'every' with 'anchor'")
    try:
        cron.parse_every(item["every"])
    except cron.CronError as exc:
        raise InvalidSchedule.field(f"{where}.every", exc.message) from None
    if "anchor" not in item:
        raise InvalidSchedule.field(
            f"{where}.anchor",
            "is required: the local wall time the interval counts from, e.g. 2026-01-01T00:00:00",
        )
    try:
        cron.parse_anchor(item["anchor"])
    except cron.CronError as exc:
        raise InvalidSchedule.field(f"{where}.anchor", exc.message) from None
    return cron.Spec(every=str(item["every"]).strip(), anchor=str(item["anchor"]).strip())


def _bound(data: dict[str, Any], key: str, current: datetime | None) -> datetime | None:
    if key not in data:
        return current
    value = data[key]
    if value is not None and (not isinstance(value, datetime) or value.tzinfo is None):
        raise InvalidSchedule.field(
            key, "must be an ISO 8601 instant with a zone, e.g. 2026-12-01T00:00:00Z"
        )
    return value


def clean_timing(*, data: dict[str, Any], existing: Schedule | None, tz: str, seed: str) -> str:
    """A recurring schedule's timing text (dispatch/timing/cron.py): its specs, from
    `cron` (one spec, or a whole timing text a client read back) or `specs`, and its
    `start_at`/`end_at`, each merged over `existing`. 400 naming the field otherwise."""
    specs: list[cron.Spec] = []
    start_at = end_at = None
    if existing is not None and existing.cron:
        specs, start_at, end_at = cron.decompose(existing.cron)
    field = "cron"
    if data.get("specs") is not None:
        raw, field = data["specs"], "specs"
        if not isinstance(raw, list) or not 1 <= len(raw) <= cron.MAX_SPECS:
            raise InvalidSchedule.field("specs", f"must be a list of 1 to {cron.MAX_SPECS} specs")
        specs = [_clean_spec(i, item, tz, seed) for i, item in enumerate(raw)]
    elif data.get("cron") is not None:
        expr = data["cron"]
        try:
            cron.validate(expr, tz, seed=seed)
        except cron.CronError as exc:
            raise InvalidSchedule.field("cron", exc.message) from None
        # A timing text read back from `cron` (an old client's round trip) is taken whole.
        specs, text_start, text_end = cron.decompose(expr.strip())
        if text_start is not None or text_end is not None:
            start_at, end_at = text_start, text_end
    start_at = _bound(data, "start_at", start_at)
    end_at = _bound(data, "end_at", end_at)
    if start_at is not None and end_at is not None and end_at <= start_at:
        raise InvalidSchedule.field("end_at", "must be after start_at")
    text = cron.compose(specs, start_at=start_at, end_at=end_at)
    if len(text) > MAX_TIMING_LENGTH:
        raise InvalidSchedule.field(field, f"is too long (at most {MAX_TIMING_LENGTH} characters)")
    try:
        cron.validate(text, tz, seed=seed)
    except cron.CronError as exc:
        raise InvalidSchedule.field(field, exc.message) from None
    changed = existing is None or existing.cron != text or existing.timezone != tz
    if changed and end_at is not None:
        # A schedule is not created (or re-timed) to never run; one that ends later is fine.
        now = datetime.now(UTC)
        try:
            cron.next_after(text, tz, after=max(now, start_at or now) - _TICK, seed=seed)
        except cron.CronError as exc:
            raise InvalidSchedule.field(
                "end_at", f"the schedule would never run: {exc.message}"
            ) from None
    return text


def clean_dependencies(*, tenant: Tenant, ids: Any, schedule_id: UUID) -> list[Schedule]:
    if not isinstance(ids, list) or len(ids) > 20:
        raise InvalidSchedule.field("depends_on", "must be a list of at most 20 schedule ids")
    wanted: list[UUID] = []
    for raw in ids:
        try:
            wanted.append(UUID(str(raw)))
        except ValueError:
            raise InvalidSchedule.field("depends_on", f"{raw!r} is not a schedule id") from None
    if schedule_id in wanted:
        raise InvalidSchedule.field("depends_on", "a schedule cannot depend on itself")
    found = list(Schedule.objects.filter(tenant=tenant, deleted_at__isnull=True, id__in=wanted))
    missing = set(wanted) - {s.id for s in found}
    if missing:
        raise InvalidSchedule.field(
            "depends_on", f"no such schedule: {sorted(map(str, missing))[0]}"
        )
    # Refuse cycles: walk upstream from the new dependencies; reaching this
    # schedule again would make each wait for the other forever.
    frontier = {s.id for s in found}
    seen: set[UUID] = set()
    while frontier:
        if schedule_id in frontier:
            raise InvalidSchedule.field("depends_on", "would create a dependency cycle")
        seen |= frontier
        frontier = (
            set(
                Schedule.depends_on.through.objects.filter(
                    from_schedule_id__in=frontier
                ).values_list("to_schedule_id", flat=True)
            )
            - seen
        )
    return found
