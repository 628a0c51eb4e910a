"""The migration that stores calendars' dates keeps every calendar and fills its dates
with the bounded expander — a row saved before the bounds (an .ics rule every minute)
included: its refused event is left out, the migration does not hang on it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest

from dispatch import calendars
from dispatch.models import Calendar
from tenants.models import Tenant
from tests.support.migrations import migrate_to_latest, schema_at

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("dispatch", "0018_concurrency_keys")]
MINUTELY_AND_STOCKTAKE = (
    "BEGIN:VCALENDAR\r\n"
    "BEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20250101\r\nRRULE:FREQ=MINUTELY\r\nSUMMARY:x\r\n"
    "END:VEVENT\r\n"
    "BEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20270105\r\nSUMMARY:Stocktake\r\nEND:VEVENT\r\n"
    "END:VCALENDAR\r\n"
)


@pytest.fixture
def before_expanded() -> Iterator[Any]:
    with schema_at(BEFORE) as apps:
        yield apps


def test_the_migration_keeps_every_calendar_and_fills_its_dates(
    before_expanded: Any, tenant: Tenant
) -> None:
    old = before_expanded.get_model("dispatch", "Calendar")
    rows = {
        "NL": [{"type": "holidays", "country": "NL", "subdivision": None}],
        "weekends": [{"type": "preset", "preset": "weekends"}],
        "hostile": [{"type": "ics", "content": MINUTELY_AND_STOCKTAKE}],
        "closed": [{"type": "dates", "dates": ["2030-01-02"], "name": "closed"}],
    }
    for name, sources in rows.items():
        old.objects.create(tenant_id=tenant.pk, name=name, sources=sources)

    migrate_to_latest()

    year = dt.datetime.now(dt.UTC).year
    stored = {c.name: c for c in Calendar.objects.all()}
    assert sorted(stored) == sorted(rows)
    assert {c.sources == rows[name] for name, c in stored.items()} == {True}
    assert {c.expanded_for for c in stored.values()} == {year}
    last = year + calendars.YEARS_AHEAD
    assert [f"{last}-12-25", "Christmas Day"] in stored["NL"].expanded["dates"]
    assert stored["weekends"].expanded == {"dates": [], "weekdays": [5, 6]}
    assert stored["hostile"].expanded == {"dates": [["2027-01-05", "Stocktake"]], "weekdays": []}
    assert stored["closed"].expanded == {"dates": [["2030-01-02", "closed"]], "weekdays": []}
