"""Fill the stored expansion of every calendar saved before it existed.

With the bounded expander of today's code (dispatch/calendars.py) and leniently: a
row saved before the bounds (an .ics rule repeating every minute, filters that never
match) keeps its other dates and loses what is refused, instead of failing the
migration or taking minutes. The beat reads only these stored dates."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import migrations


def fill(apps: Any, schema_editor: Any) -> None:
    from dispatch import calendars

    Calendar = apps.get_model("dispatch", "Calendar")
    year = dt.datetime.now(dt.UTC).year
    for calendar in Calendar.objects.filter(expanded__isnull=True).iterator():
        dates = calendars.expand(
            calendar.name, calendar.sources, years=calendars.years_around(year)
        )
        calendar.expanded = calendars.stored_expansion(dates)
        calendar.expanded_for = year
        calendar.save(update_fields=["expanded", "expanded_for"])


class Migration(migrations.Migration):
    dependencies = [("dispatch", "0019_calendar_expanded")]

    operations = [migrations.RunPython(fill, migrations.RunPython.noop)]
