"""core.db.unavailable_reason on the errors a real PostgreSQL gives: refused and
read-only connects, a write on a read-only session, a session the server ended, a
lock and a statement timeout, and the request's own errors (never an outage) — raw
from psycopg and as Django wraps them for the views."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection

from core.db import Unavailable, unavailable_reason
from tests.support.net import free_port
from tests.support.procs import db_conninfo

pytestmark = pytest.mark.django_db


@pytest.fixture
def session() -> Iterator[Callable[..., psycopg.Connection[Any]]]:
    """`session(**options)`: a new autocommit connection to the test database."""
    opened: list[psycopg.Connection[Any]] = []

    def open_one(**options: Any) -> psycopg.Connection[Any]:
        conn = psycopg.connect(db_conninfo(), autocommit=True, **options)
        opened.append(conn)
        return conn

    yield open_one
    for conn in opened:
        conn.close()


def raised(call: Callable[[], object]) -> BaseException:
    try:
        call()
    except Exception as exc:
        return exc
    raise AssertionError("no error")


def both_ways(exc: BaseException) -> tuple[Unavailable | None, Unavailable | None]:
    """The reason for psycopg's error, and for the one Django's views see (its own
    class, psycopg's as the cause: what every ORM query and named statement raise)."""

    def reraise() -> None:
        with connection.wrap_database_errors:
            raise exc

    wrapped = raised(reraise)
    assert type(wrapped).__module__ == "django.db.utils" and wrapped.__cause__ is exc
    return unavailable_reason(exc), unavailable_reason(wrapped)


def test_connects_that_fail_are_unreachable_or_read_only(session: Callable[..., Any]) -> None:
    refused = raised(lambda: psycopg.connect(f"postgresql://postgres@127.0.0.1:{free_port()}/x"))
    assert both_ways(refused) == (Unavailable.UNREACHABLE, Unavailable.UNREACHABLE)
    # libpq's target_session_attrs=read-write meeting only a read-only server (what a
    # multi-host URL meets mid fail-over): no SQLSTATE, only its text.
    only_read_only = raised(
        lambda: session(
            target_session_attrs="read-write", options="-c default_transaction_read_only=on"
        )
    )
    assert "session is read-only" in str(only_read_only)
    assert both_ways(only_read_only) == (Unavailable.READ_ONLY, Unavailable.READ_ONLY)


def test_a_write_on_a_read_only_session_is_read_only(session: Callable[..., Any]) -> None:
    conn = session(options="-c default_transaction_read_only=on")
    assert conn.execute("SELECT count(*) FROM django_migrations").fetchone()[0] > 0  # reads work
    refused = raised(lambda: conn.execute("CREATE TABLE never_made (a int)"))
    assert isinstance(refused, psycopg.errors.ReadOnlySqlTransaction)
    assert both_ways(refused) == (Unavailable.READ_ONLY, Unavailable.READ_ONLY)


def test_a_session_the_server_ended_is_unreachable(session: Callable[..., Any]) -> None:
    victim, killer = session(), session()
    killer.execute("SELECT pg_terminate_backend(%s)", [victim.info.backend_pid])
    ended = raised(lambda: victim.execute("SELECT 1"))
    assert isinstance(ended, psycopg.errors.AdminShutdown)  # 57P01, as a switchover's old primary
    assert both_ways(ended) == (Unavailable.UNREACHABLE, Unavailable.UNREACHABLE)
    closed = raised(lambda: victim.execute("SELECT 1"))  # and every use after it
    assert both_ways(closed) == (Unavailable.UNREACHABLE, Unavailable.UNREACHABLE)


def test_statements_the_server_aborted_are_busy(session: Callable[..., Any]) -> None:
    holder, waiter = session(), session()
    holder.execute("SELECT pg_advisory_lock(8253)")
    waiter.execute("SET lock_timeout = '50ms'")
    lock = raised(lambda: waiter.execute("SELECT pg_advisory_lock(8253)"))
    assert isinstance(lock, psycopg.errors.LockNotAvailable)
    waiter.execute("SET statement_timeout = '50ms'")
    slow = raised(lambda: waiter.execute("SELECT pg_sleep(5)"))
    assert isinstance(slow, psycopg.errors.QueryCanceled)
    for exc in (lock, slow):
        assert both_ways(exc) == (Unavailable.BUSY, Unavailable.BUSY)
    # The connection is still good: a busy server keeps it.
    assert not Unavailable.BUSY.reconnect and waiter.execute("SELECT 1").fetchone() == (1,)


def test_the_requests_own_errors_are_no_outage(session: Callable[..., Any]) -> None:
    conn = session()
    conn.execute("CREATE TEMP TABLE once (a int PRIMARY KEY)")
    conn.execute("INSERT INTO once VALUES (1)")
    for statement in ("INSERT INTO once VALUES (1)", "SELECT 1/0", "SELEC 1", "SELECT nope"):
        exc = raised(lambda statement=statement: conn.execute(statement))
        assert both_ways(exc) == (None, None), statement
    assert unavailable_reason(ValueError("not a database error")) is None
