"""Rows written straight to the tables, for states the services do not produce on demand."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import connection

from dispatch.models import Execution, Schedule


def execution_row(schedule: Schedule, at: datetime, **fields: Any) -> Execution:
    """An execution of `schedule` for its occurrence at `at` (scheduled_for), in the
    schedule's tenant and partition, due at `at` and "scheduled" unless `fields` say otherwise."""
    values: dict[str, Any] = {
        "tenant_id": schedule.tenant_id,
        "partition": schedule.partition,
        "due_at": at,
        "state": "scheduled",
    }
    if "tenant" in fields:
        del values["tenant_id"]
    return Execution.objects.create(schedule=schedule, scheduled_for=at, **(values | fields))


def rows_containing(needle: str) -> dict[str, int]:
    """Every table of the database, every column as text: where does `needle` appear?"""
    found: dict[str, int] = {}
    with connection.cursor() as cur:
        cur.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        for (table,) in cur.fetchall():
            # strpos, not LIKE: a URL-encoded needle's "%" would be a wildcard.
            query = f'SELECT count(*) FROM "{table}" t WHERE strpos(t::text, %s) > 0'  # noqa: S608 - catalog names
            cur.execute(query, [needle])
            count = cur.fetchone()[0]
            if count:
                found[table] = count
    return found
