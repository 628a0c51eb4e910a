"""Cron expressions: parsing, Jenkins ``H`` hashing and DST-correct occurrences.

This is the only module that imports croniter. Everything here is a pure
function over aware UTC datetimes; nothing touches Django or the database.

DST policy
----------
Schedules are evaluated in local wall-clock time of their IANA zone, and every
result is an aware UTC instant. A wall-clock time that does not exist because
the clocks spring forward runs once, at the first instant after the gap (in
Europe/Amsterdam ``30 2 * * *`` runs at 03:00 CEST on the spring-forward day).
A wall-clock time that occurs twice because the clocks fall back runs once, at
its first occurrence, unless the hour field as written starts with ``*`` (``*``,
``*/2``): such schedules are "every so many hours" and run in both real hours.
A hashed hour (``H``) counts as a fixed hour. Occurrences that land on the same
instant run once, so ``0 * * * *`` runs 23 times on a spring-forward day and 25
times on a fall-back day. Zone rules are those in force on the date in
question, so zones that abolished DST behave as they did at the time.

Implementation note: croniter is only ever given *naive* wall-clock datetimes.
With aware datetimes it fires a fixed ``30 2 * * *`` twice on a fall-back day;
mapping wall-clock times to UTC is done here instead.
"""

from __future__ import annotations

import hashlib
import heapq
import re
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from itertools import islice
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from cron_descriptor import get_description
from croniter import (  # type: ignore[import-untyped]  # no stubs in the project
    CroniterBadDateError,
    croniter,
)

# Relative: this package is also the Python client's `scheduler_client.timing` (a symlink).
from .calendars import SEARCH_DAYS, DateFilter
from .durations import spell

__all__ = [
    "MISFIRE_POLICIES",
    "PREVIEW_MAX",
    "CronError",
    "DateFilter",
    "DstCase",
    "Excluded",
    "MisfirePlan",
    "Occurrence",
    "Spec",
    "TransitionEffect",
    "WouldRun",
    "bounds",
    "compose",
    "decompose",
    "describe",
    "effective_seed",
    "excluded_between",
    "get_zone",
    "jitter_seconds",
    "next_after",
    "next_or_none",
    "next_transition",
    "occurrences_between",
    "parse_anchor",
    "parse_every",
    "plan_misfire",
    "preview",
    "resolve",
    "transition_effect",
    "validate",
    "would_run_at",
]

PREVIEW_MAX = 1000
# The two DST cases a wall time can fall in (WouldRun.dst).
DstCase = Literal["gap", "fold"]
MISFIRE_POLICIES = ("skip", "run_once", "catch_up")
MAX_EXPRESSION_LENGTH = 1000
PREVIOUS_LOOKBACK = timedelta(days=400)
MIN_YEAR, MAX_YEAR = 1900, 9000

_FIELD_NAMES = ("minute", "hour", "day of month", "month", "day of week")
# (lowest, highest accepted, highest meant by "*"): day of week accepts 7 for Sunday.
_BOUNDS = ((0, 59, 59), (0, 23, 23), (1, 31, 31), (1, 12, 12), (0, 7, 6))
# H in day of month stays within 1-28 (as in Jenkins) so it exists in every month.
_HASH_BOUNDS = ((0, 59), (0, 23), (1, 28), (1, 12), (0, 6))
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_WEEKDAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_MONTH_LONG = (
    "January", "February", "March", "April", "May", "June", "July",
    "August", "September", "October", "November", "December",
)  # fmt: skip
# Longest a day of month can be, leap years included: 29 February is valid.
_MONTH_MAX_DAY = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_ATOM = r"(?:\d+|[A-Za-z]+)"
_PLAIN_RE = re.compile(
    rf"^(?:(?P<star>\*)|(?P<lo>{_ATOM})(?:-(?P<hi>{_ATOM}))?)(?:/(?P<step>\d+))?$", re.ASCII
)
_HASH_RE = re.compile(r"^[Hh](?:\((?P<lo>\d+)-(?P<hi>\d+)\))?(?:/(?P<step>\d+))?$", re.ASCII)
_PRINTABLE_RE = re.compile(r"^[\x20-\x7e\t]*$", re.ASCII)

_MINUTE = timedelta(minutes=1)
_SECOND = timedelta(seconds=1)
_TICK = timedelta(microseconds=1)
_DAY = timedelta(days=1)


class CronError(ValueError):
    """Invalid schedule input; ``message`` is a sentence fit to show a user."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class Occurrence:
    scheduled_for: datetime  # nominal instant, aware UTC
    local: datetime  # the same instant in the schedule's zone (fold set correctly)
    due_at: datetime  # scheduled_for + jitter
    note: str | None  # DST annotation, None on ordinary days


@dataclass(frozen=True)
class MisfirePlan:
    fire: list[datetime]
    skipped: list[datetime]
    skipped_total: int
    next_run_at: datetime | None


@dataclass(frozen=True)
class WouldRun:
    at: datetime
    is_occurrence: bool
    scheduled_for: datetime | None
    previous: datetime | None
    next: datetime | None
    note: str | None
    # Which DST case `note` describes: "gap" (a wall time the clocks skipped, run at
    # the gap's end), "fold" (a wall time that occurs twice), None on ordinary times.
    dst: DstCase | None = None
    # An occurrence of the expression that does not run because a calendar excludes
    # its local date: the reason ("excluded by calendar 'NL holidays': ...").
    excluded: str | None = None
    # A spec's occurrence outside the schedule's bounds: "before start_at ...",
    # "at or after end_at ..."; None inside them.
    outside: str | None = None
    # Which spec gives the occurrence at `at` ("spec 2: every 1h30m from ..."), for a
    # schedule of several specs or an interval; None for a plain cron or no occurrence.
    spec: str | None = None


@dataclass(frozen=True)
class TransitionEffect:
    """The zone's next clock change and what it does to one schedule."""

    at: datetime  # the first instant on the new offset, aware UTC
    shift: timedelta  # positive: the clocks go forward
    note: str | None  # the DST note of the run it affects (as the preview words it), or None
    text: str  # the whole sentence, e.g. "On 2027-03-28 at 02:00 CET the clocks go forward ..."


@dataclass(frozen=True)
class Excluded:
    scheduled_for: datetime  # the occurrence the expression gives, aware UTC
    local: datetime
    reason: str


@dataclass(frozen=True)
class _Schedule:
    source: str
    resolved: str
    hashed: bool
    minutes: frozenset[int]
    hours: frozenset[int]
    doms: frozenset[int]
    months: frozenset[int]
    dows: frozenset[int]
    dom_any: bool
    dow_any: bool
    day_or: bool
    hour_star: bool
    croniter_expr: str
    times_of_day: tuple[int, ...]


# --------------------------------------------------------------------------- zones


@lru_cache(maxsize=1)
def _zone_names() -> frozenset[str]:
    # "localtime" is the host's own setting, not an IANA name: a schedule must not
    # change meaning when it moves to another machine.
    return frozenset(available_timezones()) - {"localtime"}


def get_zone(name: str) -> ZoneInfo:
    """The IANA zone called ``name``; CronError if it is empty or unknown."""
    if not isinstance(name, str) or not name.strip():
        raise CronError("timezone is empty")
    if name not in _zone_names():
        raise CronError(f"unknown timezone {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise CronError(f"unknown timezone {name!r}") from None


# --------------------------------------------------------------------------- parsing


def _hash(seed: str, *parts: object) -> int:
    # sha256 rather than hash(): the value must survive restarts and
    # PYTHONHASHSEED, or every schedule would move on each deploy.
    key = "\x00".join([seed, *map(str, parts)]).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big")


_QUARTZ_RE = re.compile(r"^(?:\d*[LlWw]|[Ll][Ww]?|[Ll]-\d+)$|[#?]", re.ASCII)


def _unsupported_hint(item: str) -> str:
    # Quartz/croniter extensions are the likeliest reason a field fails to parse,
    # and croniter itself would accept them, so say so instead of "cannot parse".
    if _QUARTZ_RE.search(item):
        return " (L, W, # and ? are not supported; use standard cron syntax or H)"
    return ""


def _number(index: int, token: str) -> int:
    name = _FIELD_NAMES[index]
    lo, hi, _ = _BOUNDS[index]
    if token.isdigit():
        # Cap the digits before int(): the value is out of range anyway and a huge
        # string would hit the interpreter's int-conversion limit.
        if len(token) > 4:
            raise CronError(f"field '{name}': {token[:6]}... is out of range {lo}-{hi}")
        value = int(token)
    else:
        names = _MONTHS if index == 3 else _WEEKDAYS if index == 4 else None
        if names is None:
            raise CronError(f"field '{name}': '{token}' is not a number{_unsupported_hint(token)}")
        upper = token.upper()
        if upper not in names:
            kind = "month" if index == 3 else "weekday"
            raise CronError(
                f"field '{name}': unknown {kind} name '{token}'{_unsupported_hint(token)}"
            )
        value = names.index(upper) + (1 if index == 3 else 0)
    if not lo <= value <= hi:
        raise CronError(f"field '{name}': {value} is out of range {lo}-{hi}")
    return value


def _step(index: int, token: str, span: int) -> int:
    name = _FIELD_NAMES[index]
    step = int(token) if len(token) <= 4 else span + 1
    if step < 1:
        raise CronError(f"field '{name}': step must be at least 1")
    if step > span:
        # */90 in the minute field does not mean "every 90 minutes": steps never
        # carry into the next hour, so refuse rather than silently run hourly.
        raise CronError(
            f"field '{name}': step {token} is larger than the field's range ({span} values)"
        )
    return step


def _parse_item(index: int, item: str, seed: str) -> tuple[set[int], str, bool]:
    """Values, resolved text and whether H was used, for one list item."""
    name = _FIELD_NAMES[index]
    lo_b, _, star_hi = _BOUNDS[index]
    if not item:
        raise CronError(f"field '{name}': empty item in a list")
    m = _HASH_RE.match(item)
    if m:
        if m["lo"] is not None:
            lo, hi = _number(index, m["lo"]), _number(index, m["hi"])
            if lo > hi:
                raise CronError(f"field '{name}': range in '{item}' runs backwards")
        else:
            lo, hi = _HASH_BOUNDS[index]
        h = _hash(seed, index)
        if m["step"] is None:
            value = lo + h % (hi - lo + 1)
            return {value}, str(value), True
        step = _step(index, m["step"], hi - lo + 1)
        start = lo + h % step
        text = f"{start}-{hi}/{step}" if start + step <= hi else str(start)
        return set(range(start, hi + 1, step)), text, True
    if item[0] in "Hh":
        raise CronError(
            f"field '{name}': cannot parse '{item}' (hashed forms are H, H/n, H(a-b) and H(a-b)/n)"
        )
    m = _PLAIN_RE.match(item)
    if not m:
        raise CronError(f"field '{name}': cannot parse '{item}'{_unsupported_hint(item)}")
    if m["star"]:
        lo, hi = lo_b, star_hi
    else:
        lo = _number(index, m["lo"])
        if m["hi"] is not None:
            hi = _number(index, m["hi"])
            if lo > hi:
                raise CronError(
                    f"field '{name}': range '{item}' runs backwards (start must not be after end)"
                )
        elif m["step"] is not None:
            hi = max(star_hi, lo)  # "5/15" means 5-59/15, as in croniter and cronie
        else:
            hi = lo
    step = 1 if m["step"] is None else _step(index, m["step"], star_hi - lo_b + 1)
    return set(range(lo, hi + 1, step)), item, False


def _join(words: list[str], conj: str) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} {conj} {words[-1]}"


def _field_text(values: frozenset[int], full: bool) -> str:
    return "*" if full else ",".join(map(str, sorted(values)))


def effective_seed(expr: str, seed: str) -> str:
    """The part of a schedule's seed its expression depends on: the seed only resolves
    `H`, so an expression without one is the same for every schedule ("": a burst of
    100,000 `0 * * * *` schedules, each its own seed, compiles and plans once)."""
    if isinstance(expr, str) and "H" not in expr and "h" not in expr:
        return ""
    return seed


def _compile(expr: str, seed: str) -> _Schedule:
    return _compile_seeded(expr, effective_seed(expr, seed))


@lru_cache(maxsize=4096)
def _compile_seeded(expr: str, seed: str) -> _Schedule:
    if not isinstance(expr, str):
        raise CronError("expression must be text")
    if not isinstance(seed, str):
        raise CronError("seed must be text")
    if "\x00" in expr:
        raise CronError("expression contains a NUL byte")
    # Only ASCII blanks are trimmed: a stray no-break space is reported, not hidden.
    source = expr.strip(" \t\r\n")
    if not source:
        raise CronError("expression is empty")
    if len(source) > MAX_EXPRESSION_LENGTH:
        raise CronError(f"expression is too long (at most {MAX_EXPRESSION_LENGTH} characters)")
    if not _PRINTABLE_RE.match(source):
        bad = next(c for c in source if not ("\x20" <= c <= "\x7e" or c == "\t"))
        raise CronError(f"expression contains an unsupported character {bad!r}")
    fields = source.split()
    if fields[0].startswith("@"):
        macro = fields[0].lower()
        if macro == "@reboot":
            raise CronError(
                "'@reboot' is not supported: schedules fire on time, not on process start"
            )
        if macro not in _MACROS:
            raise CronError(f"unknown macro '{fields[0]}' (use one of {', '.join(_MACROS)})")
        if len(fields) > 1:
            raise CronError(f"'{fields[0]}' stands alone: it cannot be followed by other fields")
        fields = _MACROS[macro].split()
    if len(fields) != 5:
        extra = {
            6: "; a seconds field is not supported",
            7: "; seconds and year fields are not supported",
        }
        raise CronError(
            f"expected 5 fields (minute hour day-of-month month day-of-week), got {len(fields)}"
            + extra.get(len(fields), "")
        )

    sets: list[frozenset[int]] = []
    texts: list[str] = []
    hashed = False
    for index, text in enumerate(fields):
        values: set[int] = set()
        parts: list[str] = []
        for item in text.split(","):
            item_values, item_text, item_hashed = _parse_item(index, item, seed)
            values |= item_values
            parts.append(item_text)
            hashed = hashed or item_hashed
        if index == 4 and 7 in values:
            values = (values - {7}) | {0}
        sets.append(frozenset(values))
        texts.append(",".join(parts))
    minutes, hours, doms, months, dows = sets

    dom_any = doms == frozenset(range(1, 32))
    dow_any = dows == frozenset(range(7))
    feasible = any(d <= _MONTH_MAX_DAY[m - 1] for m in months for d in doms)
    if not feasible and dow_any:
        days = [str(d) for d in sorted(doms)]
        verb = "never occurs" if len(days) == 1 else "never occur"
        names = [_MONTH_LONG[m - 1] for m in sorted(months)]
        raise CronError(
            f"field 'day of month': {_join(days, 'and')} {verb} in {_join(names, 'or')}"
        )
    day_or = not dom_any and not dow_any
    if day_or and not feasible:
        # Under OR semantics an impossible day of month adds nothing, but croniter
        # would still search 50 years for it on every step; "*" is equivalent here.
        dom_any, day_or = True, False

    croniter_expr = " ".join(
        [
            _field_text(minutes, len(minutes) == 60),
            _field_text(hours, len(hours) == 24),
            _field_text(doms, dom_any),
            _field_text(months, len(months) == 12),
            _field_text(dows, dow_any),
        ]
    )
    return _Schedule(
        source=" ".join(source.split()),
        resolved=" ".join(texts),
        hashed=hashed,
        minutes=minutes,
        hours=hours,
        doms=doms,
        months=months,
        dows=dows,
        dom_any=dom_any,
        dow_any=dow_any,
        day_or=day_or,
        # Decided on the text as written: "*" and "*/2" mean "every so many hours"
        # and run in both copies of a repeated hour; H is a fixed (hashed) hour.
        hour_star=fields[1].startswith("*"),
        croniter_expr=croniter_expr,
        times_of_day=tuple(sorted(h * 60 + m for h in hours for m in minutes)),
    )


def validate(expr: str, tz: str, *, seed: str) -> None:
    """CronError unless ``expr`` is a supported expression (or timing text) that can
    match and ``tz`` a zone."""
    _timing(expr, seed)
    get_zone(tz)


def resolve(expr: str, *, seed: str) -> str:
    """The expression with macros expanded and H replaced by this schedule's values
    (of a timing text: each cron spec so, the rest as written)."""
    if not _is_timing(expr):
        return _compile(expr, seed).resolved
    timing = _timing(expr, seed)
    parts = [s.text if isinstance(s, _Interval) else s.resolved for s in timing.specs]
    parts += _bound_parts(timing)
    return SPEC_SEPARATOR.join(parts)


def _bound_parts(timing: _Timing) -> list[str]:
    out = []
    if timing.start is not None:
        out.append(f"start_at {_instant_text(timing.start)}")
    if timing.end is not None:
        out.append(f"end_at {_instant_text(timing.end)}")
    return out


def describe(expr: str, *, seed: str) -> str:
    """A human description (via cron-descriptor) of the resolved expression; of a
    timing text, each spec's description and the bounds, joined."""
    if _is_timing(expr):
        timing = _timing(expr, seed)
        texts = [
            f"{s.text} (elapsed time)"
            if isinstance(s, _Interval)
            else describe(s.source, seed=seed)
            for s in timing.specs
        ]
        text = "; or ".join(texts)
        if timing.start is not None:
            text += f"; from {_instant_text(timing.start)}"
        if timing.end is not None:
            text += f"; until (not including) {_instant_text(timing.end)}"
        return text
    sched = _compile(expr, seed)
    try:
        text = str(get_description(sched.resolved))
    except Exception:  # the description is cosmetic: never fail a valid schedule over it
        text = f"cron {sched.resolved}"
    if sched.hashed:
        return f"{text} ({sched.source} resolves to {sched.resolved} for this schedule)"
    return text


# --------------------------------------------------------------------------- wall clock


def _aware_utc(value: datetime, name: str) -> datetime:
    if not isinstance(value, datetime):
        raise TypeError(f"{name} must be a datetime")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware, got naive {value.isoformat()}")
    # Keeps the day arithmetic and 400-day lookbacks clear of datetime's limits.
    if not MIN_YEAR <= value.year <= MAX_YEAR:
        raise CronError(f"{name} must be between the years {MIN_YEAR} and {MAX_YEAR}")
    return value.astimezone(UTC)


def _offset(value: datetime) -> timedelta:
    off = value.utcoffset()
    if off is None:  # pragma: no cover - ZoneInfo always answers
        raise ValueError("zone gave no UTC offset")
    return off


def _local_naive(instant: datetime, zone: ZoneInfo) -> datetime:
    # fold=0: the wall-clock reading alone; which copy of a repeated hour is
    # meant is decided by the callers, never inherited.
    return instant.astimezone(zone).replace(tzinfo=None, fold=0)


_NORMAL, _FOLD, _GAP = 0, 1, 2


def _classify(local: datetime, zone: ZoneInfo) -> tuple[int, datetime, datetime]:
    """Kind of wall-clock time and its UTC reading with fold=0 and fold=1."""
    o0 = _offset(local.replace(tzinfo=zone, fold=0))
    o1 = _offset(local.replace(tzinfo=zone, fold=1))
    u0 = (local - o0).replace(tzinfo=UTC)
    if o0 == o1:
        return _NORMAL, u0, u0
    u1 = (local - o1).replace(tzinfo=UTC)
    # Both readings of a repeated time round-trip; neither reading of a skipped one does.
    if _local_naive(u0, zone) == local:
        return _FOLD, u0, u1
    return _GAP, u0, u1


@lru_cache(maxsize=4096)
def _gap_end(local: datetime, zone: ZoneInfo) -> datetime:
    """First instant after the spring-forward gap that swallowed ``local``."""
    _, u0, u1 = _classify(local, zone)
    # Before the transition every instant reads earlier than `local`, from it on
    # later, so bisect on that; tz transitions fall on whole seconds.
    lo, hi = u1, u0
    while hi - lo > _SECOND:
        mid = lo + timedelta(seconds=int((hi - lo).total_seconds()) // 2)
        if _local_naive(mid, zone) > local:
            hi = mid
        else:
            lo = mid
    return hi


def _matches(sched: _Schedule, local: datetime) -> bool:
    return (
        local.minute in sched.minutes
        and local.hour in sched.hours
        and _day_matches(sched, local.date())
    )


def _day_matches(sched: _Schedule, day: date) -> bool:
    if day.month not in sched.months:
        return False
    dom_ok = sched.dom_any or day.day in sched.doms
    dow_ok = sched.dow_any or (day.weekday() + 1) % 7 in sched.dows
    # Vixie cron: with both day fields restricted a day matching either counts.
    return (dom_ok or dow_ok) if sched.day_or else (dom_ok and dow_ok)


def _wall_matches(sched: _Schedule, start: datetime) -> Iterator[datetime]:
    """Matching naive wall-clock minutes at or after ``start``, ascending."""
    first = start.replace(second=0, microsecond=0)
    it = croniter(sched.croniter_expr, first - _MINUTE)
    while True:
        try:
            value: datetime = it.get_next(datetime)
        except (CroniterBadDateError, OverflowError):
            return  # no further match before year 9999
        yield value


def _instants(sched: _Schedule, local: datetime, zone: ZoneInfo) -> tuple[datetime, ...]:
    kind, u0, u1 = _classify(local, zone)
    if kind == _GAP:
        return (_gap_end(local, zone),)
    if kind == _FOLD and sched.hour_star:
        return (u0, u1)
    return (u0,)


def _iter_after(sched: _Schedule, zone: ZoneInfo, after: datetime) -> Iterator[datetime]:
    """Occurrences strictly after ``after`` (aware UTC), strictly increasing.

    Read with fold=0 (gaps moved to their end), wall-clock matches map to
    non-decreasing instants. The second copies of a repeated hour form another
    increasing run that belongs after all first copies and before the first
    time past the fold, so they wait in ``pending`` and are merged in.
    """
    local = _local_naive(after, zone)
    kind, u0, u1 = _classify(local, zone)
    # Inside a repeated hour, second copies of earlier wall times can still be
    # ahead of `after`: start the wall clock from the beginning of the fold.
    start = local - (u1 - u0) if kind == _FOLD else local
    pending: deque[datetime] = deque()
    last = after
    for wall in _wall_matches(sched, start):
        kind, u0, u1 = _classify(wall, zone)
        if kind == _GAP:
            first = _gap_end(wall, zone)
        else:
            first = u0
            if kind == _FOLD and sched.hour_star:
                pending.append(u1)
        while pending and pending[0] < first:
            later = pending.popleft()
            if later > last:
                yield later
                last = later
        if first > last:  # equal instants (a gap's end and the next time) fire once
            yield first
            last = first
    for later in pending:
        if later > last:
            yield later
            last = later


def _day_start(day: date, zone: ZoneInfo) -> datetime:
    """The first instant whose local date is ``day`` (a gap at midnight: its end)."""
    midnight = datetime.combine(day, time())
    kind, u0, _ = _classify(midnight, zone)
    return _gap_end(midnight, zone) if kind == _GAP else u0


def _iter_dates(
    sched: _Schedule, zone: ZoneInfo, after: datetime, dates: DateFilter | None
) -> Iterator[datetime]:
    """`_iter_after` without the occurrences whose local date ``dates`` excludes.

    An excluded date restarts the walk at the next allowed date's first instant,
    so a long exclusion costs one restart, not one step per occurrence. Bounded:
    an excluded occurrence more than SEARCH_DAYS after ``after`` ends the
    iteration (callers that need a next occurrence say it never fires).
    """
    if dates is None or dates.empty:
        yield from _iter_after(sched, zone, after)
        return
    last = _local_naive(after, zone).date() + timedelta(days=SEARCH_DAYS)
    cursor = after
    while True:
        for instant in _iter_after(sched, zone, cursor):
            day = _local_naive(instant, zone).date()
            if dates.allows(day):
                yield instant
                continue
            following = dates.next_allowed(day, last=last) if day < last else None
            if following is None:
                return
            cursor = max(cursor, _day_start(following, zone) - _TICK)
            break
        else:
            return


def _between(
    sched: _Schedule,
    zone: ZoneInfo,
    start: datetime,
    end: datetime,
    limit: int | None = None,
    dates: DateFilter | None = None,
) -> list[datetime]:
    if end <= start:
        return []
    return _up_to(_iter_dates(sched, zone, start, dates), end, limit)


def _up_to(instants: Iterator[datetime], end: datetime, limit: int | None) -> list[datetime]:
    """The ascending `instants` up to `end` (inclusive), at most `limit` of them."""
    out: list[datetime] = []
    for instant in instants:
        if instant > end or (limit is not None and len(out) >= limit):
            break
        out.append(instant)
    return out


# --------------------------------------------------------------------------- counting


@lru_cache(maxsize=65536)
def _steady_offset(zone: ZoneInfo, day: date) -> timedelta | None:
    """The zone's offset if it is the same all through ``day``, else None."""
    base = datetime.combine(day, time())
    offset: timedelta | None = None
    # Hourly probes of both folds catch any gap or fold: transitions that undo
    # themselves within an hour do not occur in tzdata.
    for hour in range(25):
        wall = base + timedelta(hours=hour)
        o0 = _offset(wall.replace(tzinfo=zone))
        if o0 != _offset(wall.replace(tzinfo=zone, fold=1)) or offset not in (None, o0):
            return None
        offset = o0
    return offset


# Small on purpose: an entry can hold a whole day of per-minute instants, and
# the cache only needs to serve the repeated counts of one misfire plan.
@lru_cache(maxsize=256)
def _day_instants(sched: _Schedule, zone: ZoneInfo, day: date) -> tuple[datetime, ...]:
    """Every instant produced by wall times on ``day`` (which must match the day fields)."""
    base = datetime.combine(day, time())
    found: set[datetime] = set()
    # The times of day are already expanded; walking them directly is much
    # cheaper than asking croniter for each one.
    for minute in sched.times_of_day:
        found.update(_instants(sched, base + timedelta(minutes=minute), zone))
    return tuple(sorted(found))


def _count(
    sched: _Schedule,
    zone: ZoneInfo,
    start: datetime,
    end: datetime,
    dates: DateFilter | None = None,
) -> int:
    """Number of occurrences o with start < o <= end, without listing them.

    Days with one steady offset are counted arithmetically from the times of
    day. Days with a transition are listed (cached); a gap's end can land on the
    next day's first matching time, so listed instants that a steady day has
    already counted are taken off again.
    """
    if end <= start:
        return 0
    first = _local_naive(start, zone).date() - _DAY
    last = _local_naive(end, zone).date() + _DAY
    start_wall, end_wall = start.replace(tzinfo=None), end.replace(tzinfo=None)
    listed: set[datetime] = set()
    total = 0
    day = first
    dates = None if dates is None or dates.empty else dates
    while day <= last:
        # An instant's local date is its wall day, so an excluded day's instants are
        # exactly the ones not counted here (listed ones are filtered below).
        if _day_matches(sched, day) and (dates is None or dates.allows(day)):
            offset = _steady_offset(zone, day)
            if offset is None:
                instants = _day_instants(sched, zone, day)
                listed.update(instants[bisect_right(instants, start) : bisect_right(instants, end)])
            else:
                base = datetime.combine(day, time())
                minute_us = 60_000_000
                lo = (start_wall + offset - base) // _TICK // minute_us + 1
                hi = (end_wall + offset - base) // _TICK // minute_us
                tod = sched.times_of_day
                if lo <= hi:
                    total += bisect_right(tod, hi) - bisect_left(tod, lo)
        day += _DAY
    if dates is not None:
        listed = {i for i in listed if dates.allows(_local_naive(i, zone).date())}
    for instant in listed:
        wall = _local_naive(instant, zone)
        if _steady_offset(zone, wall.date()) is not None and _matches(sched, wall):
            total -= 1
    return total + len(listed)


def _latest(
    sched: _Schedule,
    zone: ZoneInfo,
    start: datetime,
    end: datetime,
    k: int,
    dates: DateFilter | None = None,
) -> list[datetime]:
    """The last ``k`` occurrences in (start, end], ascending, listing about k."""
    if k <= 0 or end <= start:
        return []
    return _last_k(
        lambda lo: _count(sched, zone, lo, end, dates),
        lambda lo: _between(sched, zone, lo, end, dates=dates),
        start,
        end,
        k,
    )


def _last_k(
    count: Callable[[datetime], int],
    listed: Callable[[datetime], list[datetime]],
    start: datetime,
    end: datetime,
    k: int,
) -> list[datetime]:
    """The last k of `listed(lo)` (the occurrences in (lo, end]) with lo >= start.

    Widen back from `end` until k occurrences are inside (cost follows the window
    actually needed, not the whole range), then bisect the lower bound down to a
    second so only about k get listed. `count(lo)` counts what `listed(lo)` lists."""
    near, width = end, timedelta(hours=1)
    while True:
        far = max(start, end - width)
        if count(far) >= k:
            break
        if far == start:  # fewer than k in the whole range
            return listed(start)
        near, width = far, width * 2
    while near - far > _SECOND:
        mid = far + (near - far) // 2
        if count(mid) >= k:
            far = mid
        else:
            near = mid
    return listed(far)[-k:]


# --------------------------------------------------------------------------- timing
#
# A schedule's whole timing is one text, so every planner takes it where it took a
# cron expression: specs joined by " | ", each a cron expression or
# "every <duration> from <local anchor>", then optional "start_at <instant>" and
# "end_at <instant>". A single cron without bounds is just the expression, so
# existing schedules and their fast paths are untouched. `compose` writes the
# canonical text, `decompose` reads it back for the API.
#
# Intervals are ELAPSED time: occurrences are anchor + k * every for every integer
# k, the anchor's wall time resolved like a cron time (a skipped time: the gap's
# end; a repeated time: its first occurrence). "every 90m" stays 90 real minutes
# across a transition, so its wall clock shifts by the transition's hour.
# Bounds: start_at <= o < end_at.

SPEC_SEPARATOR = " | "
MAX_SPECS = 20
# A cron fires at most once a minute; an interval may not be finer, and is whole
# minutes so the explainer's minute-floored questions find its occurrences.
MIN_EVERY = timedelta(minutes=1)
MAX_EVERY = timedelta(days=366)
_EVERY_RE = re.compile(r"^(?:(\d{1,6})d)?(?:(\d{1,6})h)?(?:(\d{1,7})m)?(?:(\d{1,9})s)?$", re.ASCII)
_ANCHOR_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2})?$", re.ASCII)


@dataclass(frozen=True)
class Spec:
    """One spec as the API shows it: a cron expression, or an interval with its anchor."""

    cron: str | None = None
    every: str | None = None
    anchor: str | None = None  # local wall time, "2026-01-01T00:15:00"


@dataclass(frozen=True)
class _Interval:
    every: timedelta
    anchor: datetime  # naive local wall time

    @property
    def text(self) -> str:
        return f"every {_every_text(self.every)} from {self.anchor.isoformat()}"


@dataclass(frozen=True)
class _Timing:
    specs: tuple[_Schedule | _Interval, ...]
    start: datetime | None  # aware UTC, inclusive
    end: datetime | None  # aware UTC, exclusive

    @property
    def plain(self) -> _Schedule | None:
        """The single cron spec of an unbounded schedule (the fast paths), else None."""
        if len(self.specs) == 1 and self.start is None and self.end is None:
            only = self.specs[0]
            return only if isinstance(only, _Schedule) else None
        return None


def _every_text(every: timedelta) -> str:
    minutes = int(every.total_seconds()) // 60
    if minutes % 60:
        return f"{minutes}m" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"
    return f"{minutes // 60}h"


def parse_every(text: object) -> timedelta:
    """An interval's length from "90m", "1h30m", "2h", "1d", "3600s"; whole minutes,
    at least MIN_EVERY. CronError saying why otherwise."""
    if not isinstance(text, str) or not text.strip():
        raise CronError("is required: a duration such as 90m, 1h30m or 1d")
    match = _EVERY_RE.match(text.strip().lower())
    if match is None or not any(match.groups()):
        raise CronError(f"{text!r} is not a duration (use e.g. 90m, 1h30m, 2h, 1d)")
    d, h, m, s = (int(g) if g else 0 for g in match.groups())
    every = timedelta(days=d, hours=h, minutes=m, seconds=s)
    if every < MIN_EVERY:
        raise CronError(
            f"must be at least {_every_text(MIN_EVERY)}: a schedule fires at most once a minute"
        )
    if every % _MINUTE:
        raise CronError("must be a whole number of minutes")
    if every > MAX_EVERY:
        raise CronError("must be at most 366 days")
    return every


def parse_anchor(text: object) -> datetime:
    """An interval's anchor: a local wall time without an offset, on a whole minute."""
    if not isinstance(text, str) or not _ANCHOR_RE.match(text.strip()):
        raise CronError(
            "must be a local wall time without an offset, e.g. 2026-01-01T00:15:00 "
            "(it is read in the schedule's timezone)"
        )
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise CronError(f"{text!r} is not a valid date and time") from None
    if value.second:
        raise CronError("must be on a whole minute")
    if not MIN_YEAR <= value.year <= MAX_YEAR:
        raise CronError(f"must be between the years {MIN_YEAR} and {MAX_YEAR}")
    return value


def _instant_text(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def compose(specs: list[Spec], *, start_at: datetime | None, end_at: datetime | None) -> str:
    """The canonical timing text of validated parts (see the section comment)."""
    parts: list[str] = []
    for spec in specs:
        if spec.cron is not None:
            parts.append(" ".join(spec.cron.split()))
        else:
            parts.append(_Interval(parse_every(spec.every), parse_anchor(spec.anchor)).text)
    if start_at is not None:
        parts.append(f"start_at {_instant_text(start_at)}")
    if end_at is not None:
        parts.append(f"end_at {_instant_text(end_at)}")
    return SPEC_SEPARATOR.join(parts)


def _split(expr: str) -> tuple[list[str], datetime | None, datetime | None]:
    specs: list[str] = []
    start = end = None
    for raw in expr.split("|"):
        part = " ".join(raw.split())
        word, _, rest = part.partition(" ")
        if word in ("start_at", "end_at"):
            try:
                value = datetime.fromisoformat(rest.replace("Z", "+00:00"))
            except ValueError:
                raise CronError(f"{word} {rest!r} is not an ISO 8601 instant") from None
            if value.tzinfo is None:
                raise CronError(f"{word} must have an offset or Z")
            value = _aware_utc(value, word)
            if word == "start_at":
                start = value
            else:
                end = value
        else:
            specs.append(part)
    return specs, start, end


def decompose(expr: str) -> tuple[list[Spec], datetime | None, datetime | None]:
    """The specs and bounds of a timing text, as `compose` took them."""
    texts, start, end = _split(expr)
    specs: list[Spec] = []
    for text in texts:
        words = text.split()
        if words and words[0] == "every" and len(words) == 4 and words[2] == "from":
            specs.append(Spec(every=words[1], anchor=words[3]))
        else:
            specs.append(Spec(cron=text))
    return specs, start, end


def bounds(expr: str) -> tuple[datetime | None, datetime | None]:
    """(start_at, end_at) of a timing text, aware UTC or None."""
    if "|" not in expr:
        return None, None
    _, start, end = _split(expr)
    return start, end


def _is_timing(expr: object) -> bool:
    return isinstance(expr, str) and ("|" in expr or expr.lstrip().startswith("every "))


@lru_cache(maxsize=4096)
def _timing_seeded(expr: str, seed: str) -> _Timing:
    texts, start, end = _split(expr)
    if not texts:
        raise CronError("no spec: give at least one cron expression or interval")
    if len(texts) > MAX_SPECS:
        raise CronError(f"at most {MAX_SPECS} specs")
    if start is not None and end is not None and end <= start:
        raise CronError("end_at must be after start_at")
    specs: list[_Schedule | _Interval] = []
    for text in texts:
        words = text.split()
        if words and words[0] == "every":
            if len(words) != 4 or words[2] != "from":
                raise CronError(f"{text!r}: an interval is 'every <duration> from <anchor>'")
            specs.append(_Interval(parse_every(words[1]), parse_anchor(words[3])))
        else:
            specs.append(_compile(text, seed))
    return _Timing(tuple(specs), start, end)


def _timing(expr: str, seed: str) -> _Timing:
    if not _is_timing(expr):
        return _Timing((_compile(expr, seed),), None, None)
    return _timing_seeded(expr, effective_seed(expr, seed))


@lru_cache(maxsize=4096)
def _anchor_instant(anchor: datetime, zone: ZoneInfo) -> datetime:
    # The cron rule for wall times: a skipped time runs at the gap's end, a
    # repeated one at its first occurrence.
    kind, u0, _ = _classify(anchor, zone)
    return _gap_end(anchor, zone) if kind == _GAP else u0


def _iter_interval(
    iv: _Interval, zone: ZoneInfo, after: datetime, dates: DateFilter | None
) -> Iterator[datetime]:
    """Occurrences anchor + k * every strictly after ``after``; an excluded local date
    jumps to the next allowed date's first instant (bounded by SEARCH_DAYS)."""
    origin, step = _anchor_instant(iv.anchor, zone), iv.every
    k = (after - origin) // step + 1
    dates = None if dates is None or dates.empty else dates
    last = _local_naive(after, zone).date() + timedelta(days=SEARCH_DAYS)
    while True:
        try:
            instant = origin + k * step
        except OverflowError:
            return
        if instant.year > MAX_YEAR:
            return
        if dates is None:
            yield instant
            k += 1
            continue
        day = _local_naive(instant, zone).date()
        if dates.allows(day):
            yield instant
            k += 1
            continue
        following = dates.next_allowed(day, last=last) if day < last else None
        if following is None:
            return
        k = max(k + 1, -((origin - _day_start(following, zone)) // step))


def _spec_iter(
    spec: _Schedule | _Interval, zone: ZoneInfo, after: datetime, dates: DateFilter | None
) -> Iterator[datetime]:
    if isinstance(spec, _Interval):
        return _iter_interval(spec, zone, after, dates)
    return _iter_dates(spec, zone, after, dates)


def _t_iter(
    timing: _Timing, zone: ZoneInfo, after: datetime, dates: DateFilter | None
) -> Iterator[datetime]:
    """The union of the specs' occurrences strictly after ``after``, within the bounds,
    ascending, each instant once (a k-way merge)."""
    plain = timing.plain
    if plain is not None:
        yield from _iter_dates(plain, zone, after, dates)
        return
    if timing.start is not None:
        after = max(after, timing.start - _TICK)
    if timing.end is not None and after >= timing.end:
        return
    last: datetime | None = None
    merged = heapq.merge(*(_spec_iter(s, zone, after, dates) for s in timing.specs))
    for instant in merged:
        if timing.end is not None and instant >= timing.end:
            return
        if instant != last:
            yield instant
            last = instant


def _t_between(
    timing: _Timing,
    zone: ZoneInfo,
    start: datetime,
    end: datetime,
    limit: int | None = None,
    dates: DateFilter | None = None,
) -> list[datetime]:
    plain = timing.plain
    if plain is not None:
        return _between(plain, zone, start, end, limit, dates)
    if end <= start:
        return []
    return _up_to(_t_iter(timing, zone, start, dates), end, limit)


def _t_clamp(timing: _Timing, start: datetime, end: datetime) -> tuple[datetime, datetime]:
    """(start, end] narrowed to the bounds [start_at, end_at)."""
    if timing.start is not None:
        start = max(start, timing.start - _TICK)
    if timing.end is not None:
        end = min(end, timing.end - _TICK)
    return start, end


def _t_count(
    timing: _Timing, zone: ZoneInfo, start: datetime, end: datetime, dates: DateFilter | None
) -> int:
    """Occurrences in (start, end]: arithmetic for one spec (a cron's per-day counting,
    an interval's division), listed for a union (its specs can coincide)."""
    start, end = _t_clamp(timing, start, end)
    if end <= start:
        return 0
    if len(timing.specs) == 1:
        spec = timing.specs[0]
        if isinstance(spec, _Schedule):
            return _count(spec, zone, start, end, dates)
        if dates is None or dates.empty:
            origin = _anchor_instant(spec.anchor, zone)
            return int((end - origin) // spec.every - (start - origin) // spec.every)
    return len(_t_between(timing, zone, start, end, dates=dates))


def _t_latest(
    timing: _Timing,
    zone: ZoneInfo,
    start: datetime,
    end: datetime,
    k: int,
    dates: DateFilter | None = None,
) -> list[datetime]:
    """The last ``k`` occurrences in (start, end], ascending (as `_latest`)."""
    plain = timing.plain
    if plain is not None:
        return _latest(plain, zone, start, end, k, dates)
    start, end = _t_clamp(timing, start, end)
    if k <= 0 or end <= start:
        return []
    return _last_k(
        lambda lo: _t_count(timing, zone, lo, end, dates),
        lambda lo: _t_between(timing, zone, lo, end, dates=dates),
        start,
        end,
        k,
    )


def _spec_label(timing: _Timing, index: int) -> str:
    spec = timing.specs[index]
    text = spec.text if isinstance(spec, _Interval) else spec.source
    return f"spec {index + 1}: {text}"


def _giving_spec(timing: _Timing, zone: ZoneInfo, instant: datetime) -> int | None:
    """Index of the first spec with an occurrence at ``instant`` (bounds and calendars aside)."""
    for index, spec in enumerate(timing.specs):
        if next(_spec_iter(spec, zone, instant - _TICK, None), None) == instant:
            return index
    return None


def _t_note(timing: _Timing, zone: ZoneInfo, instant: datetime) -> str | None:
    index = _giving_spec(timing, zone, instant) if timing.plain is None else 0
    if index is None:
        return None
    spec = timing.specs[index]
    if isinstance(spec, _Schedule):
        return _note(spec, zone, instant)
    # Only the first occurrence after a transition reads differently on the wall clock.
    local, before = instant.astimezone(zone), (instant - spec.every).astimezone(zone)
    shift = _offset(local) - _offset(before)
    if not shift:
        return None
    moved = "forward" if shift > timedelta(0) else "back"
    return (
        f"{_clock(local)} {_zone_label(local)} is {_every_text(spec.every)} of elapsed time "
        f"after {_clock(before)} {_zone_label(before)}: the clocks went {moved} "
        f"{spell(abs(shift), sep=' ')} in {zone.key} (an interval counts elapsed time)"
    )


def _outside(timing: _Timing, at: datetime) -> str | None:
    if timing.start is not None and at < timing.start:
        return f"before start_at {_instant_text(timing.start)}"
    if timing.end is not None and at >= timing.end:
        return f"at or after end_at {_instant_text(timing.end)}"
    return None


# --------------------------------------------------------------------------- public API


def next_after(
    expr: str, tz: str, *, after: datetime, seed: str, dates: DateFilter | None = None
) -> datetime:
    """First occurrence strictly after ``after`` on a date ``dates`` allows, aware UTC.
    CronError if there is none (`next_or_none` for a schedule that may have ended)."""
    timing, zone = _timing(expr, seed), get_zone(tz)
    after = _aware_utc(after, "after")
    found = next(_t_iter(timing, zone, after, dates), None)
    if found is None:
        if timing.end is not None:
            raise CronError(
                f"no occurrence after {_instant_text(max(after, timing.start or after))} "
                f"and before end_at {_instant_text(timing.end)}"
            )
        if dates is not None and not dates.empty:
            raise CronError(
                f"'{expr}' never fires: every occurrence within {SEARCH_DAYS // 366} years "
                f"after {after.date().isoformat()} is excluded by its calendars"
            )
        raise CronError(f"'{expr}' has no occurrence after {after.isoformat()}")
    return found


def next_or_none(
    expr: str, tz: str, *, after: datetime, seed: str, dates: DateFilter | None = None
) -> datetime | None:
    """`next_after`, or None when the schedule has ended: it has an end_at and no
    occurrence before it (the stored next_run_at is then NULL). A schedule without
    end_at that never fires is still a CronError."""
    try:
        return next_after(expr, tz, after=after, seed=seed, dates=dates)
    except CronError:
        if ended(expr, tz, after=after, seed=seed, dates=dates):
            return None
        raise


def ended(
    expr: str, tz: str, *, after: datetime, seed: str, dates: DateFilter | None = None
) -> bool:
    """True when the schedule has an end_at and no occurrence in (after, end_at)."""
    timing, zone = _timing(expr, seed), get_zone(tz)
    if timing.end is None:
        return False
    after = _aware_utc(after, "after")
    return next(_t_iter(timing, zone, after, dates), None) is None


def occurrences_between(
    expr: str,
    tz: str,
    *,
    start: datetime,
    end: datetime,
    seed: str,
    limit: int = 100_000,
    dates: DateFilter | None = None,
) -> list[datetime]:
    """Occurrences o with start < o <= end, ascending; at most ``limit`` (the earliest).
    With ``dates``, those on excluded local dates are left out."""
    timing, zone = _timing(expr, seed), get_zone(tz)
    start, end = _aware_utc(start, "start"), _aware_utc(end, "end")
    if limit < 0:
        raise CronError("limit must be zero or more")
    return _t_between(timing, zone, start, end, limit, dates)


def excluded_between(
    expr: str,
    tz: str,
    *,
    start: datetime,
    end: datetime,
    seed: str,
    dates: DateFilter,
    limit: int = 100,
) -> list[Excluded]:
    """The occurrences o (start < o <= end) that ``dates`` removes, with the reason;
    at most ``limit`` (the earliest). Walks the expression's own occurrences, so
    keep the window to what a preview shows."""
    timing, zone = _timing(expr, seed), get_zone(tz)
    start, end = _aware_utc(start, "start"), _aware_utc(end, "end")
    out: list[Excluded] = []
    if dates.empty:
        return out
    for instant in _t_between(timing, zone, start, end):
        local = instant.astimezone(zone)
        reason = dates.reason(local.date())
        if reason is not None:
            out.append(Excluded(instant, local, reason))
            if len(out) >= limit:
                break
    return out


def jitter_seconds(*, seed: str, scheduled_for: datetime, jitter_s: int) -> int:
    """Deterministic delay in [0, jitter_s] for one occurrence of one schedule."""
    instant = _aware_utc(scheduled_for, "scheduled_for")
    if jitter_s < 0:
        raise CronError("jitter must be zero or more seconds")
    if jitter_s == 0:
        return 0
    # Keyed on the instant too, so one schedule's runs spread out rather than all
    # sharing one offset; the same occurrence always gets the same delay, so a
    # retried or re-planned run lands where it would have.
    return _hash(seed, "jitter", instant.isoformat()) % (jitter_s + 1)


def _clock(value: datetime) -> str:
    return value.strftime("%H:%M:%S" if value.second else "%H:%M")


def _zone_label(value: datetime) -> str:
    name = value.tzname()
    if name:
        return name
    return value.strftime("UTC%z")  # pragma: no cover - ZoneInfo always names


def _fold_labels(local: datetime, zone: ZoneInfo) -> tuple[str, str]:
    first = local.replace(tzinfo=zone, fold=0)
    second = local.replace(tzinfo=zone, fold=1)
    a, b = _zone_label(first), _zone_label(second)
    if a == b:  # an offset change without a new abbreviation
        a, b = first.strftime("UTC%z"), second.strftime("UTC%z")
    return a, b


def _gap_times(sched: _Schedule, zone: ZoneInfo, instant: datetime) -> list[datetime]:
    """Wall times swallowed by a gap that ends at ``instant`` and match the schedule."""
    before = _offset((instant - _SECOND).astimezone(zone))
    after = _offset(instant.astimezone(zone))
    if after <= before:
        return []
    wall = instant.replace(tzinfo=None)
    gap_start, gap_end = wall + before, wall + after
    found: list[datetime] = []
    for candidate in _wall_matches(sched, gap_start):
        if candidate >= gap_end:
            break
        if candidate >= gap_start:
            found.append(candidate)
    return found


def _gap_length(zone: ZoneInfo, instant: datetime) -> timedelta:
    return _offset(instant.astimezone(zone)) - _offset((instant - _SECOND).astimezone(zone))


def _times_text(times: list[datetime]) -> str:
    if len(times) <= 4:
        return _join([_clock(t) for t in times], "and")
    return f"{_clock(times[0])} to {_clock(times[-1])} ({len(times)} times)"


def _gap_note(
    sched: _Schedule, zone: ZoneInfo, instant: datetime, times: list[datetime], *, past: bool
) -> str:
    local = instant.astimezone(zone)
    when = f"{_clock(local)} {_zone_label(local)}"
    single = len(times) == 1
    if past:
        verb = "did not exist"
        runs = f"it ran at {when}" if single else f"they ran once, at {when}"
    else:
        verb = "does not exist" if single else "do not exist"
        runs = f"runs at {when}" if single else f"runs once, at {when}"
    text = f"{_times_text(times)} {verb} on {times[0].date().isoformat()} in {zone.key}; {runs}"
    if _matches(sched, local.replace(tzinfo=None)):
        text += f", together with the regular {_clock(local)} run"
    return text


def _fold_note(sched: _Schedule, zone: ZoneInfo, local: datetime, *, past: bool) -> str:
    first, second = _fold_labels(local, zone)
    wall = f"{_clock(local)} {'occurred' if past else 'occurs'} twice on {local.date().isoformat()}"
    prefix = "it ran" if past else "runs"
    if sched.hour_star:
        return f"{wall} in {zone.key}; {prefix} in both ({first} and {second})"
    return f"{wall} in {zone.key}; {prefix} once, at the first ({first})"


def _note(sched: _Schedule, zone: ZoneInfo, instant: datetime) -> str | None:
    times = _gap_times(sched, zone, instant)
    if times:
        return _gap_note(sched, zone, instant, times, past=False)
    wall = _local_naive(instant, zone)
    if _classify(wall, zone)[0] == _FOLD:
        return _fold_note(sched, zone, wall, past=False)
    return None


def preview(
    expr: str,
    tz: str,
    *,
    seed: str,
    after: datetime,
    count: int,
    jitter_s: int = 0,
    dates: DateFilter | None = None,
) -> list[Occurrence]:
    """The next ``count`` (at most PREVIEW_MAX) occurrences strictly after ``after``,
    on dates ``dates`` allows (fewer when the calendars exclude the rest for
    SEARCH_DAYS; `excluded_between` lists what they removed)."""
    timing, zone = _timing(expr, seed), get_zone(tz)
    after = _aware_utc(after, "after")
    if not 0 <= count <= PREVIEW_MAX:
        raise CronError(f"count must be between 0 and {PREVIEW_MAX}")
    if jitter_s < 0:
        raise CronError("jitter must be zero or more seconds")
    out: list[Occurrence] = []
    for instant in islice(_t_iter(timing, zone, after, dates), count):
        delay = jitter_seconds(seed=seed, scheduled_for=instant, jitter_s=jitter_s)
        out.append(
            Occurrence(
                scheduled_for=instant,
                local=instant.astimezone(zone),
                due_at=instant + timedelta(seconds=delay),
                note=_t_note(timing, zone, instant),
            )
        )
    return out


TRANSITION_HORIZON = timedelta(days=366)


def _span_text(span: timedelta) -> str:
    """A clock change's size in words: "1 hour", "30 minutes", "1 hour 30 minutes"."""
    hours, minutes = divmod(int(span.total_seconds()) // 60, 60)
    parts = [f"{hours} hour{'s' if hours != 1 else ''}"] if hours else []
    parts += [f"{minutes} minute{'s' if minutes != 1 else ''}"] if minutes or not hours else []
    return " ".join(parts)


# Occurrences looked at around one clock change (a per-minute cron has 120 in 2 h).
_TRANSITION_SCAN = 5000


def next_transition(
    zone: ZoneInfo, after: datetime, *, within: timedelta = TRANSITION_HORIZON
) -> datetime | None:
    """The first instant strictly after ``after`` (and within ``within``) on which the
    zone's UTC offset changes, or None. Probes once a day, then bisects to the second
    (transitions fall on whole seconds; none undoes itself within a day in tzdata)."""
    lo = _aware_utc(after, "after").replace(microsecond=0)
    end = lo + within
    offset = _offset(lo.astimezone(zone))
    while lo < end:
        hi = min(lo + _DAY, end)
        if _offset(hi.astimezone(zone)) != offset:
            while hi - lo > _SECOND:
                mid = lo + timedelta(seconds=int((hi - lo).total_seconds()) // 2)
                if _offset(mid.astimezone(zone)) == offset:
                    lo = mid
                else:
                    hi = mid
            return hi
        lo = hi
    return None


def transition_effect(
    expr: str,
    tz: str,
    *,
    seed: str,
    after: datetime,
    dates: DateFilter | None = None,
) -> TransitionEffect | None:
    """What the zone's next clock change within a year (after ``after``) does to this
    schedule, worded with the same DST rules and notes as its occurrences (`preview`'s
    `note`): the run it moves, skips into the next hour or runs twice; None when the
    zone does not change its clocks within the year or the schedule has no run from
    the change on."""
    timing, zone = _timing(expr, seed), get_zone(tz)
    at = next_transition(zone, after)
    if at is None:
        return None
    before = (at - _SECOND).astimezone(zone)
    shift = _offset(at.astimezone(zone)) - _offset(before)
    span = abs(shift)
    # A gap's swallowed runs land on `at`; a fold's repeated wall times are read from
    # `at - span` (first pass) to `at + span` (second); an interval's first run after
    # the change may come later, so the scan goes on to the first run past the window.
    note: str | None = None
    runs = False
    for instant in islice(_t_iter(timing, zone, at - span - _TICK, dates), _TRANSITION_SCAN):
        runs = True
        note = _t_note(timing, zone, instant)
        if note is not None or instant > at + span:
            break
    if not runs:
        return None  # no run from the change on (ended, or calendars exclude the rest)
    old_wall = (at + _offset(before)).replace(tzinfo=None)
    new_wall = at.astimezone(zone)
    moved = "forward" if shift > timedelta(0) else "back"
    head = (
        f"On {old_wall.date().isoformat()} at {_clock(old_wall)} {_zone_label(before)} the "
        f"clocks go {moved} {_span_text(span)} to {_clock(new_wall)} "
        f"{_zone_label(new_wall)} in {zone.key}"
    )
    if note is None:
        which = "skips" if shift > timedelta(0) else "repeats"
        tail = f"no run of this schedule is at a wall time the change {which}"
    else:
        tail = note
    return TransitionEffect(at=at, shift=shift, note=note, text=f"{head}: {tail}.")


def plan_misfire(
    expr: str,
    tz: str,
    *,
    seed: str,
    next_run_at: datetime,
    now: datetime,
    until: datetime,
    grace_s: int,
    policy: str,
    catch_up_limit: int,
    max_listed: int = 1000,
    dates: DateFilter | None = None,
) -> MisfirePlan:
    """Decide what to fire for occurrences from ``next_run_at`` up to ``until``.

    Occurrences o with next_run_at <= o <= until are considered; o is late when
    o < now - grace_s. On-time ones always fire. Late ones: "skip" fires none,
    "run_once" the latest, "catch_up" the latest ``catch_up_limit``; the rest are
    skipped. ``skipped`` holds the most recent ``max_listed`` of them, ascending.

    ``skipped_total`` is exact and never materialised: days with one steady UTC
    offset are counted arithmetically (matching times of day), only days with a
    DST transition are listed, so the cost grows with the days of the outage
    (60 days of ``* * * * *``: about 0.1 s), not with the occurrences. The listed
    tail is found by bisecting on that count, so only about ``max_listed`` +
    fired occurrences are ever built.

    ``next_run_at`` of the plan is the first occurrence after ``until`` (and not
    before the given next_run_at), or None if there is none.

    With ``dates``, occurrences on excluded local dates do not exist for the plan:
    neither fired nor skipped nor counted, and next_run_at is past them (None when
    everything within SEARCH_DAYS is excluded).
    """
    timing, zone = _timing(expr, seed), get_zone(tz)
    first = _aware_utc(next_run_at, "next_run_at")
    now, until = _aware_utc(now, "now"), _aware_utc(until, "until")
    if policy not in MISFIRE_POLICIES:
        raise CronError(f"unknown misfire policy {policy!r} (use skip, run_once or catch_up)")
    if grace_s < 0:
        raise CronError("grace must be zero or more seconds")
    if catch_up_limit < 0:
        raise CronError("catch-up limit must be zero or more")
    if max_listed < 0:
        raise CronError("max_listed must be zero or more")

    lower = first - _TICK  # next_run_at itself is due
    cutoff = now - timedelta(seconds=grace_s)  # late means strictly before this
    late_end = min(cutoff - _TICK, until)
    late_total = _t_count(timing, zone, lower, late_end, dates)
    if policy == "skip":
        fire_late = 0
    elif policy == "run_once":
        fire_late = min(1, late_total)
    else:
        fire_late = min(catch_up_limit, late_total)
    recent = _t_latest(
        timing, zone, lower, late_end, min(late_total, fire_late + max_listed), dates
    )
    keep = len(recent) - fire_late
    skipped = recent[max(0, keep - max_listed) : keep]
    on_time = _t_between(timing, zone, max(lower, cutoff - _TICK), until, dates=dates)
    following = next(_t_iter(timing, zone, max(until, lower), dates), None)
    return MisfirePlan(
        fire=recent[keep:] + on_time,
        skipped=skipped,
        skipped_total=late_total - fire_late,
        next_run_at=following,
    )


def _previous(
    timing: _Timing, zone: ZoneInfo, at: datetime, dates: DateFilter | None = None
) -> datetime | None:
    found = _t_latest(timing, zone, at - PREVIOUS_LOOKBACK, at - _TICK, 1, dates)
    return found[0] if found else None


def would_run_at(
    expr: str,
    tz: str,
    *,
    seed: str,
    at: datetime,
    now: datetime | None = None,
    dates: DateFilter | None = None,
) -> WouldRun:
    """Whether the schedule runs at ``at`` (floored to the minute), and its neighbours.

    ``previous`` looks back at most 400 days. ``note`` explains DST cases: a
    repeated wall-clock time, or an instant just after a gap whose swallowed
    times were moved to the gap's end. It is worded in the past tense unless
    ``at`` is after ``now`` (a question about the future: "runs", "does not exist").
    With ``dates``, an occurrence on an excluded local date is not one: ``excluded``
    says why, and previous/next are the neighbours that do run.
    """
    timing, zone = _timing(expr, seed), get_zone(tz)
    at = _aware_utc(at, "at").replace(second=0, microsecond=0)
    # The spec giving `at` before bounds and calendars (a plain cron: itself).
    index = _giving_spec(timing, zone, at)
    spec_text = None if index is None or timing.plain is not None else _spec_label(timing, index)
    outside = _outside(timing, at) if index is not None else None
    excluded: str | None = None
    if dates is not None and not dates.empty and index is not None and outside is None:
        excluded = dates.reason(_local_naive(at, zone).date())
    upcoming = _t_iter(timing, zone, at - _TICK, dates)
    candidate = next(upcoming, None)
    is_occurrence = candidate == at
    following = next(upcoming, None) if is_occurrence else candidate
    previous = _previous(timing, zone, at, dates)

    note: str | None = None
    dst: DstCase | None = None
    past = now is None or at <= now
    wall = _local_naive(at, zone)
    crons = [s for s in timing.specs if isinstance(s, _Schedule)]
    chosen = timing.specs[index] if index is not None else None
    sched = chosen if isinstance(chosen, _Schedule) else (crons[0] if crons else None)
    if sched is None or isinstance(chosen, _Interval):
        if is_occurrence:
            note = _t_note(timing, zone, at)
    elif _classify(wall, zone)[0] == _FOLD and _matches(sched, wall):
        note, dst = _fold_note(sched, zone, wall, past=past), "fold"
    else:
        anchor = at if is_occurrence else previous
        if anchor is not None:
            times = _gap_times(sched, zone, anchor)
            if times and at - anchor < _gap_length(zone, anchor):
                note, dst = _gap_note(sched, zone, anchor, times, past=past), "gap"
    return WouldRun(
        at=at,
        is_occurrence=is_occurrence,
        scheduled_for=at if is_occurrence else None,
        previous=previous,
        next=following,
        note=note,
        dst=dst,
        excluded=excluded,
        outside=outside,
        spec=spec_text,
    )
