"""Hypothesis properties of dispatch.timing.cron, checked against an independent oracle.

The oracle below re-implements just enough: it parses the *resolved* expression
(so H is already numbers), tests each wall-clock minute, and maps a matching
minute to UTC by the documented DST policy (gap -> first instant after it; fold
-> first copy, or both when the hour field starts with "*").
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from itertools import pairwise
from zoneinfo import ZoneInfo

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from dispatch.timing import cron

ZONES = (
    "Europe/Amsterdam",
    "America/New_York",
    "Australia/Lord_Howe",
    "America/Santiago",
    "Asia/Kolkata",
    "America/Sao_Paulo",  # DST abolished in 2019
    "Europe/Istanbul",  # DST abolished in 2016
    "Asia/Tehran",  # DST abolished in 2022
    "Asia/Beirut",
    "America/Havana",
    "Africa/Casablanca",  # negative DST during Ramadan
    "Europe/Dublin",  # negative DST in winter
    "Pacific/Chatham",  # +12:45 / +13:45
    "America/St_Johns",
    "UTC",
)
MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
DOWS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
FIELD_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 6))
HASH_SPANS = (60, 24, 28, 12, 7)
TICK = timedelta(microseconds=1)
MINUTE = timedelta(minutes=1)
PROPERTY_SETTINGS = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


# ----------------------------------------------------------------- oracle


def _atom(token: str, index: int) -> int:
    if token.isdigit():
        return int(token)
    names = MONTHS if index == 3 else DOWS
    return names.index(token.upper()) + (1 if index == 3 else 0)


def _field_values(text: str, index: int) -> frozenset[int]:
    lo_field, hi_field = FIELD_RANGES[index]
    values: set[int] = set()
    for item in text.split(","):
        base, _, step_text = item.partition("/")
        step = int(step_text) if step_text else 1
        if base == "*":
            lo, hi = lo_field, hi_field
        elif "-" in base:
            a, b = base.split("-")
            lo, hi = _atom(a, index), _atom(b, index)
        else:
            lo = _atom(base, index)
            hi = max(hi_field, lo) if step_text else lo
        values.update(range(lo, hi + 1, step))
    if index == 4 and 7 in values:
        values = (values - {7}) | {0}
    return frozenset(values)


@dataclass(frozen=True)
class Oracle:
    fields: tuple[frozenset[int], ...]
    hour_star: bool

    @classmethod
    def of(cls, expr: str, seed: str) -> Oracle:
        resolved = cron.resolve(expr, seed=seed).split()
        fields = tuple(_field_values(text, i) for i, text in enumerate(resolved))
        written_hour = expr.split()[1] if not expr.startswith("@") else resolved[1]
        return cls(fields, written_hour.startswith("*"))

    def matches(self, wall: datetime) -> bool:
        minutes, hours, doms, months, dows = self.fields
        if wall.minute not in minutes or wall.hour not in hours or wall.month not in months:
            return False
        dom_ok = wall.day in doms
        dow_ok = (wall.weekday() + 1) % 7 in dows
        if len(doms) == 31 or len(dows) == 7:  # a full field acts as "*": both must hold
            return dom_ok and dow_ok
        return dom_ok or dow_ok

    def instants(self, wall: datetime, zone: ZoneInfo) -> set[datetime]:
        first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
        second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
        if first == second:
            return {first}
        exists = first.astimezone(zone).replace(tzinfo=None) == wall
        if exists:  # repeated wall time
            both = {first, second}
            return both if self.hour_star else {min(both)}
        # Skipped wall time: the first instant whose wall clock is past it.
        t = min(first, second).replace(second=0, microsecond=0)
        while t.astimezone(zone).replace(tzinfo=None) <= wall:
            t += MINUTE
        return {t}

    def between(self, zone: ZoneInfo, start: datetime, end: datetime) -> list[datetime]:
        wall = start.astimezone(zone).replace(tzinfo=None, second=0, microsecond=0)
        stop = end.astimezone(zone).replace(tzinfo=None) + timedelta(hours=4)
        wall -= timedelta(hours=4)
        found: set[datetime] = set()
        while wall <= stop:
            if self.matches(wall):
                found.update(self.instants(wall, zone))
            wall += MINUTE
        return sorted(u for u in found if start < u <= end)


def is_transition_end(zone: ZoneInfo, instant: datetime) -> bool:
    before = (instant - timedelta(seconds=1)).astimezone(zone).utcoffset()
    after = instant.astimezone(zone).utcoffset()
    assert before is not None
    assert after is not None
    return after > before


@cache
def transitions(name: str) -> tuple[datetime, ...]:
    zone = ZoneInfo(name)
    found: list[datetime] = []
    t = datetime(2020, 1, 1, tzinfo=UTC)
    end = datetime(2036, 1, 1, tzinfo=UTC)
    step = timedelta(days=1)
    while t < end:
        if t.astimezone(zone).utcoffset() != (t + step).astimezone(zone).utcoffset():
            lo, hi = t, t + step
            while hi - lo > timedelta(seconds=1):
                mid = lo + (hi - lo) / 2
                if mid.astimezone(zone).utcoffset() == lo.astimezone(zone).utcoffset():
                    lo = mid
                else:
                    hi = mid
            found.append(hi.replace(microsecond=0))
        t += step
    return tuple(found)


# ----------------------------------------------------------------- strategies


def _field(index: int) -> st.SearchStrategy[str]:
    lo, hi = FIELD_RANGES[index]
    span = hi - lo + 1
    number = st.integers(lo, hi)
    pair = st.tuples(number, number).map(sorted)
    options: list[st.SearchStrategy[str]] = [
        st.just("*"),
        st.integers(max(2, span // 12), span).map(lambda s: f"*/{s}"),
        number.map(str),
        pair.map(lambda p: f"{p[0]}-{p[1]}"),
        st.tuples(pair, st.integers(1, span)).map(lambda t: f"{t[0][0]}-{t[0][1]}/{t[1]}"),
        st.tuples(number, st.integers(1, span)).map(lambda t: f"{t[0]}/{t[1]}"),
        st.lists(number, min_size=1, max_size=4).map(lambda v: ",".join(map(str, v))),
        st.just("H"),
        st.integers(1, HASH_SPANS[index]).map(lambda s: f"H/{s}"),
        pair.map(lambda p: f"H({p[0]}-{p[1]})"),
        pair.flatmap(
            lambda p: st.integers(1, p[1] - p[0] + 1).map(lambda s: f"H({p[0]}-{p[1]})/{s}")
        ),
    ]
    if index == 3:
        options.append(st.sampled_from(MONTHS).map(str.lower))
        options.append(st.just("JAN-JUN"))
    if index == 4:
        options.extend([st.sampled_from(DOWS), st.just("MON-FRI"), st.just("7"), st.just("5-7")])
    return st.one_of(options)


@st.composite
def expressions(draw: st.DrawFn) -> str:
    if draw(st.integers(0, 19)) == 0:
        return draw(st.sampled_from(["@hourly", "@daily", "@weekly", "@monthly", "@yearly"]))
    minute = draw(_field(0))
    # Keep most schedules from firing every minute so windows stay cheap to list.
    assume(minute not in {"*", "*/1", "0-59"} or draw(st.integers(0, 3)) == 0)
    return " ".join([minute, *(draw(_field(i)) for i in range(1, 5))])


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[str, str, str, datetime]:
    expr = draw(expressions())
    seed = str(draw(st.uuids()))
    try:
        cron.validate(expr, "UTC", seed=seed)
    except cron.CronError:
        assume(False)  # e.g. "31" with only February, which validate rejects on purpose
    tz = draw(st.sampled_from(ZONES))
    near = transitions(tz)
    if near and draw(st.booleans()):
        base = draw(st.sampled_from(near))
        start = base + timedelta(seconds=draw(st.integers(-30 * 3600, 3 * 3600)))
    else:
        start = draw(
            st.datetimes(
                min_value=datetime(2020, 1, 1),  # noqa: DTZ001 - hypothesis bounds are naive
                max_value=datetime(2035, 12, 31),  # noqa: DTZ001
                timezones=st.just(UTC),
            )
        )
    start += timedelta(microseconds=draw(st.sampled_from([0, 0, 1, 59_999_999, 30_000_000])))
    return expr, seed, tz, start


# ----------------------------------------------------------------- properties


@PROPERTY_SETTINGS
@given(scenario=scenarios(), hours=st.integers(1, 30))
def test_occurrences_are_exactly_the_oracles_and_strictly_increasing(
    scenario: tuple[str, str, str, datetime], hours: int
) -> None:
    expr, seed, tz, start = scenario
    zone = ZoneInfo(tz)
    end = start + timedelta(hours=hours)
    got = cron.occurrences_between(expr, tz, start=start, end=end, seed=seed)
    assert all(a < b for a, b in pairwise(got))
    assert all(o.tzinfo is UTC and start < o <= end for o in got)
    oracle = Oracle.of(expr, seed)
    for o in got:
        wall = o.astimezone(zone).replace(tzinfo=None)
        # Either it matches in local wall time, or it is a moved gap time, which
        # lands exactly on the end of a spring-forward transition.
        assert oracle.matches(wall) or is_transition_end(zone, o), (expr, tz, o)
        if o.astimezone(zone).fold == 1 and not is_transition_end(zone, o):
            assert oracle.hour_star, "second copy of a repeated hour for a fixed hour"
    assert got == oracle.between(zone, start, end)


@PROPERTY_SETTINGS
@given(scenario=scenarios(), count=st.integers(1, 25), jitter=st.integers(0, 900))
def test_preview_next_after_between_and_misfire_fire_agree(
    scenario: tuple[str, str, str, datetime], count: int, jitter: int
) -> None:
    expr, seed, tz, after = scenario
    shown = cron.preview(expr, tz, seed=seed, after=after, count=count, jitter_s=jitter)
    runs = [o.scheduled_for for o in shown]
    assert len(runs) == count

    stepped, t = [], after
    for _ in range(count):
        t = cron.next_after(expr, tz, after=t, seed=seed)
        stepped.append(t)
    assert runs == stepped

    assert cron.occurrences_between(expr, tz, start=after, end=runs[-1], seed=seed) == runs

    plan = cron.plan_misfire(
        expr, tz, seed=seed, next_run_at=runs[0], now=runs[0], until=runs[-1],
        grace_s=0, policy="catch_up", catch_up_limit=5,
    )  # fmt: skip
    assert plan.fire == runs
    assert plan.skipped == []
    assert plan.skipped_total == 0
    assert plan.next_run_at == cron.next_after(expr, tz, after=runs[-1], seed=seed)

    for o in shown:
        # Compare in UTC: aware datetimes in a fold never equal another zone's (PEP 495).
        assert o.local.astimezone(UTC) == o.scheduled_for
        assert o.local.tzinfo == ZoneInfo(tz)
        assert 0 <= (o.due_at - o.scheduled_for).total_seconds() <= jitter


@PROPERTY_SETTINGS
@given(
    scenario=scenarios(),
    hours=st.integers(1, 40),
    grace=st.integers(0, 7200),
    policy=st.sampled_from(cron.MISFIRE_POLICIES),
    limit=st.integers(0, 5),
    max_listed=st.integers(0, 20),
)
def test_misfire_plan_partitions_the_window_and_counts_exactly(
    scenario: tuple[str, str, str, datetime],
    hours: int,
    grace: int,
    policy: str,
    limit: int,
    max_listed: int,
) -> None:
    expr, seed, tz, first = scenario
    now = first + timedelta(hours=hours)
    until = now + timedelta(minutes=5)
    every = cron.occurrences_between(expr, tz, start=first - TICK, end=until, seed=seed)
    cutoff = now - timedelta(seconds=grace)
    late = [o for o in every if o < cutoff]
    on_time = [o for o in every if o >= cutoff]
    fired_late = {"skip": 0, "run_once": min(1, len(late)), "catch_up": min(limit, len(late))}[
        policy
    ]
    plan = cron.plan_misfire(
        expr, tz, seed=seed, next_run_at=first, now=now, until=until, grace_s=grace,
        policy=policy, catch_up_limit=limit, max_listed=max_listed,
    )  # fmt: skip
    kept = late[: len(late) - fired_late]
    assert plan.fire == late[len(late) - fired_late :] + on_time
    assert plan.skipped_total == len(kept)
    assert plan.skipped == kept[max(0, len(kept) - max_listed) :]
    assert plan.next_run_at == cron.next_after(expr, tz, after=until, seed=seed)


@PROPERTY_SETTINGS
@given(scenario=scenarios(), minutes=st.integers(0, 3 * 24 * 60))
def test_would_run_at_agrees_with_next_after(
    scenario: tuple[str, str, str, datetime], minutes: int
) -> None:
    expr, seed, tz, start = scenario
    at = start + timedelta(minutes=minutes)
    w = cron.would_run_at(expr, tz, seed=seed, at=at)
    floored = at.replace(second=0, microsecond=0)
    assert w.at == floored
    upcoming = cron.next_after(expr, tz, after=floored - TICK, seed=seed)
    assert w.is_occurrence == (upcoming == floored)
    assert w.scheduled_for == (floored if w.is_occurrence else None)
    assert w.next == cron.next_after(expr, tz, after=floored, seed=seed)
    if w.previous is not None:
        assert w.previous < floored
        assert cron.next_after(expr, tz, after=w.previous - TICK, seed=seed) == w.previous
        assert cron.next_after(expr, tz, after=w.previous, seed=seed) >= floored


@settings(max_examples=200, deadline=None)
@given(
    seed=st.uuids().map(str),
    instant=st.datetimes(
        min_value=datetime(2020, 1, 1),  # noqa: DTZ001 - hypothesis bounds are naive
        max_value=datetime(2035, 12, 31),  # noqa: DTZ001
        timezones=st.just(UTC),
    ),
    jitter=st.integers(0, 86_400),
)
def test_jitter_is_in_range_and_deterministic(seed: str, instant: datetime, jitter: int) -> None:
    value = cron.jitter_seconds(seed=seed, scheduled_for=instant, jitter_s=jitter)
    assert 0 <= value <= jitter
    assert cron.jitter_seconds(seed=seed, scheduled_for=instant, jitter_s=jitter) == value
    elsewhere = instant.astimezone(ZoneInfo("Pacific/Chatham"))
    assert cron.jitter_seconds(seed=seed, scheduled_for=elsewhere, jitter_s=jitter) == value


@settings(max_examples=100, deadline=None)
@given(expr=expressions(), seed=st.uuids().map(str))
def test_resolution_is_stable_and_resolves_to_plain_cron(expr: str, seed: str) -> None:
    try:
        resolved = cron.resolve(expr, seed=seed)
    except cron.CronError:
        assume(False)
        return
    assert cron.resolve(expr, seed=seed) == resolved
    items = [item for field in resolved.split() for item in field.split(",")]
    assert not any(item.upper().startswith("H") for item in items)
    assert cron.resolve(resolved, seed="any other seed") == resolved
    assert cron.describe(expr, seed=seed)
