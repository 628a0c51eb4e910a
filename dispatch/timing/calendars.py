"""Date filters: which LOCAL dates a schedule may run on, and why not.

Pure and importable without Django, `holidays` or `icalendar` (this package is
symlinked into the Python client for local previews). Calendar sources (explicit
dates, public holidays, .ics imports, presets) are expanded elsewhere
(dispatch/calendars/) into `DateSet`s; a schedule combines its calendars into one
`DateFilter`, which the cron functions take as ``dates=``.

Semantics: a date is excluded when any *exclude* set contains it; when the
schedule has *only* sets, a date must also be in at least one of them. The date
is the occurrence's local date in the schedule's zone (a 23:30 run in
Europe/Amsterdam on 24 December is on the 24th whatever UTC says).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, timedelta

__all__ = ["SEARCH_DAYS", "DateFilter", "DateSet"]

# How far past an excluded date an occurrence is looked for before the schedule is
# declared to never fire (the bounded-skipping rule: five years, leap days included).
SEARCH_DAYS = 5 * 366

_WEEKDAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


@dataclass(frozen=True)
class DateSet:
    """One calendar, expanded: its name, dates with labels, and weekdays (0 = Monday)."""

    name: str
    dates: tuple[tuple[date, str], ...] = ()
    weekdays: frozenset[int] = frozenset()
    _lookup: Mapping[date, str] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_lookup", dict(self.dates))

    @classmethod
    def of(cls, name: str, dates: Mapping[date, str], weekdays: Iterable[int] = ()) -> DateSet:
        return cls(name, tuple(sorted(dates.items())), frozenset(weekdays))

    def label(self, day: date) -> str | None:
        """Why ``day`` is in the set ("Christmas Day", "Saturday"), None if it is not."""
        text = self._lookup.get(day)
        if text is not None:
            return text
        if day.weekday() in self.weekdays:
            return _WEEKDAY_NAMES[day.weekday()]
        return None


@dataclass(frozen=True)
class DateFilter:
    """The exclude and only sets of one schedule; hashable (a beat memo key)."""

    exclude: tuple[DateSet, ...] = ()
    only: tuple[DateSet, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.exclude and not self.only

    def reason(self, day: date) -> str | None:
        """Why no occurrence runs on local date ``day``, or None if they run."""
        for dates in self.exclude:
            label = dates.label(day)
            if label is not None:
                return f"excluded by calendar '{dates.name}': {day.isoformat()} {label}".rstrip()
        if self.only and all(dates.label(day) is None for dates in self.only):
            names = ", ".join(f"'{d.name}'" for d in self.only)
            which = "calendar" if len(self.only) == 1 else "any of the calendars"
            return f"excluded: {day.isoformat()} is not in {which} {names}"
        return None

    def allows(self, day: date) -> bool:
        return self.reason(day) is None

    def next_allowed(self, day: date, *, last: date) -> date | None:
        """The first allowed date after ``day``, up to ``last``; None if there is none."""
        current = day
        while current < last:
            current += timedelta(days=1)
            if self.allows(current):
                return current
        return None
