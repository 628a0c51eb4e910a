"""Executions and their events become tables partitioned by day
(docs/explanation/history.md).

* `dispatch_execution` by RANGE (scheduled_for), `dispatch_executionevent` by RANGE
  (at). Each has one partition per UTC day from the oldest day it holds (at most
  40 days back) to a week ahead, plus two catch-alls: `_before` (MINVALUE up to the
  first day) and `_after` (from the day after the last up to MAXVALUE). There is
  no DEFAULT partition: PostgreSQL refuses DETACH ... CONCURRENTLY on a table that
  has one, and retention detaches concurrently. The beats' maintenance step keeps
  the days ahead (dispatch/history/partitions.py).
* A primary key or unique constraint of a partitioned table must contain the
  partition key: the execution's key is (id, scheduled_for) — Django still reads
  `id` as the key, which stays unique, being random — and the occurrence key
  UNIQUE (schedule_id, scheduled_for) is kept as it was. The event's key is (id, at).
* No foreign key can reference `dispatch_execution` by `id` alone any more: the
  event's execution_id keeps its index but loses its constraint (the ORM's
  on_delete still cascades; retention drops an execution's day with its events').
  The executions' own foreign keys (schedule, tenant, backfill) stay.
* `dispatch_execution_id(timestamptz)`: a version 7 UUID whose first 48 bits are
  the occurrence's milliseconds, for the SQL writers (dispatch/history/ids.py).

Every row is copied (the test checks counts and checksums before and after); the
SQL is inline, not the named statements: a migration is history.
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

from django.db import migrations, models

import dispatch.history.ids

AHEAD_DAYS = 7
BACK_DAYS = 40

TABLES = (
    # table, partition key, primary key, unique constraints to keep (name, columns)
    (
        "dispatch_execution",
        "scheduled_for",
        "id, scheduled_for",
        [("execution_one_per_occurrence", "schedule_id, scheduled_for")],
    ),
    ("dispatch_executionevent", "at", "id, at", []),
)

ID_FUNCTION = """
CREATE OR REPLACE FUNCTION dispatch_execution_id(ts timestamptz) RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    SELECT encode(set_byte(
        overlay(uuid_send(gen_random_uuid())
                PLACING substring(int8send(floor(extract(epoch FROM ts) * 1000)::bigint) FROM 3)
                FROM 1 FOR 6),
        6, (get_byte(uuid_send(gen_random_uuid()), 6) & 15) | 112), 'hex')::uuid
$$
"""


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _day(d: date) -> str:
    return f"'{d.isoformat()} 00:00:00+00'"


def _partition(cur: Any, table: str, name: str, lo: str, hi: str) -> None:
    cur.execute(
        f"CREATE TABLE {_q(name)} PARTITION OF {_q(table)} FOR VALUES FROM ({lo}) TO ({hi})"
    )


def _rebuild(
    cur: Any, table: str, key: str, pk: str, uniques: list[tuple[str, str]], *, partition: bool
) -> None:
    """The table made again, partitioned by day on `key` or (backwards) plain, with
    every row, index, unique and foreign key it had."""
    old = f"{table}_old"
    cur.execute(f"ALTER TABLE {_q(table)} RENAME TO {_q(old)}")
    cur.execute(
        "SELECT indexrelid::regclass::text, pg_get_indexdef(indexrelid) FROM pg_index"
        " WHERE indrelid = %s::regclass AND NOT indisprimary"
        " AND indexrelid NOT IN (SELECT conindid FROM pg_constraint WHERE conrelid = %s::regclass)",
        [old, old],
    )
    indexes = cur.fetchall()
    cur.execute(
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE conrelid = %s::regclass AND contype = 'f'",
        [old],
    )
    foreign = cur.fetchall()
    cur.execute(
        f"CREATE TABLE {_q(table)} (LIKE {_q(old)} INCLUDING DEFAULTS INCLUDING CONSTRAINTS"
        f" INCLUDING IDENTITY)" + (f" PARTITION BY RANGE ({_q(key)})" if partition else "")
    )
    if partition:
        _days(cur, table, key, old)
    cur.execute(f"INSERT INTO {_q(table)} OVERRIDING SYSTEM VALUE SELECT * FROM {_q(old)}")
    # The identity sequence is new: it continues after the copied ids.
    cur.execute("SELECT pg_get_serial_sequence(%s, 'id') IS NOT NULL", [table])
    if cur.fetchone()[0]:
        cur.execute(
            f"SELECT setval(pg_get_serial_sequence(%s, 'id'),"
            f" GREATEST((SELECT max(id) FROM {_q(table)}), 1))",
            [table],
        )
    cur.execute(f"DROP TABLE {_q(old)}")
    cur.execute(f"ALTER TABLE {_q(table)} ADD PRIMARY KEY ({pk})")
    for name, columns in uniques:
        cur.execute(f"ALTER TABLE {_q(table)} ADD CONSTRAINT {_q(name)} UNIQUE ({columns})")
    for name, definition in foreign:
        cur.execute(f"ALTER TABLE {_q(table)} ADD CONSTRAINT {_q(name)} {definition}")
    for _name, definition in indexes:
        # A partitioned table's own index reads "ON ONLY" (its partitions' are attached).
        for on in (f" ON ONLY public.{old} ", f" ON public.{old} "):
            definition = definition.replace(on, f" ON public.{table} ")
        cur.execute(definition)


def _days(cur: Any, table: str, key: str, old: str) -> None:
    """The day partitions for the rows in `old` and a week ahead, between the two
    catch-alls."""
    cur.execute(
        f"SELECT (min({_q(key)}) AT TIME ZONE 'UTC')::date, (now() AT TIME ZONE 'UTC')::date FROM {_q(old)}"
    )
    oldest, today = cur.fetchone()
    first = max(min(oldest or today, today), today - timedelta(days=BACK_DAYS))
    last = today + timedelta(days=AHEAD_DAYS)
    _partition(cur, table, f"{table}_before", "MINVALUE", _day(first))
    day = first
    while day <= last:
        _partition(cur, table, f"{table}_p{day:%Y%m%d}", _day(day), _day(day + timedelta(days=1)))
        day += timedelta(days=1)
    _partition(cur, table, f"{table}_after", _day(last + timedelta(days=1)), "MAXVALUE")


def forwards(apps: Any, schema_editor: Any) -> None:
    with schema_editor.connection.cursor() as cur:
        cur.execute(ID_FUNCTION)
        for table, key, pk, uniques in TABLES:
            _rebuild(cur, table, key, pk, uniques, partition=True)


def backwards(apps: Any, schema_editor: Any) -> None:
    # Plain tables again (the migration tests go back through here); the ids keep
    # their layout, which the old code reads as any UUID.
    with schema_editor.connection.cursor() as cur:
        for table, key, _pk, uniques in TABLES:
            _rebuild(cur, table, key, "id", uniques, partition=False)


class Migration(migrations.Migration):
    dependencies = [("dispatch", "0022_logical_partitions")]

    operations = [
        migrations.AlterField(
            model_name="executionevent",
            name="execution",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                null=True,
                on_delete=models.deletion.CASCADE,
                related_name="events",
                to="dispatch.execution",
            ),
        ),
        migrations.AlterField(
            model_name="execution",
            name="id",
            field=dispatch.history.ids.ExecutionIdField(
                editable=False, primary_key=True, serialize=False
            ),
        ),
        migrations.RunPython(forwards, backwards),
    ]
