"""Emptying the test database after a transactional test, in milliseconds instead of a second.

Django's TransactionTestCase (what pytest-django runs `django_db(transaction=True)`
tests with) empties every table after each test with `flush`: one TRUNCATE of all
~30 tables, then the post_migrate signal re-creating the content types and
permissions it removed. A TRUNCATE gives every table and index a new file, so it
costs 0.5-0.9 s on this kind of machine whether the tables hold a row or not —
about a second per transactional test, several minutes per suite (measured: see
docs/how-to/run-the-tests.md, "Between transactional tests"). A DELETE of the few
rows a test leaves is a few milliseconds.

The state a test starts from is the same as after `flush`: every Django table is
empty except the content types and permissions, which post_migrate would re-create
anyway (it still runs whenever their number changed, and re-creates whatever a test
removed). Sequences are not
reset, as `flush` does not reset them either. Every foreign key Django creates is
DEFERRABLE INITIALLY DEFERRED, so the DELETEs run in one transaction in any order.
A table a trigger guards against DELETE (the append-only audit log) is truncated
instead, only when it holds rows. Anything else — a test that asked for
serialized_rollback or available_apps, a database that is not PostgreSQL, a table
holding more rows than a DELETE is quick for, a database error — goes through
Django's own flush, unchanged.
"""

from __future__ import annotations

from typing import Any

from django.core.management.sql import emit_post_migrate_signal
from django.db import DatabaseError, connections, transaction
from django.test import TransactionTestCase

# Above this many rows in one table a TRUNCATE is the quicker way (DELETE checks the
# deferred foreign keys row by row at commit).
DELETE_MAX_ROWS = 10_000
# Kept: post_migrate re-creates exactly these rows after a flush.
KEPT = frozenset({"django_content_type", "auth_permission"})
# A DELETE leaves dead rows where TRUNCATE left a new, empty file. On a server whose
# autovacuum is off (this kind of machine's PostgreSQL) nothing reclaims them: over a
# suite the tables and their partial indexes keep every row ever written, scans
# slow down and plans change (a grown partial index once turned a bench smoke's
# index scan into a seq scan). A table is vacuumed once this many rows died in it.
VACUUM_AFTER_ROWS = 2_000

# Private Django API (not in the stubs): the method `flush` is called from.
_django_fixture_teardown: Any = getattr(TransactionTestCase, "_fixture_teardown")  # noqa: B009


def _delete_guarded(cursor: Any) -> set[str]:
    """Tables with a (non-internal) trigger on DELETE: DELETE would be refused there."""
    cursor.execute(
        "SELECT DISTINCT c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid"
        " WHERE NOT t.tgisinternal AND (t.tgtype & 8) <> 0"  # TRIGGER_TYPE_DELETE
    )
    return {row[0] for row in cursor.fetchall()}


def empty_tables(alias: str) -> bool:
    """Empty every Django table of `alias` but KEPT; False (nothing done) where the
    caller should use Django's flush instead."""
    conn = connections[alias]
    if conn.vendor != "postgresql":
        return False
    tables = sorted(
        set(conn.introspection.django_table_names(only_existing=True, include_views=False)) - KEPT
    )
    if not tables:
        return True
    quote = conn.ops.quote_name
    with transaction.atomic(using=alias), conn.cursor() as cursor:
        cursor.execute(
            " UNION ALL ".join(
                f"SELECT %s, (SELECT count(*) FROM (SELECT 1 FROM {quote(t)} LIMIT %s) s)"  # noqa: S608 - catalog names
                for t in tables
            ),
            [p for t in tables for p in (t, DELETE_MAX_ROWS + 1)],
        )
        rows = dict(cursor.fetchall())
        if max(rows.values()) > DELETE_MAX_ROWS:
            transaction.set_rollback(True, using=alias)
            return False
        guarded = _delete_guarded(cursor) & set(tables)
        statements = [f"DELETE FROM {quote(t)}" for t in tables if t not in guarded]  # noqa: S608
        statements += [f"TRUNCATE {quote(t)}" for t in sorted(guarded) if rows[t]]
        cursor.execute("; ".join(statements))
    dead = _dead.setdefault(alias, {})
    for t in tables:
        if t not in guarded and rows[t]:
            dead[t] = dead.get(t, 0) + rows[t]
    return True


# Per database and table: rows deleted since the table was last vacuumed.
_dead: dict[str, dict[str, int]] = {}


def vacuum_dead(alias: str) -> list[str]:
    """VACUUM the tables holding VACUUM_AFTER_ROWS dead rows or more (emptied, so it is
    quick and gives their pages back); returns their names. Needs autocommit."""
    conn = connections[alias]
    dead = _dead.get(alias, {})
    due = sorted(t for t, n in dead.items() if n >= VACUUM_AFTER_ROWS)
    if not due or conn.in_atomic_block:
        return []
    with conn.cursor() as cursor:
        for t in due:
            cursor.execute(f"VACUUM {conn.ops.quote_name(t)}")
            dead.pop(t)
    return due


# Per database: the KEPT tables' row counts right after post_migrate last ran.
_complete: dict[str, tuple[int, ...]] = {}


def kept_counts(alias: str) -> tuple[int, ...]:
    with connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT (SELECT count(*) FROM django_content_type),"
            " (SELECT count(*) FROM auth_permission)"
        )
        return tuple(cursor.fetchone())


def reset(alias: str) -> bool:
    """The database as Django's flush leaves it; False (nothing done) where the caller
    should use Django's flush instead."""
    try:
        if not empty_tables(alias):
            return False
    except DatabaseError:
        return False
    # post_migrate only creates what is missing: with as many content types and
    # permissions as right after it last ran, there is nothing to create.
    if _complete.get(alias) != kept_counts(alias):
        emit_post_migrate_signal(verbosity=0, interactive=False, db=alias)
        _complete[alias] = kept_counts(alias)
    vacuum_dead(alias)
    return True


def _fixture_teardown(self: Any) -> None:
    if self.available_apps is not None or self.serialized_rollback:
        _django_fixture_teardown(self)
        return
    if not all(reset(alias) for alias in self._databases_names(include_mirrors=False)):
        _django_fixture_teardown(self)


def install() -> None:
    """Use the quick reset for every transactional test of the session."""
    setattr(TransactionTestCase, "_fixture_teardown", _fixture_teardown)  # noqa: B010
