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
  with both, the content is taken as it is and the url kept as its origin
* ``{"type": "preset", "preset": "weekends" | "business_days"}`` (business_days:
  Monday to Friday, for `only_calendars`)

What a calendar does is decided by the schedule that lists it: in
`exclude_calendars` its dates are excluded, in `only_calendars` they are the only
dates that run. The pure part (dispatch/timing/calendars.py) knows nothing of this.
"""

from __future__ import annotations

import datetime as dt
import http.client
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from django.conf import settings

from dispatch.exceptions import InvalidSchedule
from dispatch.timing.calendars import DateSet

MAX_SOURCES = 20
MAX_DATES = 5000
MAX_ICS_BYTES = 1_000_000
MAX_LABEL = 200
PRESETS = {"weekends": frozenset({5, 6}), "business_days": frozenset({0, 1, 2, 3, 4})}
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


def _ics_dates(content: str) -> dict[dt.date, str]:
    """Every date an .ics's events cover (all-day events: DTEND exclusive); ValueError
    if it does not parse. Recurring events are expanded over the planning years."""
    import icalendar
    from dateutil.rrule import rrulestr  # type: ignore[import-untyped]  # no stubs here

    cal = icalendar.Calendar.from_ical(content)
    this_year = dt.datetime.now(dt.UTC).date().year
    window = (dt.date(this_year - YEARS_BACK, 1, 1), dt.date(this_year + YEARS_AHEAD, 12, 31))
    out: dict[dt.date, str] = {}
    for event in cal.walk("VEVENT"):
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
            text = event["RRULE"].to_ical()
            rule = rrulestr(
                text.decode() if isinstance(text, bytes) else str(text),
                dtstart=dt.datetime.combine(first, dt.time()),
            )
            lo = dt.datetime.combine(window[0], dt.time())
            hi = dt.datetime.combine(window[1], dt.time())
            starts = [d.date() for d in rule.between(lo, hi, inc=True)][:MAX_DATES]
        for s in starts:
            for offset in range(min(days, 366)):
                out.setdefault(s + dt.timedelta(days=offset), label)
        if len(out) > MAX_DATES * 2:
            raise ValueError(f"more than {MAX_DATES * 2} dates")
    return out


def _clean_ics(index: int, item: dict[str, Any], *, tenant: Any) -> dict[str, Any]:
    url = item.get("url")
    content = item.get("content")
    if url is None and content is None:
        raise _bad(index, "content", "give content (the .ics text) or a url to fetch it from")
    if url is not None and (not isinstance(url, str) or len(url) > 2000):
        raise _bad(index, "url", "must be an http(s) URL of at most 2000 characters")
    fetched_at = item.get("fetched_at")
    if content is None:
        content = _fetch_ics(index, url, tenant=tenant)
        fetched_at = dt.datetime.now(dt.UTC).isoformat()
    elif fetched_at is not None and not (isinstance(fetched_at, str) and len(fetched_at) <= 40):
        raise _bad(index, "fetched_at", "must be the time the url was fetched (ISO 8601)")
    # With both, the content is the calendar and the url only records where it came
    # from: an exported calendar (dispatch/selectors/definitions.py) applies again as
    # it is, without a fetch.
    if not isinstance(content, str) or len(content.encode()) > MAX_ICS_BYTES:
        raise _bad(index, "content", f"must be .ics text of at most {MAX_ICS_BYTES} bytes")
    try:
        found = _ics_dates(content)
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


def clean_sources(value: Any, *, tenant: Any) -> list[dict[str, Any]]:
    """The sources as stored, or InvalidSchedule naming `sources[i].field` and why."""
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
            out.append(_clean_ics(index, item, tenant=tenant))
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


@lru_cache(maxsize=256)
def _ics_cached(content: str) -> tuple[tuple[dt.date, str], ...]:
    return tuple(sorted(_ics_dates(content).items()))


def planning_years(today: dt.date | None = None) -> tuple[int, ...]:
    year = (today or dt.datetime.now(dt.UTC).date()).year
    return tuple(range(year - YEARS_BACK, year + YEARS_AHEAD + 1))


def expand(name: str, sources: Iterable[dict[str, Any]], *, years: tuple[int, ...]) -> DateSet:
    """The calendar's dates (with labels) and weekdays for the planning ``years``."""
    dates: dict[dt.date, str] = {}
    weekdays: set[int] = set()
    for item in sources:
        kind = item["type"]
        if kind == "dates":
            for text in item["dates"]:
                dates.setdefault(dt.date.fromisoformat(text), item.get("name") or "")
        elif kind == "range":
            day, end = dt.date.fromisoformat(item["start"]), dt.date.fromisoformat(item["end"])
            while day <= end:
                dates.setdefault(day, item.get("name") or "")
                day += dt.timedelta(days=1)
        elif kind == "holidays":
            for day, label in _holiday_dates(item["country"], item["subdivision"], years):
                dates.setdefault(day, str(label))
        elif kind == "ics":
            for day, label in _ics_cached(item["content"]):
                dates.setdefault(day, label)
        elif kind == "preset":
            weekdays |= PRESETS[item["preset"]]
    return DateSet.of(name, dates, weekdays)


def source_summary(sources: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Sources as the API shows them: an imported .ics without its (large) content."""
    out = []
    for item in sources:
        if item["type"] == "ics":
            shown = {k: v for k, v in item.items() if k != "content"}
            shown["bytes"] = len(item["content"].encode())
            out.append(shown)
        else:
            out.append(item)
    return out
