"""Calendar sources: validate them on write, expand them into a `DateSet` on demand.

A calendar's `sources` is a list of objects, each one of:

* ``{"type": "dates", "dates": ["2026-12-24", ...], "name": "office closed"}``
* ``{"type": "range", "start": "2026-12-24", "end": "2026-12-31", "name": "..."}``
  (inclusive; ranges of one calendar may not overlap or run backwards)
* ``{"type": "holidays", "country": "NL", "subdivision": null}`` (the `holidays`
  package; the years are computed as needed)
* ``{"type": "ics", "content": "BEGIN:VCALENDAR..."}`` or ``{"type": "ics", "url":
  "https://..."}``: a URL is fetched ONCE, at write time, through the SSRF guard and
  stored as content (a remote change needs a re-import, never moves a schedule);
  with both, the content is taken as it is and the url kept as its origin. The url
  follows the rules of target urls (no credentials, the save-time SSRF check).
* ``{"type": "preset", "preset": "weekends" | "business_days"}`` (business_days:
  Monday to Friday, for `only_calendars`)

What a calendar does is decided by the schedule that lists it: in
`exclude_calendars` its dates are excluded, in `only_calendars` they are the only
dates that run. The pure part (dispatch/timing/calendars.py) knows nothing of this.

Expansion is bounded: a recurring event is walked lazily up to the end of the
planning years, at most MAX_DATES starts and MAX_RULE_STEPS steps of the rule, and a
calendar's expansion within the CALENDAR_EXPAND_BUDGET_S budget; rules repeating
within a day (SECONDLY, MINUTELY, HOURLY) are refused, since a calendar holds dates.
A save expands the calendar once and stores the result on its row (Calendar.expanded,
for the planning years around Calendar.expanded_for): the beat only reads that.
"""

from __future__ import annotations

import datetime as dt
import http.client
import logging
import sys
import time
from collections.abc import Iterable, Iterator
from functools import lru_cache
from types import FrameType
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import dateutil.rrule  # type: ignore[import-untyped]  # no stubs here
from django.conf import settings

from dispatch.exceptions import InvalidSchedule
from dispatch.targets.common import credential_like
from dispatch.timing.calendars import DateSet

log = logging.getLogger("dispatch.calendars")

MAX_SOURCES = 20
MAX_DATES = 5000
MAX_ICS_BYTES = 1_000_000
MAX_LABEL = 200
PRESETS = {"weekends": frozenset({5, 6}), "business_days": frozenset({0, 1, 2, 3, 4})}
# A recurring event's rule may take this many steps (dateutil's calls, about one or two
# per day/week/month/year it looks at, and each occurrence) to cover the planning
# years: a daily rule from 1900 fits; a rule whose filters never match stops here.
MAX_RULE_STEPS = 100_000
# A calendar holds whole dates: rules that repeat within a day are refused.
SUBDAY_FREQS = frozenset({"SECONDLY", "MINUTELY", "HOURLY"})
_RRULE_FILE = dateutil.rrule.__file__
# The years a holiday or recurring-event source is expanded for around "now": the
# planners look at most five years ahead and about a year back (previous runs).
YEARS_BACK, YEARS_AHEAD = 1, 6


def _bad(index: int, key: str, reason: str) -> InvalidSchedule:
    return InvalidSchedule.field(f"sources[{index}].{key}" if key else f"sources[{index}]", reason)


def _date(index: int, key: str, value: Any) -> dt.date:
    if not isinstance(value, str):
        raise _bad(index, key, "must be a date YYYY-MM-DD")
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise _bad(index, key, f"{value[:40]!r} is not a date YYYY-MM-DD") from None


def _label(index: int, value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > MAX_LABEL or not value.isprintable():
        raise _bad(index, "name", f"must be printable text of at most {MAX_LABEL} characters")
    return value.strip()


def _holiday_codes() -> dict[str, tuple[str, ...]]:
    import holidays

    return {k: tuple(v) for k, v in holidays.list_supported_countries().items()}


def _clean_holidays(index: int, item: dict[str, Any]) -> dict[str, Any]:
    country, sub = item.get("country"), item.get("subdivision")
    codes = _holiday_codes()
    if not isinstance(country, str) or country.upper() not in codes:
        raise _bad(index, "country", f"unknown country code {str(country)[:20]!r} (ISO 3166-1)")
    country = country.upper()
    if sub is not None:
        subs = codes[country]
        if not isinstance(sub, str) or sub.upper() not in {s.upper() for s in subs}:
            known = ", ".join(subs[:30]) or "none"
            raise _bad(
                index,
                "subdivision",
                f"unknown subdivision {str(sub)[:20]!r} of {country} (known: {known})",
            )
        sub = next(s for s in subs if s.upper() == sub.upper())
    return {"type": "holidays", "country": country, "subdivision": sub}


def _fetch_ics(index: int, url: Any, *, tenant: Any) -> str:
    from dispatch.targets import http as http_target
    from dispatch.targets import netguard

    try:
        answer = http_target.bounded_request(
            "GET",
            url if isinstance(url, str) else "",
            allow=netguard.AllowList.parse(tenant.egress_allow),
            deadline_s=float(settings.CALENDAR_FETCH_TIMEOUT_S),
            max_bytes=MAX_ICS_BYTES,
        )
    except ValueError:
        raise _bad(index, "url", "must be an http(s) URL") from None
    except netguard.Denied as exc:
        raise _bad(index, "url", f"not allowed: {exc}") from None
    except TimeoutError:
        raise _bad(
            index,
            "url",
            f"could not be fetched within {settings.CALENDAR_FETCH_TIMEOUT_S} s",
        ) from None
    except (OSError, http.client.HTTPException) as exc:
        raise _bad(index, "url", f"could not be fetched: {type(exc).__name__}") from None
    if answer.status != 200:
        raise _bad(index, "url", f"answered HTTP {answer.status}, not 200")
    if len(answer.body) > MAX_ICS_BYTES:
        raise _bad(index, "url", f"is larger than {MAX_ICS_BYTES} bytes")
    return answer.body.decode("utf-8", "replace")


class Refused(ValueError):
    """A source the bounded expander will not expand; the message says why."""


class Budget:
    """The time one calendar's expansion may take (settings.CALENDAR_EXPAND_BUDGET_S),
    from its creation: checked between events and while a rule is walked."""

    def __init__(self, seconds: float | None = None) -> None:
        self.seconds = float(settings.CALENDAR_EXPAND_BUDGET_S) if seconds is None else seconds
        self.deadline = time.monotonic() + self.seconds

    def check(self) -> None:
        if time.monotonic() > self.deadline:
            raise Refused(
                f"expanding it takes longer than the calendar time budget of {self.seconds:g} s"
                " (CALENDAR_EXPAND_BUDGET_S)"
            )


class _Walk:
    """Counts the steps dateutil takes through a rule and stops it at MAX_RULE_STEPS or
    when the budget is spent.

    dateutil checks UNTIL only against occurrences it found: a rule whose BY filters
    never match (FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30) walks period by period to the year
    9999 (seconds of CPU) without ever handing back control. So the walk is watched
    from inside: a profile hook on this thread sees every Python call dateutil makes
    (one or two per period) and raises there. It is set only around each next() on
    the rule, and the caller's own hook is put back after."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.steps = 0

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename == _RRULE_FILE:
            self.count()

    def count(self) -> None:
        self.steps += 1
        if self.steps > MAX_RULE_STEPS:
            raise Refused(
                f"an RRULE takes more than {MAX_RULE_STEPS} steps to cover the planning years"
                " (its BY filters match rarely or never, or its DTSTART is far in the past)"
            )
        if self.steps % 256 == 0:
            self.budget.check()

    def next(self, occurrences: Iterator[dt.datetime]) -> dt.datetime | None:
        previous = sys.getprofile()
        sys.setprofile(self)
        try:
            return next(occurrences, None)
        finally:
            sys.setprofile(previous)


def _rule_starts(rule: Any, *, window: tuple[dt.date, dt.date], budget: Budget) -> list[dt.date]:
    """The start dates of a recurring event inside ``window``, walked lazily: it stops
    past the window's end, at MAX_DATES starts, or (Refused) at the step cap or the
    budget, never expanding the rule's whole span first."""
    walk = _Walk(budget)
    occurrences = iter(rule)
    starts: list[dt.date] = []
    while len(starts) < MAX_DATES:
        found = walk.next(occurrences)
        if found is None or found.date() > window[1]:
            break
        walk.count()  # an occurrence is a step too: BYHOUR/BYMINUTE multiply them
        if found.date() >= window[0] and (not starts or starts[-1] != found.date()):
            starts.append(found.date())
    return starts


def _rule_of(event: Any, first: dt.date) -> Any:
    recur = event["RRULE"]
    freq = [str(f).upper() for f in recur.get("FREQ", [])]
    if len(freq) == 1 and freq[0] in SUBDAY_FREQS:
        raise Refused(
            f"RRULE FREQ={freq[0]} repeats within a day; a calendar holds dates: use FREQ="
            "DAILY, WEEKLY, MONTHLY or YEARLY"
        )
    text = recur.to_ical()
    return dateutil.rrule.rrulestr(
        text.decode() if isinstance(text, bytes) else str(text),
        dtstart=dt.datetime.combine(first, dt.time()),
    )


def _ics_dates(
    content: str, *, window: tuple[dt.date, dt.date], budget: Budget, strict: bool
) -> dict[dt.date, str]:
    """Every date in ``window`` an .ics's events cover (all-day events: DTEND exclusive),
    recurring events walked with the bounds above. Strict (a save): Refused or
    ValueError for what does not parse or is refused. Otherwise (a stored row: the
    refresh, the migration, a window the row does not hold) an event that is refused
    is left out and logged, and a spent budget ends the expansion with what it has."""
    import icalendar

    cal = icalendar.Calendar.from_ical(content)
    out: dict[dt.date, str] = {}
    for event in cal.walk("VEVENT"):
        try:
            budget.check()
            start_prop = event.get("DTSTART")
            if start_prop is None:
                raise ValueError("an event has no DTSTART")
            start = start_prop.dt
            end_prop = event.get("DTEND")
            end = end_prop.dt if end_prop is not None else None
            label = str(event.get("SUMMARY", "")).strip()[:MAX_LABEL]
            first = start if not isinstance(start, dt.datetime) else start.date()
            if end is None:
                days = 1
            else:
                last = end if not isinstance(end, dt.datetime) else end.date()
                days = max(1, (last - first).days + (1 if isinstance(end, dt.datetime) else 0))
            starts = [first]
            if event.get("RRULE") is not None:
                starts = _rule_starts(_rule_of(event, first), window=window, budget=budget)
            for s in starts:
                for offset in range(min(days, 366)):
                    out.setdefault(s + dt.timedelta(days=offset), label)
                if len(out) > MAX_DATES * 2:
                    raise Refused(f"more than {MAX_DATES * 2} dates")
        except Exception as exc:
            if strict:
                raise
            log.warning("calendar .ics event left out of the expansion: %s", exc)
            if isinstance(exc, Refused) and time.monotonic() > budget.deadline:
                break
    return out


# Complete (strict) expansions by (content, window): a save checks a source, then
# stores its expansion, and schedules-as-code checks it once more before that.
_ICS_DONE: dict[tuple[str, dt.date, dt.date], tuple[tuple[dt.date, str], ...]] = {}
_ICS_DONE_MAX = 64


def _ics_expanded(
    content: str, *, window: tuple[dt.date, dt.date], budget: Budget, strict: bool
) -> tuple[tuple[dt.date, str], ...]:
    if not strict:
        return tuple(
            sorted(_ics_dates(content, window=window, budget=budget, strict=False).items())
        )
    key = (content, *window)
    found = _ICS_DONE.get(key)
    if found is None:
        found = tuple(
            sorted(_ics_dates(content, window=window, budget=budget, strict=True).items())
        )
        if len(_ICS_DONE) >= _ICS_DONE_MAX:
            _ICS_DONE.clear()
        _ICS_DONE[key] = found
    return found


def _clean_fetched_at(index: int, value: Any) -> str:
    if isinstance(value, str) and len(value) <= 40:
        try:
            dt.datetime.fromisoformat(value)
            return value
        except ValueError:
            pass
    raise _bad(index, "fetched_at", "must be the time the url was fetched, an ISO 8601 datetime")


def _clean_ics(index: int, item: dict[str, Any], *, tenant: Any, budget: Budget) -> dict[str, Any]:
    from dispatch.targets.http import clean_url

    url = item.get("url")
    content = item.get("content")
    if url is None and content is None:
        raise _bad(index, "content", "give content (the .ics text) or a url to fetch it from")
    if url is not None:
        if not isinstance(url, str) or len(url) > 2000:
            raise _bad(index, "url", "must be an http(s) URL of at most 2000 characters")
        # The rules of target and channel URLs: no credentials in it, and the
        # save-time SSRF check (look-alike spellings of loopback included).
        clean_url(url, tenant=tenant, field=f"sources[{index}].url")
    fetched_at = item.get("fetched_at")
    if content is None:
        content = _fetch_ics(index, url, tenant=tenant)
        fetched_at = dt.datetime.now(dt.UTC).isoformat()
    elif fetched_at is not None:
        fetched_at = _clean_fetched_at(index, fetched_at)
    # With both, the content is the calendar and the url only records where it came
    # from: an exported calendar (dispatch/selectors/definitions.py) applies again as
    # it is, without a fetch.
    if not isinstance(content, str) or len(content.encode()) > MAX_ICS_BYTES:
        raise _bad(index, "content", f"must be .ics text of at most {MAX_ICS_BYTES} bytes")
    try:
        found = _ics_expanded(content, window=_window(planning_years()), budget=budget, strict=True)
    except Refused as exc:
        raise _bad(index, "content", str(exc)) from None
    except Exception as exc:  # icalendar raises many kinds; any is "does not parse"
        raise _bad(index, "content", f"is not a valid iCalendar file: {exc}"[:300]) from None
    if not found:
        raise _bad(index, "content", "has no events (VEVENT with DTSTART)")
    cleaned = {"type": "ics", "content": content}
    if url is not None:
        cleaned["url"] = url
        if fetched_at is not None:
            cleaned["fetched_at"] = fetched_at
    return cleaned


def clean_sources(value: Any, *, tenant: Any, budget: Budget | None = None) -> list[dict[str, Any]]:
    """The sources as stored, or InvalidSchedule naming `sources[i].field` and why
    (an .ics is expanded once here, within ``budget``, to refuse what cannot be)."""
    budget = budget or Budget()
    if not isinstance(value, list) or not value:
        raise InvalidSchedule.field("sources", "must be a non-empty list of sources")
    if len(value) > MAX_SOURCES:
        raise InvalidSchedule.field("sources", f"at most {MAX_SOURCES} sources")
    out: list[dict[str, Any]] = []
    ranges: list[tuple[dt.date, dt.date, int]] = []
    total = 0
    for index, item in enumerate(value):
        if not isinstance(item, dict):
            raise _bad(index, "", "must be an object with a type")
        kind = item.get("type")
        if kind == "dates":
            days = item.get("dates")
            if not isinstance(days, list) or not days:
                raise _bad(index, "dates", "must be a non-empty list of dates YYYY-MM-DD")
            total += len(days)
            if total > MAX_DATES:
                raise _bad(index, "dates", f"a calendar lists at most {MAX_DATES} dates")
            parsed = sorted({_date(index, "dates", d) for d in days})
            out.append(
                {
                    "type": "dates",
                    "dates": [d.isoformat() for d in parsed],
                    "name": _label(index, item.get("name")),
                }
            )
        elif kind == "range":
            start = _date(index, "start", item.get("start"))
            end = _date(index, "end", item.get("end"))
            if end < start:
                raise _bad(index, "end", f"{end} is before start {start} (the range is inverted)")
            if (end - start).days > MAX_DATES:
                raise _bad(index, "end", f"a range spans at most {MAX_DATES} days")
            for lo, hi, other in ranges:
                if start <= hi and lo <= end:
                    raise _bad(index, "start", f"overlaps sources[{other}] ({lo} to {hi})")
            ranges.append((start, end, index))
            out.append(
                {
                    "type": "range",
                    "start": start.isoformat(),
                    "end": end.isoformat(),
                    "name": _label(index, item.get("name")),
                }
            )
        elif kind == "holidays":
            out.append(_clean_holidays(index, item))
        elif kind == "ics":
            out.append(_clean_ics(index, item, tenant=tenant, budget=budget))
        elif kind == "preset":
            preset = item.get("preset")
            if preset not in PRESETS:
                raise _bad(index, "preset", f"must be one of {', '.join(PRESETS)}")
            out.append({"type": "preset", "preset": preset})
        else:
            raise _bad(index, "type", "must be dates, range, holidays, ics or preset")
    return out


@lru_cache(maxsize=512)
def _holiday_dates(country: str, sub: str | None, years: tuple[int, ...]) -> tuple[Any, ...]:
    import holidays

    found = holidays.country_holidays(country, subdiv=sub, years=years)
    return tuple(sorted(found.items()))


def planning_years(today: dt.date | None = None) -> tuple[int, ...]:
    year = (today or dt.datetime.now(dt.UTC).date()).year
    return years_around(year)


def years_around(year: int) -> tuple[int, ...]:
    """The planning years of an expansion made in ``year``."""
    return tuple(range(year - YEARS_BACK, year + YEARS_AHEAD + 1))


def _window(years: tuple[int, ...]) -> tuple[dt.date, dt.date]:
    return dt.date(min(years), 1, 1), dt.date(max(years), 12, 31)


def expand(
    name: str,
    sources: Iterable[dict[str, Any]],
    *,
    years: tuple[int, ...],
    budget: Budget | None = None,
    strict: bool = False,
) -> DateSet:
    """The calendar's dates (with labels) and weekdays for the planning ``years``, with
    the bounded expander. Strict (a save): InvalidSchedule naming the source refused.
    Otherwise (a stored row) what is refused is left out (see _ics_dates)."""
    budget = budget or Budget()
    window = _window(years)
    dates: dict[dt.date, str] = {}
    weekdays: set[int] = set()
    for index, item in enumerate(sources):
        kind = item["type"]
        if kind == "dates":
            for text in item["dates"]:
                dates.setdefault(dt.date.fromisoformat(text), item.get("name") or "")
        elif kind == "range":
            day, end = dt.date.fromisoformat(item["start"]), dt.date.fromisoformat(item["end"])
            for offset in range((end - day).days + 1):  # no day after 9999-12-31
                dates.setdefault(day + dt.timedelta(days=offset), item.get("name") or "")
        elif kind == "holidays":
            for day, label in _holiday_dates(item["country"], item["subdivision"], years):
                dates.setdefault(day, str(label))
        elif kind == "ics":
            try:
                found = _ics_expanded(item["content"], window=window, budget=budget, strict=strict)
            except Refused as exc:
                raise _bad(index, "content", str(exc)) from None
            for day, label in found:
                dates.setdefault(day, label)
        elif kind == "preset":
            weekdays |= PRESETS[item["preset"]]
    return DateSet.of(name, dates, weekdays)


# --------------------------------------------------------------------------- stored dates
# A calendar's expansion for its planning years is stored on its row (Calendar.expanded,
# written at save and by the refresh): the beat reads it and never expands.


def stored_expansion(dates: DateSet) -> dict[str, Any]:
    return {
        "dates": [[day.isoformat(), label] for day, label in dates.dates],
        "weekdays": sorted(dates.weekdays),
    }


def stored_dates(name: str, stored: dict[str, Any] | None) -> DateSet:
    """The DateSet of a stored expansion; an empty one for a row not expanded yet (the
    refresh expands it, outside the firing path)."""
    if not stored:
        return DateSet(name)
    days = {dt.date.fromisoformat(day): label for day, label in stored.get("dates", ())}
    return DateSet.of(name, days, stored.get("weekdays", ()))


# --------------------------------------------------------------------------- showing sources


def redacted_url(url: str) -> str:
    """``url`` with its userinfo and credential-like query values replaced: how a url
    stored before .ics urls were checked like target urls is shown (the check itself is
    dispatch.targets.http.clean_url)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(not a valid URL)"
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "REDACTED@" + netloc.rsplit("@", 1)[1]
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    query = parts.query
    if any(credential_like(key, query=True) for key, _ in pairs):
        query = urlencode(
            [(k, "REDACTED" if credential_like(k, query=True) else v) for k, v in pairs]
        )
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def shown_sources(sources: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Sources as stored, their urls redacted (exports: an .ics keeps its content)."""
    return [
        item | {"url": redacted_url(item["url"])} if isinstance(item.get("url"), str) else item
        for item in sources
    ]


def source_summary(sources: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Sources as the API shows them: an imported .ics without its (large) content, urls
    redacted."""
    out = []
    for item in shown_sources(sources):
        if item["type"] == "ics":
            shown = {k: v for k, v in item.items() if k != "content"}
            shown["bytes"] = len(item["content"].encode())
            out.append(shown)
        else:
            out.append(item)
    return out
